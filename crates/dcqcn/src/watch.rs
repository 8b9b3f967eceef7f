//! `--watch`: samples the congestion counters of the checked devices at an interval and prints
//! per-second CNP and ECN-mark rates (what an operator watches while a job runs).

use super::names::COUNTER_NAMES;
use super::reader::{read_ports, Reading, Roots};
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// Counters of one port at one instant, [`COUNTER_NAMES`] order (`None` = unreadable/garbage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSample {
    pub device: String,
    pub port: u32,
    pub values: [Option<u64>; 4],
}

/// Per-second deltas of one port; `None` when a side is unknown or the counter went backwards.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLine {
    pub device: String,
    pub port: u32,
    pub per_sec: [Option<f64>; 4],
}

/// Reads the counters of every port of `devices`.
pub fn sample(roots: &Roots, devices: &[String]) -> Vec<CounterSample> {
    let mut out = Vec::new();
    for dev in devices {
        for p in read_ports(roots, dev) {
            let mut values = [None; 4];
            for (slot, (_, r)) in values.iter_mut().zip(&p.counters) {
                *slot = match r {
                    Reading::Value(v) => Some(*v),
                    _ => None,
                };
            }
            out.push(CounterSample {
                device: dev.clone(),
                port: p.port,
                values,
            });
        }
    }
    out
}

/// Rates between two samples taken `elapsed_s` apart (ports matched by device and port).
pub fn rates(prev: &[CounterSample], cur: &[CounterSample], elapsed_s: f64) -> Vec<RateLine> {
    cur.iter()
        .map(|c| {
            let p = prev
                .iter()
                .find(|p| p.device == c.device && p.port == c.port);
            let mut per_sec = [None; 4];
            for (i, slot) in per_sec.iter_mut().enumerate() {
                *slot = match (p.and_then(|p| p.values[i]), c.values[i]) {
                    (Some(a), Some(b)) if b >= a && elapsed_s > 0.0 => {
                        Some((b - a) as f64 / elapsed_s)
                    }
                    _ => None,
                };
            }
            RateLine {
                device: c.device.clone(),
                port: c.port,
                per_sec,
            }
        })
        .collect()
}

/// One line per port: "t=1.0s mlx5_0 port 1: rp_cnp_handled 12.0/s ...".
pub(crate) fn format_rates(lines: &[RateLine], t_s: f64) -> String {
    let mut out = String::new();
    for l in lines {
        let fields: Vec<String> = COUNTER_NAMES
            .iter()
            .zip(l.per_sec)
            .map(|(n, r)| match r {
                Some(v) => format!("{n} {v:.1}/s"),
                None => format!("{n} ?"),
            })
            .collect();
        out.push_str(&format!(
            "t={t_s:.1}s {} port {}: {}\n",
            l.device,
            l.port,
            fields.join("  ")
        ));
    }
    out
}

/// Samples every `interval` and prints rates; stops after `samples` rate lines when given,
/// otherwise runs until the process is stopped or the output closes.
pub fn watch(
    roots: &Roots,
    devices: &[String],
    interval: Duration,
    samples: Option<u64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let start = Instant::now();
    let mut prev = sample(roots, devices);
    let mut prev_at = Instant::now();
    let mut n = 0u64;
    while samples.is_none_or(|max| n < max) {
        std::thread::sleep(interval);
        let cur = sample(roots, devices);
        let now = Instant::now();
        let dt = now.duration_since(prev_at).as_secs_f64();
        let text = format_rates(
            &rates(&prev, &cur, dt),
            now.duration_since(start).as_secs_f64(),
        );
        out.write_all(text.as_bytes())?;
        out.flush()?;
        prev = cur;
        prev_at = now;
        n += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(values: [Option<u64>; 4]) -> Vec<CounterSample> {
        vec![CounterSample {
            device: "mlx5_0".into(),
            port: 1,
            values,
        }]
    }

    #[test]
    fn rates_per_second_with_unknown_and_reset() {
        let prev = s([Some(100), Some(5), None, Some(50)]);
        let cur = s([Some(300), Some(5), Some(7), Some(10)]);
        let r = rates(&prev, &cur, 2.0);
        assert_eq!(r[0].per_sec, [Some(100.0), Some(0.0), None, None]);
        let text = format_rates(&r, 2.0);
        assert_eq!(
            text,
            "t=2.0s mlx5_0 port 1: rp_cnp_handled 100.0/s  rp_cnp_ignored 0.0/s  np_cnp_sent ?  np_ecn_marked_roce_packets ?\n"
        );
    }
}
