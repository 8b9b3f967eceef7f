//! `dqplb perf --server` / `--client HOST`: a bandwidth run between two nodes. Each node starts its
//! side's child processes and relays their HANDLE/DONE/ROW lines over one TCP control connection.

use super::args::{PerfArgs, Role};
use super::bw::Row;
use super::report::{self, RunInfo};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// First line the client sends: this word, the protocol version, then its options as JSON.
const HELLO: &str = "DQPLB-PERF 1";
/// How long the client tries to reach the server.
const CONNECT: Duration = Duration::from_secs(10);

/// Something one of the relay's threads saw.
enum Ev {
    /// A stdout line of the local child on channel `usize`.
    Local(usize, String),
    /// That child's stdout closed.
    LocalEof(usize),
    /// A line from the peer node.
    Peer(String),
    /// The control connection closed or failed.
    PeerEof(String),
}

/// The roles of channel 0 (client sends to server) and channel 1 (--bidir: server sends to
/// client) on this node.
fn roles(server: bool, bidir: bool) -> Vec<Role> {
    let mut v = vec![if server { Role::BwRecv } else { Role::BwSend }];
    if bidir {
        v.push(if server { Role::BwSend } else { Role::BwRecv });
    }
    v
}

/// `dqplb perf --server`: waits for one client on --port, runs its options, prints the result.
pub(crate) fn server(a: &PerfArgs) -> Result<i32, String> {
    let l = TcpListener::bind(("0.0.0.0", a.port))
        .map_err(|e| format!("cannot listen on TCP port {}: {e}", a.port))?;
    let at = l
        .local_addr()
        .map_err(|e| format!("listening socket: {e}"))?;
    println!(
        "# dqplb perf server: listening on {at} (TCP control connection); on the other node run: dqplb perf --client <this host> --port {}",
        at.port()
    );
    let _ = std::io::stdout().flush();
    let (mut ctl, peer) = l
        .accept()
        .map_err(|e| format!("accepting the client: {e}"))?;
    drop(l);
    println!("# client {peer} connected");
    let mut reader = BufReader::new(
        ctl.try_clone()
            .map_err(|e| format!("control connection: {e}"))?,
    );
    let mut hello = String::new();
    reader
        .read_line(&mut hello)
        .map_err(|e| format!("reading the client's options: {e}"))?;
    let opts = match parse_hello(&hello) {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(ctl, "REFUSED {e}");
            return Err(format!("client {peer}: {e}"));
        }
    };
    let info = match super::resolve(&opts) {
        Ok(i) => i,
        Err(e) => {
            let _ = writeln!(ctl, "REFUSED server: {e}");
            return Err(e);
        }
    };
    writeln!(ctl, "OK").map_err(|e| format!("control connection: {e}"))?;
    session(&opts, info, true, ctl, reader, &peer.to_string())
}

/// `dqplb perf --client HOST`: sends the options to the server, runs this node's side, prints
/// the result.
pub(crate) fn client(a: &PerfArgs, host: &str, info: RunInfo) -> Result<i32, String> {
    let target = format!("{host}:{}", a.port);
    let addrs: Vec<_> = (host, a.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {target}: {e}"))?
        .collect();
    let mut last = format!("{target} resolves to no address");
    let mut ctl = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT) {
            Ok(s) => {
                ctl = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to the server at {addr}: {e}"),
        }
    }
    let mut ctl = ctl.ok_or(last)?;
    let _ = ctl.set_nodelay(true);
    let args = serde_json::to_string(&a.to_args()).map_err(|e| e.to_string())?;
    writeln!(ctl, "{HELLO} {args}").map_err(|e| format!("control connection: {e}"))?;
    let mut reader = BufReader::new(
        ctl.try_clone()
            .map_err(|e| format!("control connection: {e}"))?,
    );
    let mut answer = String::new();
    reader
        .read_line(&mut answer)
        .map_err(|e| format!("reading the server's answer: {e}"))?;
    match answer.trim_end() {
        "OK" => {}
        a if a.starts_with("REFUSED ") => {
            return Err(format!("the server refused the run: {}", &a[8..]))
        }
        "" => {
            return Err(format!(
                "the server at {target} closed the control connection"
            ))
        }
        other => return Err(format!("unexpected answer from {target}: {other:?}")),
    }
    session(a, info, false, ctl, reader, &target)
}

/// The client's options from its first line.
fn parse_hello(line: &str) -> Result<PerfArgs, String> {
    let json = line
        .trim_end()
        .strip_prefix(HELLO)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| format!("not a dqplb perf client of this version (expected {HELLO:?})"))?;
    let args: Vec<String> =
        serde_json::from_str(json).map_err(|e| format!("malformed options: {e}"))?;
    let cmd = <super::args::ChildCmd as clap::Parser>::try_parse_from(
        ["dqplb perf", "bw-recv"]
            .into_iter()
            .map(String::from)
            .chain(args),
    )
    .map_err(|e| format!("bad options: {}", e.to_string().trim()))?;
    let mut o = cmd.opts;
    o.server = true;
    o.validate()?;
    Ok(o)
}

/// Starts this node's child on channel `chan`, its stdout lines reported as `Ev::Local`.
fn start_child(
    role: Role,
    chan: usize,
    a: &PerfArgs,
    tx: &Sender<Ev>,
    conn: &Arc<Mutex<Option<String>>>,
    ops: &Arc<Mutex<Vec<(String, String)>>>,
) -> Result<(Child, std::thread::JoinHandle<()>), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut c = Command::new(&exe)
        .args(super::args::CHILD)
        .arg(role.name())
        .args(a.to_args())
        .envs(super::child_env(a))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the {} process: {e}", role.name()))?;
    let out = c.stdout.take().ok_or("child stdout")?;
    let err = c.stderr.take().ok_or("child stderr")?;
    let quiet = std::env::var_os("NCCL_DEBUG").is_none();
    let (conn, ops) = (conn.clone(), ops.clone());
    let errs = std::thread::spawn(move || super::filter_stderr(err, quiet, &conn, &ops));
    let tx = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(Ev::Local(chan, l));
        }
        let _ = tx.send(Ev::LocalEof(chan));
    });
    Ok((c, errs))
}

/// Runs this node's side: children per channel, lines relayed both ways, until every child on
/// both nodes ended. Prints the result; Ok(exit code).
fn session(
    a: &PerfArgs,
    info: RunInfo,
    server: bool,
    mut ctl: TcpStream,
    reader: BufReader<TcpStream>,
    peer: &str,
) -> Result<i32, String> {
    let roles = roles(server, a.bidir);
    let (tx, rx) = channel::<Ev>();
    // Per channel: the plugin's connection line from that child's stderr.
    let conns: Vec<Arc<Mutex<Option<String>>>> =
        roles.iter().map(|_| Arc::new(Mutex::new(None))).collect();
    let ops = Arc::new(Mutex::new(Vec::new()));
    let peer_tx = tx.clone();
    std::thread::spawn(move || {
        for l in reader.lines() {
            match l {
                Ok(l) => {
                    if peer_tx.send(Ev::Peer(l)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = peer_tx.send(Ev::PeerEof(e.to_string()));
                    return;
                }
            }
        }
        let _ = peer_tx.send(Ev::PeerEof("closed".into()));
    });
    let mut children = Vec::new();
    let mut err_threads = Vec::new();
    for (chan, &role) in roles.iter().enumerate() {
        match start_child(role, chan, a, &tx, &conns[chan], &ops) {
            Ok((c, t)) => {
                children.push(c);
                err_threads.push(Some(t));
            }
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        }
    }
    drop(tx);
    let chans = roles.len();
    let mut stdins: Vec<_> = children.iter_mut().map(|c| c.stdin.take()).collect();
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); chans];
    let mut errors: Vec<String> = Vec::new();
    let mut local_open = chans;
    let mut peer_ended = vec![false; chans];
    let mut config_lines: Vec<Option<String>> = vec![None; chans];
    let send_peer = |ctl: &mut TcpStream, line: String| -> Result<(), String> {
        writeln!(ctl, "{line}")
            .and_then(|_| ctl.flush())
            .map_err(|e| format!("control connection to {peer}: {e}"))
    };
    let mut broken = None;
    while local_open > 0 || peer_ended.iter().any(|e| !e) {
        let Ok(ev) = rx.recv() else { break };
        match ev {
            Ev::Local(chan, l) => {
                note(&l, chan, &mut rows, &mut errors, &mut config_lines);
                if let Err(e) = send_peer(&mut ctl, format!("{chan} {l}")) {
                    broken = Some(e);
                    break;
                }
            }
            Ev::LocalEof(chan) => {
                local_open -= 1;
                let st = children[chan]
                    .wait()
                    .map_err(|e| format!("waiting for the {} process: {e}", roles[chan].name()))?;
                // The child's stderr is closing: its connection line (the sender's) goes to
                // the peer too, so both nodes print each direction's.
                if let Some(t) = err_threads[chan].take() {
                    let _ = t.join();
                }
                let line = conns[chan].lock().ok().and_then(|g| g.clone());
                if let Some(l) = line {
                    let l = format!("CONFIG {l}");
                    note(&l, chan, &mut rows, &mut errors, &mut config_lines);
                    if let Err(e) = send_peer(&mut ctl, format!("{chan} {l}")) {
                        broken = Some(e);
                        break;
                    }
                }
                let word = if st.success() {
                    "ok".to_string()
                } else {
                    let e = format!(
                        "{} on {} exited with {st}",
                        roles[chan].name(),
                        side(server)
                    );
                    errors.push(e.clone());
                    e
                };
                if let Err(e) = send_peer(&mut ctl, format!("END {chan} {word}")) {
                    broken = Some(e);
                    break;
                }
            }
            Ev::Peer(l) => {
                if let Some(rest) = l.strip_prefix("END ") {
                    let (chan, word) = rest.split_once(' ').unwrap_or((rest, ""));
                    if let Some(e) = chan
                        .parse::<usize>()
                        .ok()
                        .and_then(|c| peer_ended.get_mut(c))
                    {
                        *e = true;
                    }
                    if word != "ok" {
                        errors.push(word.to_string());
                    }
                    continue;
                }
                let Some((chan, line)) = l
                    .split_once(' ')
                    .and_then(|(c, rest)| Some((c.parse::<usize>().ok()?, rest)))
                    .filter(|(c, _)| *c < chans)
                else {
                    broken = Some(format!("unexpected line from {peer}: {l:?}"));
                    break;
                };
                note(line, chan, &mut rows, &mut errors, &mut config_lines);
                if line.starts_with("HANDLE ") || line == "DONE" {
                    if let Some(Some(stdin)) = stdins.get_mut(chan) {
                        let _ = writeln!(stdin, "{line}").and_then(|_| stdin.flush());
                    }
                }
            }
            Ev::PeerEof(why) => {
                if peer_ended.iter().any(|e| !e) {
                    broken = Some(format!(
                        "the {} at {peer} ended the control connection before the run finished ({why})",
                        side(!server)
                    ));
                    break;
                }
            }
        }
    }
    if let Some(e) = broken {
        // The peer is gone: this node's children would wait for its lines until their timeouts.
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        return Err(e);
    }
    drop(stdins);
    for t in err_threads.into_iter().flatten() {
        let _ = t.join();
    }
    let want = a.sizes().len();
    for (chan, r) in rows.iter().enumerate() {
        if errors.is_empty() && r.len() != want {
            errors.push(format!(
                "{}: the receiver reported {} of {want} sizes",
                direction(chan),
                r.len()
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    print!("{}", report_text(&info, &rows, &config_lines, a));
    Ok(exit_code(&rows))
}

/// 0 when every byte of every direction arrived as sent, else 1.
pub(crate) fn exit_code(rows: &[Vec<Row>]) -> i32 {
    if rows.iter().flatten().all(|r| r.wrong == 0) {
        0
    } else {
        1
    }
}

fn side(server: bool) -> &'static str {
    if server {
        "server"
    } else {
        "client"
    }
}

fn direction(chan: usize) -> &'static str {
    if chan == 0 {
        "client -> server"
    } else {
        "server -> client"
    }
}

/// Records what a child line (local or relayed) says about the result.
fn note(
    line: &str,
    chan: usize,
    rows: &mut [Vec<Row>],
    errors: &mut Vec<String>,
    config: &mut [Option<String>],
) {
    if let Some(r) = Row::from_line(line) {
        rows[chan].push(r);
    } else if line.starts_with("ERROR ") {
        errors.push(format!("{}: {line}", direction(chan)));
    } else if let Some(c) = line.strip_prefix("CONFIG ") {
        config[chan].get_or_insert_with(|| c.to_string());
    }
}

/// The result as both nodes print it: a table per direction (with its sender's connection line);
/// with --bidir also both directions together.
fn report_text(
    info: &RunInfo,
    rows: &[Vec<Row>],
    config: &[Option<String>],
    a: &PerfArgs,
) -> String {
    let mut out = String::new();
    for (chan, r) in rows.iter().enumerate() {
        let mut i = info.clone();
        // The sender's connection line for this direction, else what this node's plugin logged.
        if let Some(Some(c)) = config.get(chan) {
            i.plugin_line = Some(c.clone());
        }
        i.mode = format!("two nodes, {}, {}", direction(chan), info.mode);
        out.push_str(&report::bandwidth(&i, r, a.format));
    }
    if let [there, back] = rows {
        if a.format == super::args::Format::Table {
            let label = a.units.label();
            out.push_str(&format!(
                "# both directions at once (sum of algbw)\n# {:>12} {:>10}\n# {:>12} {:>10}\n",
                "size",
                "algbw",
                "(B)",
                format!("({label})")
            ));
            for (x, y) in there.iter().zip(back) {
                out.push_str(&format!(
                    "  {:>12} {:>10.2}\n",
                    x.size,
                    (x.algbw() + y.algbw()) * a.units.factor()
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, wrong: u64) -> Row {
        Row {
            size,
            iters: 1,
            nanos: 1000,
            wrong,
        }
    }

    #[test]
    fn any_wrong_byte_in_either_direction_fails_the_run() {
        assert_eq!(exit_code(&[vec![row(8, 0), row(16, 0)]]), 0);
        assert_eq!(exit_code(&[vec![row(8, 0)], vec![row(8, 1)]]), 1);
        assert_eq!(exit_code(&[vec![row(8, 3), row(16, 0)]]), 1);
    }

    #[test]
    fn channel_roles_per_node() {
        assert_eq!(roles(true, false), vec![Role::BwRecv]);
        assert_eq!(roles(false, false), vec![Role::BwSend]);
        assert_eq!(roles(true, true), vec![Role::BwRecv, Role::BwSend]);
        assert_eq!(roles(false, true), vec![Role::BwSend, Role::BwRecv]);
    }

    #[test]
    fn the_server_takes_the_clients_options_and_refuses_others() {
        let o = parse_hello(r#"DQPLB-PERF 1 ["--qps","3","--bidir","--max-bytes","64K"]"#).unwrap();
        assert_eq!(
            (o.qps, o.bidir, o.max_bytes, o.server),
            (Some(3), true, 65536, true)
        );
        let e = parse_hello("GET / HTTP/1.1").unwrap_err();
        assert!(e.contains("not a dqplb perf client"), "{e}");
        let e = parse_hello(r#"DQPLB-PERF 1 ["--qps","0"]"#).unwrap_err();
        assert!(e.contains("'--qps <N>': 0 is outside 1..=128"), "{e}");
        let e = parse_hello(r#"DQPLB-PERF 1 ["--latency"]"#).unwrap_err();
        assert!(e.contains("--latency is not available"), "{e}");
    }
}
