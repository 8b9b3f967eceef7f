//! Command-line options of `dqplb paths-bench` (clap) and the `Options` a run takes from them;
//! a bad value names its flag.

use std::path::PathBuf;
use std::time::Duration;

use dqplb_engine::{PolicyKind, RehashRule};

use super::hashed::{HealthKnobs, HASHED_IDS};
use super::scenario::ALL_IDS;
use crate::units::{num, ranged};

/// The exit status line under `dqplb paths-bench --help`.
pub(crate) const EXIT: &str = "\
run inside a network namespace: scripts/paths-bench.sh
exit status: 0 ok, 1 --guard failed, 2 bad input or a failed run";

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
        let id = ranged(1u32, 8)(part)?;
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
        let p: PolicyKind = part.parse()?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// A real number in `lo ..= hi`.
fn real(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |v| {
        let x: f64 = num(v)?;
        if !(lo..=hi).contains(&x) {
            return Err(format!("{x} is outside {lo}..={hi}"));
        }
        Ok(x)
    }
}

/// `--segment-bytes`: a multiple of 128 in 128 ..= 1 GiB.
fn segment_bytes(v: &str) -> Result<u32, String> {
    let x = ranged(128u32, 1 << 30)(v)?;
    if !x.is_multiple_of(128) {
        return Err(format!("{x} is not a multiple of 128"));
    }
    Ok(x)
}

/// `--rehash-ratio`: above 1, at most 1000.
fn rehash_ratio(v: &str) -> Result<f64, String> {
    let x: f64 = num(v)?;
    if !(x > 1.0 && x <= 1000.0) {
        return Err(format!("{x} must be above 1 (at most 1000)"));
    }
    Ok(x)
}

/// The options of `dqplb paths-bench`, as clap reads them (milliseconds, counts); [`Options`]
/// is what the run takes.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub(crate) struct PathsArgs {
    /// Scenario ids 1..8, comma separated, or all; 6, 7 and 8 hash each data stream's source
    /// port onto a path, as ECMP does, and run their own variants (dqplb, +rehash, +isolation,
    /// static-split, round-robin-message; 8: hashed against pinned ports) whatever --policy says
    // (a fully qualified Vec: one value holds the whole list)
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = list_scenarios)]
    scenario: std::vec::Vec<u32>,
    /// dqplb,dqplb-led,static-split,round-robin-message,single-qp or all
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = list_policies)]
    policy: std::vec::Vec<PolicyKind>,
    /// Hashed paths of scenarios 6/7/8 (power of two; default 16 / 8 / 8)
    #[arg(long, value_name = "N", value_parser = ranged(2usize, 64))]
    buckets: Option<usize>,
    /// Re-hash variant: k
    #[arg(long, value_name = "F", value_parser = rehash_ratio, default_value_t = 1.5)]
    rehash_ratio: f64,
    /// Re-hash variant: W slow completions in a row
    #[arg(long, value_name = "N", value_parser = ranged(1u32, 1 << 20), default_value_t = 4)]
    rehash_window: u32,
    /// Re-hash variant: cool-down between re-hashes
    #[arg(long, value_name = "N", value_parser = ranged(0u64, 600_000), default_value_t = 100)]
    rehash_cooldown_ms: u64,
    /// Re-hash variant: at most N re-hashes a minute
    #[arg(long, value_name = "N", value_parser = ranged(1u32, 64), default_value_t = 8)]
    rehash_budget: u32,
    /// Isolation variant: a segment unacknowledged this long fails its stream
    #[arg(long, value_name = "N", value_parser = ranged(1u64, 600_000), default_value_t = 100)]
    stall_timeout_ms: u64,
    /// Length of each trial
    #[arg(long, value_name = "N", value_parser = ranged(200u64, 600_000), default_value_t = 3000)]
    duration_ms: u64,
    /// Start of the measured window
    #[arg(long, value_name = "N", value_parser = ranged(0u64, 600_000), default_value_t = 500)]
    warmup_ms: u64,
    /// Rate of one full path in Mbit/s
    #[arg(long, value_name = "F", value_parser = real(0.1, 100_000.0), default_value_t = 100.0)]
    unit_mbit: f64,
    /// Segment size, multiple of 128
    #[arg(long, value_name = "N", value_parser = segment_bytes, default_value_t = 65536)]
    segment_bytes: u32,
    /// Segments in flight per QP (default 4; scenario 5 from the cross-dc plan)
    #[arg(long, value_name = "N", value_parser = ranged(1u32, 256))]
    outstanding: Option<u32>,
    /// Message size
    #[arg(long, value_name = "N", value_parser = ranged(128usize, 1 << 30), default_value_t = 1 << 20)]
    message_bytes: usize,
    /// Messages posted on each side
    #[arg(long, value_name = "N", value_parser = ranged(1usize, 4096), default_value_t = 16)]
    inflight: usize,
    /// Rate of the slow / degraded path over a full one
    #[arg(long, value_name = "F", value_parser = real(0.001, 1.0), default_value_t = 0.1)]
    slow_fraction: f64,
    /// Counter sampling period
    #[arg(long, value_name = "N", value_parser = ranged(1u64, 1000), default_value_t = 10)]
    sample_ms: u64,
    /// Sleep of a thread whose pass moved nothing
    #[arg(long, value_name = "N", value_parser = ranged(0u64, 100_000), default_value_t = 50)]
    idle_us: u64,
    /// Source port of the control stream; QP i uses P+1+i
    #[arg(long, value_name = "P", value_parser = ranged(1024u16, 65000), default_value_t = 20000)]
    port_base: u16,
    /// SO_SNDBUF/SO_RCVBUF (0: kernel autotuning)
    #[arg(long, value_name = "N", value_parser = ranged(0usize, i32::MAX as usize), default_value_t = 0)]
    socket_buffer_bytes: usize,
    /// Do not install tc classes (measures the unshaped ceiling)
    #[arg(long)]
    no_shape: bool,
    /// Write paths-*.csv there
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Write paths-*.svg there
    #[arg(long, value_name = "DIR")]
    img_dir: Option<PathBuf>,
    /// Exit 1 if dqplb reaches less than F of the ideal in any scenario
    #[arg(long, value_name = "F", value_parser = real(0.0, 1.0))]
    guard: Option<f64>,
}

impl PathsArgs {
    /// The run's options; Err(message) if the options contradict each other.
    pub(crate) fn options(self) -> Result<Options, String> {
        if self.warmup_ms >= self.duration_ms {
            return Err(format!(
                "--warmup-ms {} must be below --duration-ms {}",
                self.warmup_ms, self.duration_ms
            ));
        }
        let rule = Options::default().health.rule;
        Ok(Options {
            scenarios: self.scenario,
            policies: self.policy,
            duration: Duration::from_millis(self.duration_ms),
            warmup: Duration::from_millis(self.warmup_ms),
            unit_mbit: self.unit_mbit,
            segment_bytes: self.segment_bytes,
            outstanding: self.outstanding,
            message_bytes: self.message_bytes,
            inflight: self.inflight,
            slow_fraction: self.slow_fraction,
            sample_every: Duration::from_millis(self.sample_ms),
            idle_sleep: Duration::from_micros(self.idle_us),
            port_base: self.port_base,
            socket_buffer_bytes: self.socket_buffer_bytes,
            shape: !self.no_shape,
            data_dir: self.data_dir,
            img_dir: self.img_dir,
            guard: self.guard,
            buckets: self.buckets,
            health: HealthKnobs {
                rule: RehashRule {
                    ratio: self.rehash_ratio,
                    window: self.rehash_window,
                    cooldown: self.rehash_cooldown_ms * 1_000_000,
                    budget: self.rehash_budget,
                    ..rule
                },
                stall_timeout_ms: self.stall_timeout_ms,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, Cmd};

    /// `dqplb paths-bench ARGS` parsed and turned into options; Err(the message).
    fn p(a: &[&str]) -> Result<Options, String> {
        let mut all = vec!["paths-bench"];
        all.extend(a);
        match parse(&all).map_err(|e| e.to_string())? {
            Cmd::PathsBench(args) => args.options(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(p(&[]).unwrap(), Options::default());
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
            "--rehash-cooldown-ms",
            "7",
        ])
        .unwrap();
        assert_eq!(o.scenarios, vec![2, 4]);
        assert_eq!(o.policies, vec![PolicyKind::Dqplb, PolicyKind::StaticSplit]);
        assert_eq!(o.duration, Duration::from_millis(1500));
        assert_eq!(o.guard, Some(0.8));
        assert_eq!(o.health.rule.cooldown, 7_000_000);
        assert!(!o.shape);
        // The last of a repeated option wins.
        assert_eq!(
            p(&["--scenario", "1", "--scenario", "all"])
                .unwrap()
                .scenarios,
            all_ids()
        );
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, needle) in [
            (
                &["--scenario", "9"][..],
                "'--scenario <LIST>': 9 is outside 1..=8",
            ),
            (
                &["--rehash-ratio", "1"],
                "'--rehash-ratio <F>': 1 must be above 1",
            ),
            (
                &["--buckets", "100"],
                "'--buckets <N>': 100 is outside 2..=64",
            ),
            (&["--policy", "spray"], "'--policy <LIST>': unknown policy"),
            (
                &["--segment-bytes", "1000"],
                "1000 is not a multiple of 128",
            ),
            (
                &["--duration-ms"],
                "a value is required for '--duration-ms <N>'",
            ),
            (
                &["--warmup-ms", "4000"],
                "--warmup-ms 4000 must be below --duration-ms 3000",
            ),
            (&["--frobnicate", "1"], "unexpected argument '--frobnicate'"),
            (&["--unit-mbit", "x"], "'x' is not a valid number"),
            (&["--guard", "1.5"], "1.5 is outside 0..=1"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
