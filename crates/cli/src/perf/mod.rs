//! `dqplb perf`: point-to-point bandwidth and latency through the plugin's vtable between two
//! local processes (this executable re-run with a hidden `__role`), or over raw TCP as the ceiling.

pub(crate) mod args;
pub(crate) mod bw;
mod dl;
pub(crate) mod latency;
pub(crate) mod link;
pub(crate) mod net;
pub(crate) mod pattern;
pub(crate) mod rawpoll;
mod remote;
pub(crate) mod report;
mod roles;

use args::{ChildCmd, PerfArgs, Role};
use report::{LatRow, RunInfo};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

/// Entry point of `dqplb perf ARGS`; returns the exit code (0 ok, 1 failed run or wrong bytes,
/// 2 bad arguments).
pub(crate) fn run(a: PerfArgs) -> i32 {
    if let Err(e) = a.validate() {
        return crate::usage_error(&["perf"], e);
    }
    if a.server {
        return match remote::server(&a) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("dqplb perf: {e}");
                1
            }
        };
    }
    // A --plugin that is not an NCCL net plugin is a bad argument, caught before any child runs.
    let peer_name = match &a.plugin {
        Some(p) => match dl::open_v8(p) {
            Ok(v) => Some(dl::name_of(v)),
            Err(e) => {
                eprintln!("dqplb perf: {e}");
                return 2;
            }
        },
        None => None,
    };
    let info = match resolve(&a) {
        Ok(mut i) => {
            if let (Some(p), Some(n)) = (&a.plugin, peer_name) {
                i.peer = Some(format!("{} (name \"{n}\")", p.display()));
            }
            i
        }
        Err(e) => {
            eprintln!("dqplb perf: {e}");
            return 2;
        }
    };
    let result = if let Some(host) = &a.client {
        remote::client(&a, host, info)
    } else if a.latency {
        run_latency(&a, info)
    } else {
        run_bandwidth(&a, info)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("dqplb perf: {e}");
            1
        }
    }
}

/// Entry point of a child process, `dqplb perf __role ROLE OPTIONS` (`args` after the program
/// name and those two words); returns its exit code (2: bad arguments).
pub(crate) fn run_child(args: &[std::ffi::OsString]) -> i32 {
    let name = std::ffi::OsString::from(format!("dqplb {}", args::CHILD.join(" ")));
    match <ChildCmd as clap::Parser>::try_parse_from(std::iter::once(&name).chain(args)) {
        Ok(c) => roles::run(c.role, &c.opts),
        Err(e) => {
            let _ = e.print();
            e.exit_code()
        }
    }
}

/// Environment for the children: the plugin's overrides from the options, loopback interface,
/// INFO logging (so the plugin reports the connection it set up) unless the caller chose.
pub(super) fn child_env(a: &PerfArgs) -> Vec<(String, String)> {
    let mut v = vec![(
        "NCCL_DQPLB_TRANSPORT".to_string(),
        if a.verbs() { "verbs" } else { "tcp" }.to_string(),
    )];
    if let Some(p) = a.policy {
        v.push(("NCCL_DQPLB_POLICY".to_string(), p.as_str().to_string()));
    }
    if let Some(q) = a.qps {
        v.push(("NCCL_DQPLB_QPS".to_string(), q.to_string()));
    }
    if let Some(s) = a.segment {
        v.push(("NCCL_DQPLB_SEGMENT_BYTES".to_string(), s.to_string()));
    }
    if let Some(o) = a.outstanding {
        v.push(("NCCL_DQPLB_OUTSTANDING".to_string(), o.to_string()));
    }
    // Two nodes: each plugin uses its node's interface; one node: loopback.
    let remote = a.server || a.client.is_some();
    if !remote && std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
        v.push(("NCCL_SOCKET_IFNAME".to_string(), "lo".to_string()));
    }
    if std::env::var_os("NCCL_DEBUG").is_none() {
        v.push(("NCCL_DEBUG".to_string(), "INFO".to_string()));
    }
    v
}

/// The configuration the plugin will use (site config plus the options' overrides), for the
/// header and for the raw-TCP stream count.
pub(super) fn resolve(a: &PerfArgs) -> Result<RunInfo, String> {
    let mut vars = dqplb_config::load::process_env_vars();
    vars.retain(|(k, _)| !child_env(a).iter().any(|(c, _)| c == k));
    vars.extend(child_env(a));
    let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let loaded =
        dqplb_config::load::load_with(&lookup, &vars, std::path::Path::new(dqplb_config::ETC_PATH))
            .map_err(|e| blame_option(a, &format!("plugin configuration: {e}")))?;
    let plan = if a.verbs() {
        loaded.config.plan(dqplb_config::ConnClass::SameRail)
    } else {
        loaded.config.tcp_plan(dqplb_config::ConnClass::SameRail)
    };
    let mode = if a.plugin.is_some() {
        "another plugin's ncclNetPlugin_v8 (--plugin)"
    } else if a.raw_tcp && a.raw_one_thread() {
        "raw TCP streams (no plugin), one polling thread"
    } else if a.raw_tcp {
        "raw TCP streams (no plugin)"
    } else if a.verbs() {
        "plugin vtable, verbs transport"
    } else {
        "plugin vtable, socket transport"
    };
    Ok(RunInfo {
        mode: mode.to_string(),
        policy: if a.raw_tcp {
            "n/a".into()
        } else {
            loaded.config.engine.policy.as_str().to_string()
        },
        qps: plan.qps,
        outstanding: plan.outstanding,
        segment_bytes: plan.segment_bytes,
        inflight: a.inflight,
        check: a.check,
        units: a.units,
        plugin_line: None,
        peer: None,
    })
}

/// With --plugin: adds the device the first child announced (`DEVICE INDEX NAME`) to the
/// header's plugin line.
fn note_device(info: &mut RunInfo, lines: &[String]) {
    let dev = lines.iter().find_map(|l| l.strip_prefix("DEVICE "));
    if let (Some(peer), Some(d)) = (info.peer.as_mut(), dev) {
        let (idx, name) = d.split_once(' ').unwrap_or((d, ""));
        peer.push_str(&format!(", device {idx} \"{name}\""));
    }
}

/// `msg` with an override the options made (the children's NCCL_DQPLB_* variable, which the
/// user never set) named as the option that made it.
fn blame_option(a: &PerfArgs, msg: &str) -> String {
    let given = [
        (
            "--segment",
            "NCCL_DQPLB_SEGMENT_BYTES",
            a.segment.map(|v| v.to_string()),
        ),
        ("--qps", "NCCL_DQPLB_QPS", a.qps.map(|v| v.to_string())),
        (
            "--outstanding",
            "NCCL_DQPLB_OUTSTANDING",
            a.outstanding.map(|v| v.to_string()),
        ),
        (
            "--policy",
            "NCCL_DQPLB_POLICY",
            a.policy.map(|p| p.as_str().to_string()),
        ),
    ];
    for (flag, var, value) in given {
        if let Some(v) = value {
            let from = format!("plugin configuration: environment: {var}");
            if msg.starts_with(&from) {
                return msg.replacen(&from, &format!("{flag} {v}"), 1);
            }
        }
    }
    msg.to_string()
}

/// Lines each child printed, in order.
struct ChildLines {
    first: Vec<String>,
    second: Vec<String>,
    /// The plugin's "... data QPs ..." connection line, from either child's stderr.
    plugin_line: Option<String>,
    /// The verbs comms' close-time "verbs send|recv comm ... op counts: k=v ..." lines, as
    /// (side, counts), from the children's stderr.
    ops: Vec<(String, String)>,
}

/// Prints each verbs comm's operation counts divided by `messages` (stderr, so table, csv and
/// json output stay as they are).
fn print_ops(lines: &ChildLines, messages: u64) {
    for (side, ops) in &lines.ops {
        if let Some(pm) = net::per_message(ops, messages) {
            eprintln!("dqplb perf: verbs {side} comm ops per message ({messages} messages, warmup included): {pm}");
        }
    }
}

/// Passes a child's stderr through, except the INFO lines perf asked for itself (NCCL_DEBUG was
/// unset): of those it keeps only the plugin's connection line, stored in `conn`.
pub(super) fn filter_stderr(
    err: std::process::ChildStderr,
    quiet_info: bool,
    conn: &Mutex<Option<String>>,
    ops: &Mutex<Vec<(String, String)>>,
) {
    for l in BufReader::new(err).lines().map_while(Result::ok) {
        if let Some(at) = l.find("op counts: ") {
            let side = if l.contains("verbs send comm") {
                "send"
            } else {
                "recv"
            };
            if let Ok(mut g) = ops.lock() {
                g.push((side.to_string(), l[at + "op counts: ".len()..].to_string()));
            }
        }
        let is_conn = l.contains("connecting to") && l.contains("data QPs");
        if let Some(at) = l.find("dev ").filter(|_| is_conn) {
            if let Ok(mut g) = conn.lock() {
                g.get_or_insert_with(|| l[at..].to_string());
            }
        }
        if quiet_info && l.contains(" INFO ") {
            continue;
        }
        eprintln!("{l}");
    }
}

/// Runs `__role first` and `__role second` with `child_args`, relaying each one's HANDLE line
/// to the other's stdin; fails if either exits non-zero.
fn run_pair(
    first: Role,
    second: Role,
    child_args: &[String],
    env: &[(String, String)],
) -> Result<ChildLines, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let (tx, rx) = channel::<(usize, Option<String>)>();
    let quiet_info = std::env::var_os("NCCL_DEBUG").is_none();
    let conn = Arc::new(Mutex::new(None::<String>));
    let ops = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let mut err_threads = Vec::new();
    let mut children = Vec::new();
    let mut stdins = Vec::new();
    for (who, role) in [first.name(), second.name()].into_iter().enumerate() {
        let mut c = Command::new(&exe)
            .args(args::CHILD)
            .arg(role)
            .args(child_args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the {role} process: {e}"))?;
        let out = c.stdout.take().ok_or("child stdout")?;
        let err = c.stderr.take().ok_or("child stderr")?;
        let (quiet_info, conn, ops) = (quiet_info, conn.clone(), ops.clone());
        err_threads.push(std::thread::spawn(move || {
            filter_stderr(err, quiet_info, &conn, &ops)
        }));
        stdins.push(c.stdin.take());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((who, Some(l)));
            }
            let _ = tx.send((who, None));
        });
        children.push(c);
    }
    drop(tx);
    let mut lines = ChildLines {
        first: vec![],
        second: vec![],
        plugin_line: None,
        ops: Vec::new(),
    };
    let mut open = 2;
    while open > 0 {
        let Ok((who, l)) = rx.recv() else { break };
        let Some(l) = l else {
            open -= 1;
            continue;
        };
        if l.starts_with("HANDLE ") || l == "DONE" {
            if let Some(Some(stdin)) = stdins.get_mut(1 - who) {
                let _ = writeln!(stdin, "{l}").and_then(|_| stdin.flush());
            }
        }
        if who == 0 {
            &mut lines.first
        } else {
            &mut lines.second
        }
        .push(l);
    }
    drop(stdins);
    for t in err_threads {
        let _ = t.join();
    }
    lines.plugin_line = conn.lock().ok().and_then(|g| g.clone());
    lines.ops = ops.lock().map(|g| g.clone()).unwrap_or_default();
    let mut failed = Vec::new();
    for (c, role) in children.iter_mut().zip([first.name(), second.name()]) {
        let st = c.wait().map_err(|e| format!("waiting for {role}: {e}"))?;
        if !st.success() {
            failed.push(format!("{role} exited with {st}"));
        }
    }
    let errors: Vec<&String> = lines
        .first
        .iter()
        .chain(&lines.second)
        .filter(|l| l.starts_with("ERROR "))
        .collect();
    if !failed.is_empty() || !errors.is_empty() {
        return Err(format!(
            "{}; {}",
            failed.join(", "),
            errors
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    Ok(lines)
}

fn run_bandwidth(a: &PerfArgs, mut info: RunInfo) -> Result<i32, String> {
    let mut child = a.clone();
    if a.raw_tcp {
        child.qps = Some(info.qps);
    }
    let lines = run_pair(Role::BwRecv, Role::BwSend, &child.to_args(), &child_env(a))?;
    note_device(&mut info, &lines.first);
    info.plugin_line = lines
        .second
        .iter()
        .find_map(|l| l.strip_prefix("CONFIG ").map(String::from))
        .or(lines.plugin_line.clone());
    let rows: Vec<bw::Row> = lines
        .first
        .iter()
        .filter_map(|l| bw::Row::from_line(l))
        .collect();
    let want = a.sizes().len();
    if rows.len() != want {
        return Err(format!("receiver reported {} of {want} sizes", rows.len()));
    }
    print!("{}", report::bandwidth(&info, &rows, a.format));
    let messages: u64 = a
        .sizes()
        .into_iter()
        .map(|s| a.warmup_for(s) + a.iters_for(s))
        .sum();
    print_ops(&lines, messages);
    Ok(if rows.iter().all(|r| r.wrong == 0) {
        0
    } else {
        1
    })
}

fn run_latency(a: &PerfArgs, info: RunInfo) -> Result<i32, String> {
    let mut rows = Vec::new();
    let kinds: &[(&str, bool)] = if a.raw_tcp {
        &[("raw-tcp", true)]
    } else {
        &[("plugin", false), ("raw-tcp", true)]
    };
    let mut info = info;
    for &(name, raw) in kinds {
        let mut child = a.clone();
        child.raw_tcp = raw;
        if raw {
            // The raw ping-pong loads no plugin (--raw-tcp and --plugin exclude each other).
            child.plugin = None;
            child.plugin_dev = None;
        }
        let lines = run_pair(
            Role::LatPing,
            Role::LatPong,
            &child.to_args(),
            &child_env(a),
        )?;
        if !raw {
            note_device(&mut info, &lines.first);
            // each side sends and receives warmup + iters 8-byte messages
            print_ops(
                &lines,
                a.warmup.unwrap_or(1_000) + a.iters.unwrap_or(10_000),
            );
            info.plugin_line = lines
                .first
                .iter()
                .chain(&lines.second)
                .find_map(|l| l.strip_prefix("CONFIG ").map(String::from))
                .or(lines.plugin_line.clone());
        }
        let lat = lines
            .first
            .iter()
            .find_map(|l| {
                let mut it = l.strip_prefix("LAT ")?.split_whitespace();
                Some((
                    it.next()?.parse::<f64>().ok()?,
                    it.next()?.parse::<f64>().ok()?,
                    it.next()?.parse::<usize>().ok()?,
                ))
            })
            .ok_or_else(|| format!("{name}: the pinger reported no LAT line: {:?}", lines.first))?;
        rows.push(LatRow {
            transport: name.to_string(),
            median_us: lat.0,
            p99_us: lat.1,
            samples: lat.2,
        });
    }
    print!("{}", report::latency(&info, a.min_bytes, &rows, a.format));
    Ok(0)
}
