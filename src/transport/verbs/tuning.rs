//! Queue-pair knobs shared with NCCL's IB transport (NCCL_IB_GID_INDEX, _TC, _SL, _TIMEOUT,
//! _RETRY_CNT): parsed once from the environment (or a lookup function in tests), range-checked.

use super::error::{Result, VerbsError};

/// Knobs applied when connecting RC QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpTuning {
    /// GID index forced by NCCL_IB_GID_INDEX (None or a negative value = automatic choice).
    pub gid_index: Option<u32>,
    /// IP traffic class (DSCP << 2 | ECN) from NCCL_IB_TC, default 0.
    pub traffic_class: u8,
    /// Service level from NCCL_IB_SL, default 0.
    pub service_level: u8,
    /// Local ACK timeout exponent (4.096 us * 2^timeout) from NCCL_IB_TIMEOUT, default 20, 1..=31.
    pub timeout: u8,
    /// Transport retry count from NCCL_IB_RETRY_CNT, default 7, 0..=7.
    pub retry_cnt: u8,
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            gid_index: None,
            traffic_class: 0,
            service_level: 0,
            timeout: 20,
            retry_cnt: 7,
        }
    }
}

fn parse_int(var: &'static str, value: &str) -> Result<i64> {
    value.trim().parse::<i64>().map_err(|_| VerbsError::Config {
        var,
        value: value.to_string(),
        reason: "not an integer",
    })
}

fn ranged(var: &'static str, value: &str, lo: i64, hi: i64, reason: &'static str) -> Result<u8> {
    let v = parse_int(var, value)?;
    if v < lo || v > hi {
        return Err(VerbsError::Config {
            var,
            value: value.to_string(),
            reason,
        });
    }
    Ok(v as u8)
}

impl QpTuning {
    /// Reads the knobs from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the knobs through `get` (name -> value); unset names keep their defaults.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut t = QpTuning::default();
        if let Some(v) = get("NCCL_IB_GID_INDEX") {
            let i = parse_int("NCCL_IB_GID_INDEX", &v)?;
            if i > i64::from(u16::MAX) {
                return Err(VerbsError::Config {
                    var: "NCCL_IB_GID_INDEX",
                    value: v,
                    reason: "GID index above 65535",
                });
            }
            t.gid_index = u32::try_from(i).ok();
        }
        if let Some(v) = get("NCCL_IB_TC") {
            t.traffic_class = ranged("NCCL_IB_TC", &v, 0, 255, "must be 0..=255")?;
        }
        if let Some(v) = get("NCCL_IB_SL") {
            t.service_level = ranged("NCCL_IB_SL", &v, 0, 15, "must be 0..=15")?;
        }
        if let Some(v) = get("NCCL_IB_TIMEOUT") {
            t.timeout = ranged("NCCL_IB_TIMEOUT", &v, 1, 31, "must be 1..=31")?;
        }
        if let Some(v) = get("NCCL_IB_RETRY_CNT") {
            t.retry_cnt = ranged("NCCL_IB_RETRY_CNT", &v, 0, 7, "must be 0..=7")?;
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<QpTuning> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        QpTuning::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_match_nccl() {
        let t = with(&[]).expect("defaults");
        assert_eq!(t, QpTuning::default());
        assert_eq!((t.timeout, t.retry_cnt, t.traffic_class), (20, 7, 0));
        assert_eq!(t.gid_index, None);
    }

    #[test]
    fn values_are_read() {
        let t = with(&[
            ("NCCL_IB_GID_INDEX", "3"),
            ("NCCL_IB_TC", "106"),
            ("NCCL_IB_SL", "5"),
            ("NCCL_IB_TIMEOUT", "22"),
            ("NCCL_IB_RETRY_CNT", "3"),
        ])
        .expect("valid");
        assert_eq!(t.gid_index, Some(3));
        assert_eq!(
            (t.traffic_class, t.service_level, t.timeout, t.retry_cnt),
            (106, 5, 22, 3)
        );
        assert_eq!(
            with(&[("NCCL_IB_GID_INDEX", "-1")])
                .expect("auto")
                .gid_index,
            None
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (k, v) in [
            ("NCCL_IB_TIMEOUT", "0"),
            ("NCCL_IB_TIMEOUT", "32"),
            ("NCCL_IB_RETRY_CNT", "8"),
            ("NCCL_IB_TC", "256"),
            ("NCCL_IB_SL", "x"),
            ("NCCL_IB_GID_INDEX", "70000"),
        ] {
            let err = with(&[(k, v)]).unwrap_err();
            assert!(err.to_string().contains(k), "{err}");
        }
    }
}
