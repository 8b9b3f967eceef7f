//! Command-line options of `dqplb paths-bench`, parsed by hand into `Options` with an error that
//! names the bad flag or value.

use std::path::PathBuf;
use std::time::Duration;

use dqplb_engine::{PolicyKind, RehashRule};

use super::hashed::{HealthKnobs, HASHED_IDS};
use super::scenario::ALL_IDS;

pub(crate) const USAGE: &str =
    "usage: dqplb paths-bench [options]   (run inside a network namespace: scripts/paths-bench.sh)
  --scenario LIST          scenario ids 1..7, comma separated, or all (default all); 6 and 7
                           hash each data stream's source port onto a path, as ECMP does, and
                           run their own variants (dqplb, +rehash, +isolation, static-split,
                           round-robin-message) whatever --policy says
  --policy LIST            dqplb,dqplb-led,static-split,round-robin-message,single-qp or all
                           (default all)
  --buckets N              hashed paths of scenarios 6/7 (power of two; default 16 / 8)
  --rehash-ratio F         re-hash variant: k (default 1.5)
  --rehash-window N        re-hash variant: W slow completions in a row (default 4)
  --rehash-cooldown-ms N   re-hash variant: cool-down between re-hashes (default 100)
  --rehash-budget N        re-hash variant: at most N re-hashes a minute (default 8)
  --stall-timeout-ms N     isolation variant: a segment unacknowledged this long fails its
                           stream (default 100)
  --duration-ms N          length of each trial (default 3000)
  --warmup-ms N            start of the measured window (default 500)
  --unit-mbit F            rate of one full path in Mbit/s (default 100)
  --segment-bytes N        segment size, multiple of 128 (default 65536)
  --outstanding N          segments in flight per QP (default 4; scenario 5 from the cross-dc plan)
  --message-bytes N        message size (default 1048576)
  --inflight N             messages posted on each side (default 16)
  --slow-fraction F        rate of the slow / degraded path over a full one (default 0.1)
  --sample-ms N            counter sampling period (default 10)
  --idle-us N              sleep of a thread whose pass moved nothing (default 50)
  --port-base P            source port of the control stream; QP i uses P+1+i (default 20000)
  --socket-buffer-bytes N  SO_SNDBUF/SO_RCVBUF (default 0: kernel autotuning)
  --no-shape               do not install tc classes (measures the unshaped ceiling)
  --data-dir DIR           write paths-*.csv there
  --img-dir DIR            write paths-*.svg there
  --guard F                exit 1 if dqplb reaches less than F of the ideal in any scenario";

/// Everything `paths-bench` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Options {
    pub scenarios: Vec<u32>,
    pub policies: Vec<PolicyKind>,
    pub duration: Duration,
    pub warmup: Duration,
    pub unit_mbit: f64,
    pub segment_bytes: u32,
    pub outstanding: Option<u32>,
    pub message_bytes: usize,
    pub inflight: usize,
    pub slow_fraction: f64,
    pub sample_every: Duration,
    pub idle_sleep: Duration,
    pub port_base: u16,
    pub socket_buffer_bytes: usize,
    pub shape: bool,
    pub data_dir: Option<PathBuf>,
    pub img_dir: Option<PathBuf>,
    pub guard: Option<f64>,
    pub buckets: Option<usize>,
    pub health: HealthKnobs,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scenarios: all_ids(),
            policies: PolicyKind::ALL.to_vec(),
            duration: Duration::from_millis(3000),
            warmup: Duration::from_millis(500),
            unit_mbit: 100.0,
            segment_bytes: 65536,
            outstanding: None,
            message_bytes: 1 << 20,
            inflight: 16,
            slow_fraction: 0.1,
            sample_every: Duration::from_millis(10),
            idle_sleep: Duration::from_micros(50),
            port_base: 20000,
            socket_buffer_bytes: 0,
            shape: true,
            data_dir: None,
            img_dir: None,
            guard: None,
            buckets: None,
            health: HealthKnobs {
                rule: RehashRule {
                    ratio: 1.5,
                    window: 4,
                    cooldown: 100_000_000,
                    budget: 8,
                    budget_period: 60_000_000_000,
                },
                stall_timeout_ms: 100,
            },
        }
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

fn ranged(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let x: u64 = num(flag, v)?;
    if x < lo || x > hi {
        return Err(format!("{flag}: {x} is outside {lo}..={hi}"));
    }
    Ok(x)
}

/// The per-QP scenarios then the port-hash ones.
fn all_ids() -> Vec<u32> {
    ALL_IDS.iter().chain(HASHED_IDS.iter()).copied().collect()
}

fn list_scenarios(v: &str) -> Result<Vec<u32>, String> {
    if v.trim() == "all" {
        return Ok(all_ids());
    }
    let mut out = Vec::new();
    for part in v.split(',') {
        let id = ranged("--scenario", part, 1, 7)? as u32;
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

fn list_policies(v: &str) -> Result<Vec<PolicyKind>, String> {
    if v.trim() == "all" {
        return Ok(PolicyKind::ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in v.split(',') {
        let p: PolicyKind = part.parse().map_err(|e| format!("--policy: {e}"))?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Parses the arguments after `paths-bench`; `Ok(None)` for --help.
pub(crate) fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let flag = flag.as_str();
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        if flag == "--no-shape" {
            o.shape = false;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag {
            "--scenario" => o.scenarios = list_scenarios(v)?,
            "--policy" => o.policies = list_policies(v)?,
            "--duration-ms" => o.duration = Duration::from_millis(ranged(flag, v, 200, 600_000)?),
            "--warmup-ms" => o.warmup = Duration::from_millis(ranged(flag, v, 0, 600_000)?),
            "--unit-mbit" => {
                let x: f64 = num(flag, v)?;
                if !(0.1..=100_000.0).contains(&x) {
                    return Err(format!("--unit-mbit: {x} is outside 0.1..=100000"));
                }
                o.unit_mbit = x;
            }
            "--segment-bytes" => {
                let x = ranged(flag, v, 128, 1 << 30)? as u32;
                if !x.is_multiple_of(128) {
                    return Err(format!("--segment-bytes: {x} is not a multiple of 128"));
                }
                o.segment_bytes = x;
            }
            "--slow-fraction" => {
                let x: f64 = num(flag, v)?;
                if !(0.001..=1.0).contains(&x) {
                    return Err(format!("--slow-fraction: {x} is outside 0.001..=1"));
                }
                o.slow_fraction = x;
            }
            "--outstanding" => o.outstanding = Some(ranged(flag, v, 1, 256)? as u32),
            "--message-bytes" => o.message_bytes = ranged(flag, v, 128, 1 << 30)? as usize,
            "--inflight" => o.inflight = ranged(flag, v, 1, 4096)? as usize,
            "--sample-ms" => o.sample_every = Duration::from_millis(ranged(flag, v, 1, 1000)?),
            "--idle-us" => o.idle_sleep = Duration::from_micros(ranged(flag, v, 0, 100_000)?),
            "--port-base" => o.port_base = ranged(flag, v, 1024, 65000)? as u16,
            "--socket-buffer-bytes" => {
                o.socket_buffer_bytes = ranged(flag, v, 0, i32::MAX as u64)? as usize
            }
            "--data-dir" => o.data_dir = Some(PathBuf::from(v)),
            "--img-dir" => o.img_dir = Some(PathBuf::from(v)),
            "--buckets" => o.buckets = Some(ranged(flag, v, 2, 64)? as usize),
            "--rehash-ratio" => {
                let x: f64 = num(flag, v)?;
                if !(x > 1.0 && x <= 1000.0) {
                    return Err(format!(
                        "--rehash-ratio: {x} must be above 1 (at most 1000)"
                    ));
                }
                o.health.rule.ratio = x;
            }
            "--rehash-window" => o.health.rule.window = ranged(flag, v, 1, 1 << 20)? as u32,
            "--rehash-cooldown-ms" => {
                o.health.rule.cooldown = ranged(flag, v, 0, 600_000)? * 1_000_000
            }
            "--rehash-budget" => o.health.rule.budget = ranged(flag, v, 1, 64)? as u32,
            "--stall-timeout-ms" => o.health.stall_timeout_ms = ranged(flag, v, 1, 600_000)?,
            "--guard" => {
                let x: f64 = num(flag, v)?;
                if !(0.0..=1.0).contains(&x) {
                    return Err(format!("--guard: {x} is outside 0..=1"));
                }
                o.guard = Some(x);
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if o.warmup >= o.duration {
        return Err(format!(
            "--warmup-ms {} must be below --duration-ms {}",
            o.warmup.as_millis(),
            o.duration.as_millis()
        ));
    }
    Ok(Some(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(a: &[&str]) -> Result<Option<Options>, String> {
        parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(p(&[]).unwrap().unwrap(), Options::default());
        let o = p(&[
            "--scenario",
            "2,4,2",
            "--policy",
            "dqplb,static-split",
            "--duration-ms",
            "1500",
            "--guard",
            "0.8",
            "--no-shape",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(o.scenarios, vec![2, 4]);
        assert_eq!(o.policies, vec![PolicyKind::Dqplb, PolicyKind::StaticSplit]);
        assert_eq!(o.duration, Duration::from_millis(1500));
        assert_eq!(o.guard, Some(0.8));
        assert!(!o.shape);
        assert_eq!(p(&["--help"]).unwrap(), None);
    }

    #[test]
    fn bad_values_name_the_flag() {
        assert!(p(&["--scenario", "8"])
            .unwrap_err()
            .contains("--scenario: 8 is outside 1..=7"));
        assert!(p(&["--rehash-ratio", "1"])
            .unwrap_err()
            .contains("must be above 1"));
        assert!(p(&["--buckets", "100"])
            .unwrap_err()
            .contains("outside 2..=64"));
        assert!(p(&["--policy", "spray"])
            .unwrap_err()
            .contains("--policy: unknown policy"));
        assert!(p(&["--segment-bytes", "1000"])
            .unwrap_err()
            .contains("not a multiple of 128"));
        assert!(p(&["--duration-ms"]).unwrap_err().contains("needs a value"));
        assert!(p(&["--warmup-ms", "4000"])
            .unwrap_err()
            .contains("must be below --duration-ms"));
        assert!(p(&["--frobnicate", "1"])
            .unwrap_err()
            .contains("unknown option --frobnicate"));
        assert!(p(&["--unit-mbit", "x"])
            .unwrap_err()
            .contains("not a valid number"));
    }
}
