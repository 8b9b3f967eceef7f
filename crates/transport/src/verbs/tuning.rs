//! The NCCL_IB_* knobs of the verbs path, read the way NCCL's net_ib reads them (GID choice, TC, SL,
//! timeouts, pkey, relaxed ordering, NCCL_IB_DISABLE): parsed once, range-checked, errors named.

use super::error::{Result, VerbsError};
use super::sysfs::{AddrFamily, AddrRange, GidPolicy};

/// NCCL_IB_PCI_RELAXED_ORDERING: register memory with IBV_ACCESS_RELAXED_ORDERING or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelaxedOrdering {
    /// 0: never.
    Off,
    /// 1: always (init fails when libibverbs lacks `ibv_reg_mr_iova2@IBVERBS_1.8`).
    On,
    /// 2 (default): when libibverbs has `ibv_reg_mr_iova2` (the flag is in the optional range,
    /// which libibverbs and the kernel drop where the device cannot do it).
    Auto,
}

/// Knobs applied when choosing GIDs, connecting RC QPs and registering memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpTuning {
    /// GID index forced by NCCL_IB_GID_INDEX on RoCE ports (None or -1 = automatic choice).
    pub gid_index: Option<u32>,
    /// How the automatic GID choice ranks entries (NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE,
    /// NCCL_IB_ROCE_VERSION_NUM).
    pub gid_policy: GidPolicy,
    /// IP traffic class (DSCP << 2 | ECN) of the data QPs from NCCL_IB_TC, default 0.
    pub traffic_class: u8,
    /// Traffic class of the control (FIFO) QP from NCCL_IB_FIFO_TC, default NCCL_IB_TC.
    pub fifo_traffic_class: u8,
    /// Service level from NCCL_IB_SL, default 0.
    pub service_level: u8,
    /// Local ACK timeout exponent (4.096 us * 2^timeout; 0 = wait forever) from NCCL_IB_TIMEOUT,
    /// default 20, 0..=31.
    pub timeout: u8,
    /// Transport retry count from NCCL_IB_RETRY_CNT, default 7, 0..=7.
    pub retry_cnt: u8,
    /// P_Key table index from NCCL_IB_PKEY, default 0.
    pub pkey_index: u16,
    /// NCCL_IB_PCI_RELAXED_ORDERING, default Auto.
    pub relaxed_ordering: RelaxedOrdering,
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            gid_index: None,
            gid_policy: GidPolicy::default(),
            traffic_class: 0,
            fifo_traffic_class: 0,
            service_level: 0,
            timeout: 20,
            retry_cnt: 7,
            pkey_index: 0,
            relaxed_ordering: RelaxedOrdering::Auto,
        }
    }
}

fn bad(var: &'static str, value: &str, reason: &'static str) -> VerbsError {
    VerbsError::Config {
        var,
        value: value.to_string(),
        reason,
    }
}

fn parse_int(var: &'static str, value: &str) -> Result<i64> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| bad(var, value, "not an integer"))
}

fn ranged(var: &'static str, value: &str, lo: i64, hi: i64, reason: &'static str) -> Result<i64> {
    let v = parse_int(var, value)?;
    if v < lo || v > hi {
        return Err(bad(var, value, reason));
    }
    Ok(v)
}

/// `get(name)` with empty or blank values treated as unset (as NCCL's parameter loader does).
fn lookup(get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name).filter(|v| !v.trim().is_empty())
}

/// Parses "a.b.c.d/len" or "x:y::z/len" for `family` (NCCL_IB_ADDR_RANGE).
fn parse_range(value: &str, family: AddrFamily) -> Result<AddrRange> {
    const VAR: &str = "NCCL_IB_ADDR_RANGE";
    let (addr, len) = value
        .trim()
        .split_once('/')
        .ok_or_else(|| bad(VAR, value, "expected ADDRESS/PREFIX-LENGTH"))?;
    let prefix_len: u8 = len
        .parse()
        .map_err(|_| bad(VAR, value, "prefix length is not a number"))?;
    let mut bytes = [0u8; 16];
    match family {
        AddrFamily::Inet => {
            let a: std::net::Ipv4Addr = addr.parse().map_err(|_| {
                bad(
                    VAR,
                    value,
                    "not an IPv4 address (NCCL_IB_ADDR_FAMILY=AF_INET)",
                )
            })?;
            if prefix_len > 32 {
                return Err(bad(VAR, value, "IPv4 prefix length above 32"));
            }
            // compared against the IPv4-mapped GID ::ffff:a.b.c.d
            bytes[10] = 0xff;
            bytes[11] = 0xff;
            bytes[12..].copy_from_slice(&a.octets());
        }
        AddrFamily::Inet6 => {
            let a: std::net::Ipv6Addr = addr.parse().map_err(|_| {
                bad(
                    VAR,
                    value,
                    "not an IPv6 address (NCCL_IB_ADDR_FAMILY=AF_INET6)",
                )
            })?;
            if prefix_len > 128 {
                return Err(bad(VAR, value, "IPv6 prefix length above 128"));
            }
            bytes = a.octets();
        }
    }
    Ok(AddrRange {
        family,
        addr: bytes,
        prefix_len,
    })
}

/// NCCL_IB_DISABLE from the process environment: true = offer no RDMA devices at all.
pub fn ib_disabled_from_env() -> Result<bool> {
    ib_disabled(|k| std::env::var(k).ok())
}

/// NCCL_IB_DISABLE through `get`: any non-zero integer disables RDMA (as in NCCL).
pub fn ib_disabled(get: impl Fn(&str) -> Option<String>) -> Result<bool> {
    match lookup(&get, "NCCL_IB_DISABLE") {
        Some(v) => Ok(parse_int("NCCL_IB_DISABLE", &v)? != 0),
        None => Ok(false),
    }
}

impl QpTuning {
    /// Reads the knobs from the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the knobs through `get` (name -> value); unset or empty names keep their defaults.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut t = QpTuning::default();
        if let Some(v) = lookup(&get, "NCCL_IB_GID_INDEX") {
            let i = ranged(
                "NCCL_IB_GID_INDEX",
                &v,
                -1,
                i64::from(u16::MAX),
                "must be -1 (automatic) or 0..=65535",
            )?;
            t.gid_index = u32::try_from(i).ok();
        }
        if let Some(v) = lookup(&get, "NCCL_IB_ROCE_VERSION_NUM") {
            t.gid_policy.roce_version =
                ranged("NCCL_IB_ROCE_VERSION_NUM", &v, 1, 2, "must be 1 or 2")? as u8;
        }
        if let Some(v) = lookup(&get, "NCCL_IB_ADDR_FAMILY") {
            t.gid_policy.family = match v.trim() {
                "AF_INET" => AddrFamily::Inet,
                "AF_INET6" => AddrFamily::Inet6,
                _ => {
                    return Err(bad(
                        "NCCL_IB_ADDR_FAMILY",
                        &v,
                        "must be AF_INET or AF_INET6",
                    ))
                }
            };
        }
        if let Some(v) = lookup(&get, "NCCL_IB_ADDR_RANGE") {
            t.gid_policy.range = Some(parse_range(&v, t.gid_policy.family)?);
        }
        // NCCL's -1 means "not set" for TC, FIFO_TC and SL
        if let Some(v) = lookup(&get, "NCCL_IB_TC") {
            let tc = ranged("NCCL_IB_TC", &v, -1, 255, "must be -1 or 0..=255")?;
            t.traffic_class = u8::try_from(tc).unwrap_or(0);
        }
        t.fifo_traffic_class = t.traffic_class;
        if let Some(v) = lookup(&get, "NCCL_IB_FIFO_TC") {
            let tc = ranged("NCCL_IB_FIFO_TC", &v, -1, 255, "must be -1 or 0..=255")?;
            if let Ok(tc) = u8::try_from(tc) {
                t.fifo_traffic_class = tc;
            }
        }
        if let Some(v) = lookup(&get, "NCCL_IB_SL") {
            let sl = ranged("NCCL_IB_SL", &v, -1, 15, "must be -1 or 0..=15")?;
            t.service_level = u8::try_from(sl).unwrap_or(0);
        }
        if let Some(v) = lookup(&get, "NCCL_IB_TIMEOUT") {
            t.timeout = ranged(
                "NCCL_IB_TIMEOUT",
                &v,
                0,
                31,
                "must be 0..=31 (0 = no ACK timeout)",
            )? as u8;
        }
        if let Some(v) = lookup(&get, "NCCL_IB_RETRY_CNT") {
            t.retry_cnt = ranged("NCCL_IB_RETRY_CNT", &v, 0, 7, "must be 0..=7")? as u8;
        }
        if let Some(v) = lookup(&get, "NCCL_IB_PKEY") {
            t.pkey_index = ranged(
                "NCCL_IB_PKEY",
                &v,
                0,
                i64::from(u16::MAX),
                "must be a P_Key index 0..=65535",
            )? as u16;
        }
        if let Some(v) = lookup(&get, "NCCL_IB_PCI_RELAXED_ORDERING") {
            t.relaxed_ordering = match ranged(
                "NCCL_IB_PCI_RELAXED_ORDERING",
                &v,
                0,
                2,
                "must be 0 (off), 1 (on) or 2 (auto)",
            )? {
                0 => RelaxedOrdering::Off,
                1 => RelaxedOrdering::On,
                _ => RelaxedOrdering::Auto,
            };
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
        assert_eq!(
            (t.fifo_traffic_class, t.service_level, t.pkey_index),
            (0, 0, 0)
        );
        assert_eq!(t.gid_index, None);
        assert_eq!(t.gid_policy.family, AddrFamily::Inet);
        assert_eq!(t.gid_policy.roce_version, 2);
        assert_eq!(t.gid_policy.range, None);
        assert_eq!(t.relaxed_ordering, RelaxedOrdering::Auto);
        // empty values count as unset, as in NCCL
        assert_eq!(with(&[("NCCL_IB_TIMEOUT", "")]).expect("empty"), t);
    }

    #[test]
    fn values_are_read() {
        let t = with(&[
            ("NCCL_IB_GID_INDEX", "3"),
            ("NCCL_IB_TC", "106"),
            ("NCCL_IB_SL", "5"),
            ("NCCL_IB_TIMEOUT", "22"),
            ("NCCL_IB_RETRY_CNT", "3"),
            ("NCCL_IB_PKEY", "2"),
            ("NCCL_IB_ROCE_VERSION_NUM", "1"),
            ("NCCL_IB_PCI_RELAXED_ORDERING", "0"),
        ])
        .expect("valid");
        assert_eq!(t.gid_index, Some(3));
        assert_eq!(
            (t.traffic_class, t.service_level, t.timeout, t.retry_cnt),
            (106, 5, 22, 3)
        );
        assert_eq!(t.fifo_traffic_class, 106, "FIFO TC follows NCCL_IB_TC");
        assert_eq!(t.pkey_index, 2);
        assert_eq!(t.gid_policy.roce_version, 1);
        assert_eq!(t.relaxed_ordering, RelaxedOrdering::Off);
        let t = with(&[("NCCL_IB_TC", "106"), ("NCCL_IB_FIFO_TC", "192")]).expect("valid");
        assert_eq!((t.traffic_class, t.fifo_traffic_class), (106, 192));
        let t = with(&[
            ("NCCL_IB_TC", "-1"),
            ("NCCL_IB_SL", "-1"),
            ("NCCL_IB_FIFO_TC", "-1"),
        ])
        .expect("NCCL's 'unset' values");
        assert_eq!(
            (t.traffic_class, t.fifo_traffic_class, t.service_level),
            (0, 0, 0)
        );
        assert_eq!(
            with(&[("NCCL_IB_GID_INDEX", "-1")])
                .expect("auto")
                .gid_index,
            None
        );
        let t = with(&[("NCCL_IB_TIMEOUT", "0")]).expect("0 = no timeout");
        assert_eq!(t.timeout, 0);
        let t = with(&[("NCCL_IB_PCI_RELAXED_ORDERING", "1")]).expect("on");
        assert_eq!(t.relaxed_ordering, RelaxedOrdering::On);
    }

    #[test]
    fn address_family_and_range() {
        let t = with(&[("NCCL_IB_ADDR_RANGE", "10.77.0.0/16")]).expect("v4 range");
        let r = t.gid_policy.range.expect("range");
        assert_eq!(r.family, AddrFamily::Inet);
        assert_eq!(r.prefix_len, 16);
        assert_eq!(&r.addr[10..], &[0xff, 0xff, 10, 77, 0, 0]);
        let t = with(&[
            ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
            ("NCCL_IB_ADDR_RANGE", "fd00::/8"),
        ])
        .expect("v6 range");
        assert_eq!(t.gid_policy.family, AddrFamily::Inet6);
        let r = t.gid_policy.range.expect("range");
        assert_eq!((r.addr[0], r.prefix_len), (0xfd, 8));
        for (fam, range) in [
            ("AF_INET", "fd00::/8"),
            ("AF_INET", "10.0.0.0/33"),
            ("AF_INET", "10.0.0.0"),
            ("AF_INET6", "10.0.0.0/8"),
            ("AF_INET6", "fd00::/129"),
        ] {
            let err = with(&[("NCCL_IB_ADDR_FAMILY", fam), ("NCCL_IB_ADDR_RANGE", range)])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("NCCL_IB_ADDR_RANGE") && err.contains(range),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (k, v) in [
            ("NCCL_IB_TIMEOUT", "-1"),
            ("NCCL_IB_TIMEOUT", "32"),
            ("NCCL_IB_RETRY_CNT", "8"),
            ("NCCL_IB_TC", "256"),
            ("NCCL_IB_TC", "-2"),
            ("NCCL_IB_FIFO_TC", "300"),
            ("NCCL_IB_SL", "x"),
            ("NCCL_IB_SL", "16"),
            ("NCCL_IB_GID_INDEX", "70000"),
            ("NCCL_IB_GID_INDEX", "-2"),
            ("NCCL_IB_ROCE_VERSION_NUM", "3"),
            ("NCCL_IB_ADDR_FAMILY", "AF_UNIX"),
            ("NCCL_IB_PKEY", "65536"),
            ("NCCL_IB_PCI_RELAXED_ORDERING", "3"),
        ] {
            let err = with(&[(k, v)]).unwrap_err().to_string();
            assert!(err.contains(k), "{err}");
            assert!(err.contains(&format!("{v:?}")), "{err}");
        }
    }

    #[test]
    fn ib_disable_is_read() {
        let get = |v: &'static str| move |k: &str| (k == "NCCL_IB_DISABLE").then(|| v.to_string());
        assert!(!ib_disabled(|_| None).expect("unset"));
        assert!(!ib_disabled(get("0")).expect("0"));
        assert!(ib_disabled(get("1")).expect("1"));
        assert!(!ib_disabled(get("")).expect("empty"));
        let err = ib_disabled(get("yes")).unwrap_err().to_string();
        assert!(err.contains("NCCL_IB_DISABLE"), "{err}");
    }
}
