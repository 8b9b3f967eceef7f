//! Command-line options of `dqplb perf` (clap; byte sizes with K/M/G suffixes), the checks across
//! options, and the round trip back to an argument list for the child processes.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use dqplb_config::PolicyName;

use crate::units::{bytes, num, ranged};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    #[default]
    Table,
    Csv,
    Json,
}

/// `--transport`: the plugin's data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Transport {
    #[default]
    #[value(alias = "tcp")]
    Socket,
    Verbs,
}

/// `--peers`: where the two processes run (only this machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Peers {
    /// both on this machine
    #[default]
    Local,
}

/// `--units`: how bandwidth is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
pub(crate) enum Units {
    /// gigabytes per second (1e9 bytes), as nccl-tests prints
    #[default]
    #[value(name = "GB/s", alias = "GBps", alias = "gbytes")]
    GBytes,
    /// gigabits per second (1e9 bits), as link speeds and ib_write_bw --report_gbits print
    #[value(name = "Gb/s", alias = "Gbps", alias = "gbits")]
    GBits,
}

impl Units {
    /// Multiplier from GB/s.
    pub(crate) fn factor(self) -> f64 {
        match self {
            Units::GBytes => 1.0,
            Units::GBits => 8.0,
        }
    }

    /// The unit as printed.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Units::GBytes => "GB/s",
            Units::GBits => "Gb/s",
        }
    }

    /// The CSV / JSON column suffix.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Units::GBytes => "gbps",
            Units::GBits => "gbitps",
        }
    }
}

/// `--raw-threads`: how the raw TCP streams are driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum RawThreads {
    /// one blocking thread per stream
    #[default]
    PerStream,
    /// one polling thread for all streams, as the plugin is driven
    One,
}

/// The role of a hidden child process (`dqplb perf __role ROLE OPTIONS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Role {
    BwRecv,
    BwSend,
    LatPing,
    LatPong,
}

impl Role {
    /// The name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::BwRecv => "bw-recv",
            Role::BwSend => "bw-send",
            Role::LatPing => "lat-ping",
            Role::LatPong => "lat-pong",
        }
    }
}

/// The words that start a child process: `dqplb perf __role ROLE [OPTIONS]`.
pub(crate) const CHILD: [&str; 2] = ["perf", "__role"];

/// The command line of a child process (one side of a run: the parent starts two and relays
/// their handles), parsed apart from `dqplb`'s own so that its help, completions and manual
/// page never offer it.
#[derive(Debug, Clone, PartialEq, clap::Parser)]
#[command(name = "dqplb perf __role", args_override_self = true)]
pub(crate) struct ChildCmd {
    #[arg(value_enum)]
    pub(crate) role: Role,
    #[command(flatten)]
    pub(crate) opts: PerfArgs,
}

/// The text under `dqplb perf --help`.
pub(crate) const LONG_ABOUT: &str = "\
Moves data between two local processes through the plugin's vtable (or, with --raw-tcp, over
plain TCP streams, as the ceiling: one blocking thread per stream, or with --raw-threads one a
single polling thread as the plugin is driven) and prints size, time, algbw, busbw, #wrong.
BYTES accept K, M, G suffixes (powers of 1024). Defaults: 8 B .. 64 MiB, factor 2, about
256 MiB per size (10..1000 iterations), 4 messages in flight, every receive buffer checked.
--latency: ping-pong round trip of --min-bytes (default 8), plugin and raw TCP (blocking;
--raw-threads one: spinning on a non-blocking socket, as the plugin is polled), median and p99 in us.
Two nodes (as ib_write_bw): `dqplb perf --server [--port P]` on one node prints the control
address it listens on and waits; `dqplb perf --client HOST [--port P] [OPTIONS]` on the other
sends its options there, the two exchange the plugin's handles over that connection and the
client sends to the server (--bidir: both send and receive at once). Both print the result;
either exits 1 on any wrong byte or failed side. The plugin on each node uses that node's
NCCL_SOCKET_IFNAME / NCCL_IB_HCA and site config.
--plugin PATH: the same two processes drive another NCCL net plugin (dlopen RTLD_NOW|RTLD_LOCAL,
its ncclNetPlugin_v8; device --plugin-dev NAME or 0; host buffers), for comparing plugins.
--recv-idle-us / --send-idle-us N: that side of the bandwidth sweep sleeps N us after each idle
poll instead of yielding as NCCL's proxy does (an experiment for emulated devices such as
Soft-RoCE, whose work shares the CPUs with the polling processes).";

/// The exit status line under `dqplb perf --help`.
pub(crate) const EXIT: &str = "exit status: 0 ok, 1 failed run or wrong bytes, 2 bad arguments (a --plugin that cannot be loaded or has no ncclNetPlugin_v8 included)";

/// The control port of a two-node run unless --port says otherwise.
pub(crate) const DEFAULT_PORT: u16 = 18515;

/// Largest message the v8 ABI can carry (isend's size is a C int).
pub(crate) const MAX_MESSAGE: u64 = i32::MAX as u64;

/// `--policy`: one of the config's policy names (the plugin reads the value from there).
fn policy_parser() -> impl TypedValueParser<Value = PolicyName> {
    PossibleValuesParser::new(PolicyName::ALL.map(PolicyName::as_str)).try_map(|s| {
        PolicyName::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("'{s}' is not a policy"))
    })
}

/// `--segment`: 1 ..= 4G-1 bytes.
fn segment(v: &str) -> Result<u64, String> {
    let b = bytes(v)?;
    if b == 0 || b > u64::from(u32::MAX) {
        return Err(format!("{b} bytes is outside 1..=4G-1"));
    }
    Ok(b)
}

/// `--max-bytes`: at most the v8 ABI's message limit.
fn max_bytes(v: &str) -> Result<u64, String> {
    let b = bytes(v)?;
    if b > MAX_MESSAGE {
        return Err(format!(
            "{b} exceeds the v8 ABI's message limit {MAX_MESSAGE}"
        ));
    }
    Ok(b)
}

/// Every option of `dqplb perf`; `None` means "the plugin's configured value" or "automatic".
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub(crate) struct PerfArgs {
    /// The plugin's data path (NCCL_DQPLB_TRANSPORT for the child processes)
    #[arg(long, value_enum, default_value_t)]
    pub transport: Transport,
    /// Where the two processes run
    #[arg(long, value_enum, default_value_t)]
    pub peers: Peers,
    /// The engine policy (default: the site config's)
    #[arg(long, value_parser = policy_parser())]
    pub policy: Option<PolicyName>,
    /// Two-node run: wait for a `--client` on --port and run the options it sends
    #[arg(long, conflicts_with = "client")]
    pub server: bool,
    /// Two-node run: connect to the `--server` on HOST and send to it
    #[arg(long, value_name = "HOST")]
    pub client: Option<String>,
    /// Two-node run: the server's control port (TCP; 0 with --server: any free port)
    #[arg(long, value_name = "P", value_parser = num::<u16>, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Two-node run: both nodes send and receive at the same time
    #[arg(long)]
    pub bidir: bool,
    /// Bandwidth units
    #[arg(long, value_enum, default_value_t)]
    pub units: Units,
    /// Segments in flight per QP (NCCL_DQPLB_OUTSTANDING for the plugin; default: the site
    /// config's)
    #[arg(long, value_name = "N", value_parser = ranged(1u32, 256))]
    pub outstanding: Option<u32>,
    /// Data QPs per connection, 1..=128 (default: the site config's)
    #[arg(long, value_name = "N", value_parser = ranged(1u32, 128))]
    pub qps: Option<u32>,
    /// Segment size (default: the site config's)
    #[arg(long, value_name = "BYTES", value_parser = segment)]
    pub segment: Option<u64>,
    /// Smallest message of the sweep (the latency test's message)
    #[arg(long, value_name = "BYTES", value_parser = bytes, default_value = "8")]
    pub min_bytes: u64,
    /// Largest message of the sweep
    #[arg(long, value_name = "BYTES", value_parser = max_bytes, default_value = "64M")]
    pub max_bytes: u64,
    /// Each size is the previous one times F
    #[arg(long, value_name = "F", value_parser = ranged(2u64, u64::MAX), default_value_t = 2)]
    pub step_factor: u64,
    /// Measured iterations per size (default: about 256 MiB per size, 10..=1000)
    #[arg(long, value_name = "N", value_parser = ranged(1u64, u64::MAX))]
    pub iters: Option<u64>,
    /// Warm-up iterations per size (default: a tenth of --iters, 1..=20)
    #[arg(long, value_name = "N", value_parser = num::<u64>)]
    pub warmup: Option<u64>,
    /// Messages in flight, 1..=32 (NCCL's request limit)
    #[arg(long, value_name = "N", value_parser = ranged(1usize, 32), default_value_t = 4)]
    pub inflight: usize,
    /// Plain TCP streams instead of the plugin (the ceiling)
    #[arg(long, conflicts_with = "plugin")]
    pub raw_tcp: bool,
    /// Drive another NCCL net plugin .so instead of the built-in one: dlopen PATH and use its
    /// ncclNetPlugin_v8 (the NCCL_DQPLB_* options reach only a dqplb .so)
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<std::path::PathBuf>,
    /// With --plugin: the device with this name (default: device 0)
    #[arg(long, value_name = "NAME", requires = "plugin")]
    pub plugin_dev: Option<String>,
    /// With --raw-tcp: how the streams are driven
    #[arg(long, value_enum, default_value_t)]
    pub raw_threads: RawThreads,
    /// Ping-pong round trip of --min-bytes instead of the bandwidth sweep
    #[arg(long)]
    pub latency: bool,
    /// Do not check the received bytes
    #[arg(long = "no-check", action = clap::ArgAction::SetFalse)]
    pub check: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// In the bandwidth sweep the receiver sleeps N us after an idle poll instead of yielding
    /// (0: yield, as NCCL's proxy thread does)
    #[arg(long, value_name = "N", value_parser = num::<u64>, default_value_t = 0)]
    pub recv_idle_us: u64,
    /// The same for the sender
    #[arg(long, value_name = "N", value_parser = num::<u64>, default_value_t = 0)]
    pub send_idle_us: u64,
}

impl PerfArgs {
    /// What clap cannot check: the options against each other; Err(message) names them.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let remote = self.server || self.client.is_some();
        if self.bidir && !remote {
            return Err("--bidir needs a two-node run (--server or --client HOST)".into());
        }
        if remote && self.latency {
            return Err(
                "--latency is not available in a two-node run (--server / --client)".into(),
            );
        }
        if remote && self.plugin.is_some() {
            return Err("--plugin is not available in a two-node run (--server / --client)".into());
        }
        if remote && self.raw_tcp {
            return Err(
                "--raw-tcp is not available in a two-node run (--server / --client)".into(),
            );
        }
        if self.min_bytes > self.max_bytes {
            return Err(format!(
                "--min-bytes {} is larger than --max-bytes {}",
                self.min_bytes, self.max_bytes
            ));
        }
        Ok(())
    }

    /// Whether the processes use the verbs transport.
    pub(crate) fn verbs(&self) -> bool {
        self.transport == Transport::Verbs
    }

    /// Whether one thread polls every raw TCP stream.
    pub(crate) fn raw_one_thread(&self) -> bool {
        self.raw_threads == RawThreads::One
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
        // The server of a two-node run takes the client's transport from this list.
        if self.verbs() {
            push("--transport", "verbs".to_string());
        }
        if let Some(p) = self.policy {
            push("--policy", p.as_str().to_string());
        }
        if let Some(q) = self.qps {
            push("--qps", q.to_string());
        }
        if let Some(s) = self.segment {
            push("--segment", s.to_string());
        }
        if let Some(o) = self.outstanding {
            push("--outstanding", o.to_string());
        }
        if self.units != Units::GBytes {
            push("--units", self.units.label().into());
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
        if let Some(p) = &self.plugin {
            v.push("--plugin".into());
            v.push(p.display().to_string());
        }
        if let Some(d) = &self.plugin_dev {
            v.push("--plugin-dev".into());
            v.push(d.clone());
        }
        if self.raw_one_thread() {
            v.push("--raw-threads".into());
            v.push("one".into());
        }
        if self.latency {
            v.push("--latency".into());
        }
        if self.bidir {
            v.push("--bidir".into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, Cmd};

    /// `dqplb perf LINE` parsed and checked as the command does; Err(clap's message).
    fn perf(line: &str) -> Result<PerfArgs, String> {
        let mut all = vec!["perf"];
        all.extend(line.split_whitespace());
        match parse(&all).map_err(|e| e.to_string())? {
            Cmd::Perf(opts) => opts.validate().map(|()| opts),
            other => panic!("{other:?}"),
        }
    }

    fn defaults() -> PerfArgs {
        perf("").unwrap()
    }

    #[test]
    fn defaults_and_byte_suffixes() {
        let d = defaults();
        assert_eq!((d.min_bytes, d.max_bytes, d.step_factor), (8, 64 << 20, 2));
        assert_eq!((d.inflight, d.check, d.format), (4, true, Format::Table));
        assert_eq!(
            (d.transport, d.raw_threads),
            (Transport::Socket, RawThreads::PerStream)
        );
        assert_eq!(
            (d.qps, d.segment, d.iters, d.warmup, d.policy),
            (None, None, None, None, None)
        );
        let a = perf("--segment 64K --min-bytes 3KB --max-bytes 2MiB --transport tcp").unwrap();
        assert_eq!(
            (a.segment, a.min_bytes, a.max_bytes),
            (Some(65536), 3072, 2 << 20)
        );
        assert!(!a.verbs());
        assert!(perf("--transport verbs").unwrap().verbs());
        assert_eq!(
            perf("--policy dqplb-led").unwrap().policy,
            Some(PolicyName::DqplbLed)
        );
    }

    #[test]
    fn sizes_sweep_includes_both_ends() {
        let a = perf("--min-bytes 8 --max-bytes 100").unwrap();
        assert_eq!(a.sizes(), vec![8, 16, 32, 64, 100]);
        let b = perf("--min-bytes 0 --max-bytes 4 --step-factor 4").unwrap();
        assert_eq!(b.sizes(), vec![0, 4]);
        assert_eq!(defaults().sizes().len(), 24);
    }

    #[test]
    fn bad_arguments_name_the_option() {
        for (line, needle) in [
            (
                "--policy fastest",
                "invalid value 'fastest' for '--policy <POLICY>'",
            ),
            (
                "--qps 0",
                "invalid value '0' for '--qps <N>': 0 is outside 1..=128",
            ),
            (
                "--min-bytes 2M --max-bytes 1M",
                "--min-bytes 2097152 is larger than --max-bytes 1048576",
            ),
            (
                "--max-bytes 4G",
                "4294967296 exceeds the v8 ABI's message limit",
            ),
            ("--segment 0", "0 bytes is outside 1..=4G-1"),
            ("--step-factor 1", "'--step-factor <F>': 1 is outside 2.."),
            ("--inflight 33", "'--inflight <N>': 33 is outside 1..=32"),
            ("--format xml", "[possible values: table, csv, json]"),
            ("--transport udp", "[possible values: socket, verbs]"),
            ("--peers 10.0.0.2", "[possible values: local]"),
            ("--iters", "a value is required for '--iters <N>'"),
            ("--iters 0", "'--iters <N>': 0 is outside 1.."),
            ("--bogus", "unexpected argument '--bogus'"),
            (
                "--recv-idle-us 5us",
                "invalid value '5us' for '--recv-idle-us <N>'",
            ),
            (
                "--send-idle-us",
                "a value is required for '--send-idle-us <N>'",
            ),
            ("--raw-threads two", "[possible values: per-stream, one]"),
            (
                "--plugin-dev eth0",
                "the following required arguments were not provided:\n  --plugin <PATH>",
            ),
            (
                "--plugin /x.so --raw-tcp",
                "the argument '--plugin <PATH>' cannot be used with '--raw-tcp'",
            ),
            (
                "--plugin /x.so --client h",
                "--plugin is not available in a two-node run",
            ),
        ] {
            let e = perf(line).unwrap_err();
            assert!(e.contains(needle), "{line}: {e}");
        }
    }

    #[test]
    fn args_round_trip() {
        // --transport verbs travels too (the two-node server runs the client's options).
        let v = perf("--transport verbs --qps 2").unwrap();
        assert_eq!(perf(&v.to_args().join(" ")).unwrap(), v);
        let line = "--policy single-qp --qps 3 --outstanding 9 --units Gb/s --segment 64K --min-bytes 1K --max-bytes 1M --iters 7 --warmup 2 --inflight 8 --raw-tcp --raw-threads one --no-check --recv-idle-us 50 --send-idle-us 7";
        let a = perf(line).unwrap();
        assert_eq!((a.recv_idle_us, a.send_idle_us), (50, 7));
        assert_eq!((a.outstanding, a.units), (Some(9), Units::GBits));
        assert_eq!(perf(&a.to_args().join(" ")).unwrap(), a);
        let p = perf("--plugin /opt/peer/libnccl-net.so --plugin-dev lo --qps 4").unwrap();
        assert_eq!(
            (p.plugin.as_deref(), p.plugin_dev.as_deref()),
            (
                Some(std::path::Path::new("/opt/peer/libnccl-net.so")),
                Some("lo")
            )
        );
        assert_eq!(perf(&p.to_args().join(" ")).unwrap(), p);
        // The children get the same options after `__role ROLE`.
        let mut child = vec!["dqplb perf __role", "bw-send"];
        let args = a.to_args();
        child.extend(args.iter().map(String::as_str));
        let c = <ChildCmd as clap::Parser>::try_parse_from(child).unwrap();
        assert_eq!((c.role, c.opts), (Role::BwSend, a));
        // The public command line knows no role.
        assert!(parse(&["perf", "__role", "bw-recv"]).is_err());
    }

    #[test]
    fn adaptive_iterations() {
        let a = defaults();
        assert_eq!(a.iters_for(8), 1000);
        assert_eq!(a.iters_for(64 << 20), 10);
        assert_eq!(a.iters_for(1 << 20), 256);
        assert_eq!(a.warmup_for(1 << 20), 20);
    }
}
