//! `dqplb perf --server` / `--client`: two processes on loopback through the plugin, one way and
//! both ways, byte-checked; the client exits 1 when the server dies in the middle of the run.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn dqplb() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dqplb"));
    c.arg("perf").env("NCCL_SOCKET_IFNAME", "lo");
    c
}

/// Starts a server on a free port (its own process group); returns it and the port it printed.
fn server() -> (Child, u16, BufReader<std::process::ChildStdout>) {
    let mut s = dqplb()
        .args(["--server", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("start the server");
    let mut out = BufReader::new(s.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port = first
        .split_once("listening on 0.0.0.0:")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));
    (s, port, out)
}

fn client(port: u16, extra: &[&str]) -> Output {
    dqplb()
        .args(["--client", "127.0.0.1", "--port", &port.to_string()])
        .args(extra)
        .output()
        .expect("run the client")
}

/// The data rows (size, iters, #wrong) of every table in `out`.
fn rows(out: &str) -> Vec<(u64, u64, u64)> {
    out.lines()
        .filter(|l| !l.starts_with('#') && l.split_whitespace().count() == 8)
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (f[0], f[2], f[f.len() - 1])
        })
        .collect()
}

const SWEEP: [&str; 8] = [
    "--min-bytes",
    "1000",
    "--max-bytes",
    "64K",
    "--step-factor",
    "8",
    "--iters",
    "6",
];

#[test]
fn one_way_run_moves_checked_bytes_and_both_nodes_report_it() {
    let (mut s, port, mut sout) = server();
    let c = client(port, &SWEEP);
    let text = String::from_utf8_lossy(&c.stdout).into_owned();
    assert!(
        c.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&c.stderr)
    );
    let want = vec![(1000, 6, 0), (8000, 6, 0), (64000, 6, 0), (65536, 6, 0)];
    assert_eq!(rows(&text), want, "{text}");
    assert!(text.contains("two nodes, client -> server"), "{text}");
    assert!(text.contains("# Out of bounds values : 0 OK"), "{text}");
    let mut server_text = String::new();
    std::io::Read::read_to_string(&mut sout, &mut server_text).unwrap();
    assert!(s.wait().unwrap().success(), "{server_text}");
    assert!(server_text.contains("# client 127.0.0.1:"), "{server_text}");
    assert_eq!(rows(&server_text), want, "{server_text}");
}

#[test]
fn bidir_in_gigabits_checks_both_directions() {
    let (mut s, port, _out) = server();
    let mut args = SWEEP.to_vec();
    args.extend([
        "--bidir",
        "--units",
        "Gb/s",
        "--qps",
        "2",
        "--outstanding",
        "2",
    ]);
    let c = client(port, &args);
    let text = String::from_utf8_lossy(&c.stdout).into_owned();
    assert!(
        c.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&c.stderr)
    );
    let r = rows(&text);
    assert_eq!(r.len(), 8, "{text}");
    assert!(
        r.iter().all(|&(_, iters, wrong)| iters == 6 && wrong == 0),
        "{text}"
    );
    for needle in [
        "client -> server",
        "server -> client",
        "2 data QPs, 2 outstanding/QP",
        "(Gb/s)",
        "# both directions at once",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // Each direction names its own sender's connection.
    let conns: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# plugin: "))
        .collect();
    assert_eq!(conns.len(), 2, "{text}");
    assert_ne!(conns[0], conns[1], "{text}");
    assert!(s.wait().unwrap().success());
}

#[test]
fn the_client_fails_when_the_server_dies_mid_run() {
    let (mut s, port, _out) = server();
    let c = dqplb()
        .args(["--client", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--min-bytes",
            "1M",
            "--max-bytes",
            "1M",
            "--iters",
            "100000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) on the server's process group (the server and its children).
    assert_eq!(unsafe { libc::kill(-(s.id() as i32), libc::SIGKILL) }, 0);
    let _ = s.wait();
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("ended the control connection before the run finished"),
        "{err}"
    );
}

#[test]
fn the_client_names_an_absent_server() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let c = client(port, &[]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert_eq!(c.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot connect to the server at 127.0.0.1:"),
        "{err}"
    );
}

/// A stand-in server: accepts the client, answers OK, and runs a real receiver process
/// (`dqplb perf __role bw-recv`) with the client's options but byte checks on, relaying lines
/// as the real server does. A client sent `--no-check` fills its buffers once (iteration 0's
/// pattern), so every later message arrives with bytes the checking receiver counts as wrong.
fn checking_stand_in(l: std::net::TcpListener) -> std::thread::JoinHandle<()> {
    use std::io::Write;
    std::thread::spawn(move || {
        let (ctl, _) = l.accept().unwrap();
        let mut reader = BufReader::new(ctl.try_clone().unwrap());
        let mut hello = String::new();
        reader.read_line(&mut hello).unwrap();
        let json = hello.trim_end().strip_prefix("DQPLB-PERF 1 ").unwrap();
        let mut args: Vec<String> = serde_json::from_str(json).unwrap();
        args.retain(|a| a != "--no-check");
        let mut out = ctl.try_clone().unwrap();
        writeln!(out, "OK").unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_dqplb"))
            .args(["perf", "__role", "bw-recv"])
            .args(&args)
            .env("NCCL_SOCKET_IFNAME", "lo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut relay_out = ctl.try_clone().unwrap();
        let up = std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                writeln!(relay_out, "0 {l}").unwrap();
            }
        });
        for l in reader.lines().map_while(Result::ok) {
            if let Some(line) = l.strip_prefix("0 ") {
                if line.starts_with("HANDLE ") || line == "DONE" {
                    writeln!(stdin, "{line}").unwrap();
                    stdin.flush().unwrap();
                }
            }
            if l.starts_with("END 0") {
                break;
            }
        }
        up.join().unwrap();
        let ok = child.wait().unwrap().success();
        writeln!(out, "END 0 {}", if ok { "ok" } else { "receiver failed" }).unwrap();
    })
}

#[test]
fn wrong_bytes_make_the_client_exit_1() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let stand_in = checking_stand_in(l);
    let c = client(
        port,
        &[
            "--min-bytes",
            "4K",
            "--max-bytes",
            "4K",
            "--iters",
            "5",
            "--no-check",
        ],
    );
    stand_in.join().unwrap();
    let text = String::from_utf8_lossy(&c.stdout).into_owned();
    assert_eq!(
        c.status.code(),
        Some(1),
        "{text}\n{}",
        String::from_utf8_lossy(&c.stderr)
    );
    let r = rows(&text);
    assert_eq!(r.len(), 1, "{text}");
    let (size, iters, wrong) = r[0];
    assert_eq!((size, iters), (4096, 5));
    // Warm-up (1) + 5 messages; all but the first carry iteration 0's bytes.
    assert!(wrong > 0 && wrong <= 5 * 4096, "{text}");
    assert!(text.contains("FAILED"), "{text}");
}
