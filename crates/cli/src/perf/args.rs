//! Command-line options of `dqplb perf`: parsing with K/M/G byte suffixes, validation, and the
//! round trip back to an argument list for the child processes.

use std::fmt;

use dqplb_config::PolicyName;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Csv,
    Json,
}

/// Every option of `dqplb perf`; `None` means "the plugin's configured value" or "automatic".
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PerfArgs {
    /// `--transport socket|verbs`: the plugin's data path (NCCL_DQPLB_TRANSPORT for the children).
    pub verbs: bool,
    pub policy: Option<String>,
    pub qps: Option<u32>,
    pub segment: Option<u64>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub iters: Option<u64>,
    pub warmup: Option<u64>,
    pub inflight: usize,
    pub raw_tcp: bool,
    /// `--raw-threads one`: drive every raw stream from one polling thread (as the plugin is
    /// driven) instead of one blocking thread per stream.
    pub raw_one_thread: bool,
    pub latency: bool,
    pub check: bool,
    pub format: Format,
    /// `--recv-idle-us N` / `--send-idle-us N`: in the bandwidth sweep, sleep N us after an idle
    /// poll instead of yielding (0: yield, as NCCL's proxy thread does). An experiment knob: it
    /// shows what a side's polling takes from the device when the device is emulated on the
    /// same CPUs (Soft-RoCE), not a mode NCCL has.
    pub recv_idle_us: u64,
    pub send_idle_us: u64,
}

impl Default for PerfArgs {
    fn default() -> Self {
        PerfArgs {
            verbs: false,
            policy: None,
            qps: None,
            segment: None,
            min_bytes: 8,
            max_bytes: 64 << 20,
            step_factor: 2,
            iters: None,
            warmup: None,
            inflight: 4,
            raw_tcp: false,
            raw_one_thread: false,
            latency: false,
            check: true,
            format: Format::Table,
            recv_idle_us: 0,
            send_idle_us: 0,
        }
    }
}

/// A bad command line: the message names the option and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArgError(pub String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Largest message the v8 ABI can carry (isend's size is a C int).
pub(crate) const MAX_MESSAGE: u64 = i32::MAX as u64;

/// Parses "4096", "64K", "1M", "2G" (binary multiples, case-insensitive, optional "B"/"iB").
pub(crate) fn parse_bytes(opt: &str, s: &str) -> Result<u64, ArgError> {
    let bad = || {
        ArgError(format!(
            "{opt}: '{s}' is not a byte count (examples: 8, 64K, 1M, 2G)"
        ))
    };
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

fn parse_num(opt: &str, s: &str) -> Result<u64, ArgError> {
    s.parse()
        .map_err(|_| ArgError(format!("{opt}: '{s}' is not a non-negative integer")))
}

impl PerfArgs {
    /// Parses the arguments after `perf`.
    pub(crate) fn parse(args: &[String]) -> Result<PerfArgs, ArgError> {
        let mut a = PerfArgs::default();
        let mut it = args.iter();
        while let Some(opt) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| ArgError(format!("{name} needs a value")))
            };
            match opt.as_str() {
                "--transport" => {
                    let v = value(opt)?;
                    a.verbs = match v.as_str() {
                        "socket" | "tcp" => false,
                        "verbs" => true,
                        _ => {
                            return Err(ArgError(format!(
                                "--transport: '{v}' is not supported (socket or verbs)"
                            )))
                        }
                    };
                }
                "--peers" => {
                    let v = value(opt)?;
                    if v != "local" {
                        return Err(ArgError(format!(
                            "--peers: '{v}' is not supported (only 'local': both on this machine)"
                        )));
                    }
                }
                "--policy" => {
                    let v = value(opt)?;
                    // The config's policy names: the plugin reads the value from there.
                    let names = PolicyName::ALL.map(PolicyName::as_str);
                    if !names.contains(&v.as_str()) {
                        return Err(ArgError(format!(
                            "--policy: '{v}' is not one of {}",
                            names.join(", ")
                        )));
                    }
                    a.policy = Some(v);
                }
                "--qps" => {
                    let v = parse_num(opt, &value(opt)?)?;
                    if !(1..=128).contains(&v) {
                        return Err(ArgError(format!("--qps: {v} is outside 1..=128")));
                    }
                    a.qps = Some(v as u32);
                }
                "--segment" => {
                    let v = parse_bytes(opt, &value(opt)?)?;
                    if v == 0 || v > u32::MAX as u64 {
                        return Err(ArgError(format!(
                            "--segment: {v} bytes is outside 1..=4G-1"
                        )));
                    }
                    a.segment = Some(v);
                }
                "--min-bytes" => a.min_bytes = parse_bytes(opt, &value(opt)?)?,
                "--max-bytes" => a.max_bytes = parse_bytes(opt, &value(opt)?)?,
                "--step-factor" => a.step_factor = parse_num(opt, &value(opt)?)?,
                "--iters" => a.iters = Some(parse_num(opt, &value(opt)?)?),
                "--warmup" => a.warmup = Some(parse_num(opt, &value(opt)?)?),
                "--inflight" => {
                    let v = parse_num(opt, &value(opt)?)?;
                    if !(1..=32).contains(&v) {
                        return Err(ArgError(format!(
                            "--inflight: {v} is outside 1..=32 (NCCL's request limit)"
                        )));
                    }
                    a.inflight = v as usize;
                }
                "--format" => {
                    a.format = match value(opt)?.as_str() {
                        "table" => Format::Table,
                        "csv" => Format::Csv,
                        "json" => Format::Json,
                        v => {
                            return Err(ArgError(format!(
                                "--format: '{v}' is not table, csv or json"
                            )))
                        }
                    }
                }
                "--raw-tcp" => a.raw_tcp = true,
                "--raw-threads" => {
                    a.raw_one_thread = match value(opt)?.as_str() {
                        "per-stream" => false,
                        "one" => true,
                        v => {
                            return Err(ArgError(format!(
                                "--raw-threads: '{v}' is not per-stream or one"
                            )))
                        }
                    }
                }
                "--latency" => a.latency = true,
                "--no-check" => a.check = false,
                "--recv-idle-us" => a.recv_idle_us = parse_num(opt, &value(opt)?)?,
                "--send-idle-us" => a.send_idle_us = parse_num(opt, &value(opt)?)?,
                other => {
                    return Err(ArgError(format!(
                        "unknown option '{other}' (see dqplb perf --help)"
                    )))
                }
            }
        }
        a.validate()?;
        Ok(a)
    }

    fn validate(&self) -> Result<(), ArgError> {
        if self.min_bytes > self.max_bytes {
            return Err(ArgError(format!(
                "--min-bytes {} is larger than --max-bytes {}",
                self.min_bytes, self.max_bytes
            )));
        }
        if self.max_bytes > MAX_MESSAGE {
            return Err(ArgError(format!(
                "--max-bytes {} exceeds the v8 ABI's message limit {MAX_MESSAGE}",
                self.max_bytes
            )));
        }
        if self.step_factor < 2 {
            return Err(ArgError(format!(
                "--step-factor {} must be at least 2",
                self.step_factor
            )));
        }
        if self.iters == Some(0) {
            return Err(ArgError("--iters must be at least 1".into()));
        }
        Ok(())
    }

    /// The message sizes of the sweep: min, min*f, ... up to max (max always included).
    pub(crate) fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = self.min_bytes;
        loop {
            v.push(s);
            if s >= self.max_bytes {
                break;
            }
            s = match s.checked_mul(self.step_factor) {
                Some(n) if s > 0 => n.min(self.max_bytes),
                _ => self.max_bytes.max(1),
            };
        }
        v
    }

    /// Measured iterations for `size`: --iters, or about 256 MiB (10..=1000 iterations) per size.
    pub(crate) fn iters_for(&self, size: u64) -> u64 {
        self.iters
            .unwrap_or_else(|| ((256u64 << 20) / size.max(1)).clamp(10, 1000))
    }

    /// Warm-up iterations for `size`: --warmup, or a tenth of the measured ones (1..=20).
    pub(crate) fn warmup_for(&self, size: u64) -> u64 {
        self.warmup
            .unwrap_or_else(|| (self.iters_for(size) / 10).clamp(1, 20))
    }

    /// The argument list that reproduces these options (passed to the child processes).
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        let mut push = |k: &str, val: String| {
            v.push(k.to_string());
            v.push(val);
        };
        if let Some(p) = &self.policy {
            push("--policy", p.clone());
        }
        if let Some(q) = self.qps {
            push("--qps", q.to_string());
        }
        if let Some(s) = self.segment {
            push("--segment", s.to_string());
        }
        push("--min-bytes", self.min_bytes.to_string());
        push("--max-bytes", self.max_bytes.to_string());
        push("--step-factor", self.step_factor.to_string());
        if let Some(i) = self.iters {
            push("--iters", i.to_string());
        }
        if let Some(w) = self.warmup {
            push("--warmup", w.to_string());
        }
        push("--inflight", self.inflight.to_string());
        if self.raw_tcp {
            v.push("--raw-tcp".into());
        }
        if self.raw_one_thread {
            v.push("--raw-threads".into());
            v.push("one".into());
        }
        if self.latency {
            v.push("--latency".into());
        }
        if !self.check {
            v.push("--no-check".into());
        }
        if self.recv_idle_us > 0 {
            v.push("--recv-idle-us".into());
            v.push(self.recv_idle_us.to_string());
        }
        if self.send_idle_us > 0 {
            v.push("--send-idle-us".into());
            v.push(self.send_idle_us.to_string());
        }
        v
    }
}

pub(crate) const USAGE: &str = "usage: dqplb perf [--transport socket|verbs] [--policy dqplb|dqplb-led|static-split|round-robin-message|single-qp]
                  [--qps N] [--segment BYTES] [--min-bytes BYTES] [--max-bytes BYTES]
                  [--step-factor F] [--iters N] [--warmup N] [--inflight N] [--peers local]
                  [--raw-tcp [--raw-threads per-stream|one]] [--latency] [--no-check] [--format table|csv|json]
                  [--recv-idle-us N] [--send-idle-us N]
Moves data between two local processes through the plugin's vtable (or, with --raw-tcp, over
plain TCP streams, as the ceiling: one blocking thread per stream, or with --raw-threads one a
single polling thread as the plugin is driven) and prints size, time, algbw, busbw, #wrong.
BYTES accept K, M, G suffixes (powers of 1024). Defaults: 8 B .. 64 MiB, factor 2, about
256 MiB per size (10..1000 iterations), 4 messages in flight, every receive buffer checked.
--latency: ping-pong round trip of --min-bytes (default 8), plugin and raw TCP (blocking;
--raw-threads one: spinning on a non-blocking socket, as the plugin is polled), median and p99 in us.
--recv-idle-us / --send-idle-us N: that side of the bandwidth sweep sleeps N us after each idle
poll instead of yielding as NCCL's proxy does (an experiment for emulated devices such as
Soft-RoCE, whose work shares the CPUs with the polling processes).";

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn byte_suffixes() {
        assert_eq!(parse_bytes("x", "8").unwrap(), 8);
        assert_eq!(parse_bytes("x", "64K").unwrap(), 65536);
        assert_eq!(parse_bytes("x", "1m").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("x", "2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("x", "3KB").unwrap(), 3072);
        assert!(parse_bytes("x", "1T").is_err());
        assert!(parse_bytes("x", "-1").is_err());
        assert!(parse_bytes("x", "99999999999999999999G").is_err());
    }

    #[test]
    fn sizes_sweep_includes_both_ends() {
        let a = PerfArgs::parse(&args("--min-bytes 8 --max-bytes 100")).unwrap();
        assert_eq!(a.sizes(), vec![8, 16, 32, 64, 100]);
        let b = PerfArgs::parse(&args("--min-bytes 0 --max-bytes 4 --step-factor 4")).unwrap();
        assert_eq!(b.sizes(), vec![0, 4]);
        let d = PerfArgs::default();
        assert_eq!(d.sizes().len(), 24);
    }

    #[test]
    fn bad_arguments_name_the_option() {
        for (line, needle) in [
            ("--policy fastest", "--policy"),
            ("--qps 0", "--qps"),
            ("--min-bytes 2M --max-bytes 1M", "--min-bytes"),
            ("--max-bytes 4G", "--max-bytes"),
            ("--step-factor 1", "--step-factor"),
            ("--inflight 33", "--inflight"),
            ("--format xml", "--format"),
            ("--transport udp", "--transport"),
            ("--peers 10.0.0.2", "--peers"),
            ("--iters", "--iters"),
            ("--bogus", "--bogus"),
            ("--recv-idle-us 5us", "--recv-idle-us: '5us'"),
            ("--send-idle-us", "--send-idle-us needs a value"),
        ] {
            let e = PerfArgs::parse(&args(line)).unwrap_err();
            assert!(e.0.contains(needle), "{line}: {e}");
        }
    }

    #[test]
    fn args_round_trip() {
        let a = PerfArgs::parse(&args("--policy single-qp --qps 3 --segment 64K --min-bytes 1K --max-bytes 1M --iters 7 --warmup 2 --inflight 8 --raw-tcp --raw-threads one --no-check --recv-idle-us 50 --send-idle-us 7")).unwrap();
        assert_eq!((a.recv_idle_us, a.send_idle_us), (50, 7));
        assert_eq!(PerfArgs::parse(&a.to_args()).unwrap(), a);
    }

    #[test]
    fn adaptive_iterations() {
        let a = PerfArgs::default();
        assert_eq!(a.iters_for(8), 1000);
        assert_eq!(a.iters_for(64 << 20), 10);
        assert_eq!(a.iters_for(1 << 20), 256);
        assert_eq!(a.warmup_for(1 << 20), 20);
    }
}
