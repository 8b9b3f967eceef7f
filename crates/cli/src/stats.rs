//! `dqplb stats`: the per-QP statistics files the plugin writes (`[stats] file`) as a table, JSON
//! or the Prometheus text exposition format.

use nccl_net_dqplb::plugin::prometheus::{render, Labels};
use nccl_net_dqplb::plugin::telemetry::{read_file, CommEntry, QpEntry, StatsFile};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The text under `dqplb stats --help`.
pub(crate) const LONG_ABOUT: &str = "\
Prints the per-QP statistics the plugin writes when the site config sets [stats] file (or
NCCL_DQPLB_STATS_FILE), one file per process: segments, bytes, completions, outstanding,
completion latency (EWMA and log2-histogram percentiles), resends, re-hashes and path failures.
The plugin rewrites a file when a send connection closes and removes it when the process's last
one closes (or its last communicator is finalized). A file whose process no longer runs on this
host (killed or crashed before it could remove it) is reported as stale: on stderr, in the table's
header and as process: not running in --json. --prometheus labels every series with host, pid,
comm, dev, transport, peer, class and qp; the plugin's own textfile ([stats] textfile-dir) uses
bounded labels.";

/// The exit status line under `dqplb stats --help`.
pub(crate) const EXIT: &str = "exit status: 0 printed, 2 bad usage or an unreadable file";

/// Options of `dqplb stats`: the output format (the last of --json and --prometheus wins) and
/// the files.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct StatsArgs {
    /// One JSON document: {"files": [...]}
    #[arg(long, overrides_with = "prometheus")]
    json: bool,
    /// Text exposition format (node exporter textfile collector)
    #[arg(long, overrides_with = "json")]
    prometheus: bool,
    /// Statistics files, one per process
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Table,
    Json,
    Prometheus,
}

/// `dqplb stats`; returns the exit code.
pub(crate) fn run(a: &StatsArgs) -> i32 {
    let format = match (a.json, a.prometheus) {
        (true, _) => Format::Json,
        (_, true) => Format::Prometheus,
        _ => Format::Table,
    };
    let mut parsed = Vec::new();
    let mut states = Vec::new();
    let here = this_host();
    for f in &a.files {
        match read_file(f) {
            Ok(s) => {
                let st = process_state(&s, &here);
                if st == Process::NotRunning {
                    eprintln!(
                        "dqplb stats: {}: stale: process {} on {} is not running (killed or crashed before removing the file)",
                        f.display(),
                        s.pid,
                        s.host
                    );
                }
                parsed.push(s);
                states.push(st);
            }
            Err(e) => {
                eprintln!("dqplb stats: {e}");
                return 2;
            }
        }
    }
    let out = match format {
        Format::Table => table(&parsed, &states),
        Format::Json => json(&parsed, &states),
        Format::Prometheus => prometheus(&parsed),
    };
    print!("{out}");
    0
}

/// Whether the process that wrote a stats file still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Process {
    Running,
    /// On this host, and no process with its pid runs (or only its zombie is left).
    NotRunning,
    /// Written on another host: not checked.
    OtherHost,
}

impl Process {
    fn word(self) -> &'static str {
        match self {
            Process::Running => "running",
            Process::NotRunning => "not running",
            Process::OtherHost => "other host",
        }
    }
}

/// This host's name as the plugin writes it into the file.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// `/proc/<pid>/stat`: absent, or state Z (zombie) / X (dead), means the process is gone.
fn process_state(f: &StatsFile, here: &str) -> Process {
    if f.host != here {
        return Process::OtherHost;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", f.pid)) else {
        return Process::NotRunning;
    };
    // "pid (comm) S ...": the state follows the last ')' (comm may hold one).
    match stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
    {
        Some("Z" | "X" | "x") => Process::NotRunning,
        _ => Process::Running,
    }
}

/// The latency (ns) below which fraction `p` of the histogram's samples fall, as the upper edge
/// of the bucket that holds that rank (bucket k >= 1 is [2^(k-1), 2^k)); None without samples.
pub(crate) fn percentile_ns(hist: &[u64], p: f64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * p).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (k, &n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(if k == 0 { 0 } else { 1u64 << k.min(63) });
        }
    }
    None
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("-".to_string(), |v| format!("{:.1}", v as f64 / 1000.0))
}

fn table(files: &[StatsFile], states: &[Process]) -> String {
    let mut o = String::new();
    for (f, st) in files.iter().zip(states) {
        let _ = writeln!(
            o,
            "# pid {} on {}, written {}, {} send connection(s){}",
            f.pid,
            f.host,
            rfc3339_utc(f.written_unix_ms),
            f.comms.len(),
            if *st == Process::NotRunning {
                "; STALE: the process is not running"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "{:>5} {:>4} {:<22} {:<10} {:>3} {:>10} {:>14} {:>10} {:>5} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "comm", "dev", "peer", "class", "qp", "segments", "bytes", "completed", "outst", "ewma_us", "p50_us", "p99_us", "resent", "rehash", "failed"
        );
        for c in &f.comms {
            for q in &c.qps {
                let _ = writeln!(
                    o,
                    "{:>5} {:>4} {:<22} {:<10} {:>3} {:>10} {:>14} {:>10} {:>5} {:>9.1} {:>9} {:>9} {:>7} {:>7} {:>7}",
                    c.id,
                    c.dev,
                    c.peer,
                    c.class,
                    q.qp,
                    q.segments,
                    q.bytes,
                    q.completed,
                    q.outstanding,
                    q.latency_ewma_ns / 1000.0,
                    us(percentile_ns(&q.latency_log2_ns, 0.5)),
                    us(percentile_ns(&q.latency_log2_ns, 0.99)),
                    q.resent,
                    q.rehashes,
                    q.failures
                );
            }
        }
    }
    o
}

fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_qp(q: &QpEntry) -> String {
    let hist: Vec<String> = q.latency_log2_ns.iter().map(|n| n.to_string()).collect();
    let ewma = if q.latency_ewma_ns.is_finite() {
        format!("{}", q.latency_ewma_ns)
    } else {
        "null".to_string()
    };
    format!(
        "{{\"qp\":{},\"segments\":{},\"bytes\":{},\"completed\":{},\"outstanding\":{},\"peak_outstanding\":{},\"latency_ewma_ns\":{ewma},\"latency_log2_ns\":[{}],\"resent\":{},\"rehashes\":{},\"failures\":{}}}",
        q.qp, q.segments, q.bytes, q.completed, q.outstanding, q.peak_outstanding, hist.join(","), q.resent, q.rehashes, q.failures
    )
}

fn json_comm(c: &CommEntry) -> String {
    let qps: Vec<String> = c.qps.iter().map(json_qp).collect();
    format!(
        "{{\"id\":{},\"dev\":{},\"transport\":{},\"peer\":{},\"class\":{},\"qps\":[{}]}}",
        c.id,
        c.dev,
        js(&c.transport),
        js(&c.peer),
        js(&c.class),
        qps.join(",")
    )
}

fn json(files: &[StatsFile], states: &[Process]) -> String {
    let fs: Vec<String> = files
        .iter()
        .zip(states)
        .map(|(f, st)| {
            let comms: Vec<String> = f.comms.iter().map(json_comm).collect();
            format!(
                "{{\"pid\":{},\"host\":{},\"process\":{},\"written_unix_ms\":{},\"comms\":[{}]}}",
                f.pid,
                js(&f.host),
                js(st.word()),
                f.written_unix_ms,
                comms.join(",")
            )
        })
        .collect();
    format!("{{\"files\":[{}]}}\n", fs.join(","))
}

fn prometheus(files: &[StatsFile]) -> String {
    render(files, Labels::ALL)
}

/// `unix_ms` as an RFC 3339 UTC time with milliseconds, e.g. `2026-12-05T05:09:38.123Z` (the
/// civil-from-days conversion of the proleptic Gregorian calendar; one call site does not
/// warrant a date crate).
pub(crate) fn rfc3339_utc(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Days since 1970-01-01 to (year, month, day), counting from 0000-03-01 in 400-year eras.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{sec:02}.{ms:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_utc(1_796_433_207_232), "2026-12-05T01:13:27.232Z");
        assert_eq!(rfc3339_utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn percentiles_are_bucket_upper_edges() {
        let mut h = vec![0u64; 32];
        assert_eq!(percentile_ns(&h, 0.5), None);
        h[0] = 1;
        h[3] = 98;
        h[10] = 1;
        assert_eq!(percentile_ns(&h, 0.01), Some(0));
        assert_eq!(percentile_ns(&h, 0.5), Some(8));
        assert_eq!(percentile_ns(&h, 0.99), Some(8));
        assert_eq!(percentile_ns(&h, 1.0), Some(1024));
    }

    #[test]
    fn the_last_format_flag_wins_and_a_file_is_required() {
        let stats = |args: &[&str]| {
            let mut all = vec!["stats"];
            all.extend(args);
            match crate::parse(&all) {
                Ok(crate::Cmd::Stats(a)) => Ok(a),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.kind()),
            }
        };
        let a = stats(&["--json", "--prometheus", "a", "b"]).unwrap();
        assert_eq!((a.json, a.prometheus, a.files.len()), (false, true, 2));
        let a = stats(&["--prometheus", "a", "--json"]).unwrap();
        assert_eq!((a.json, a.prometheus), (true, false));
        assert_eq!(
            stats(&["--json"]).unwrap_err(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            stats(&["--csv", "a"]).unwrap_err(),
            clap::error::ErrorKind::UnknownArgument
        );
    }

    #[test]
    fn json_escapes_strings() {
        assert_eq!(js("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
