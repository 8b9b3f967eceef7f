//! A process killed with SIGKILL cannot remove its stats file: `dqplb stats` reports such a file
//! as stale (its pid not running: zombie or gone), never as a live process's counters.

#[path = "common/plugin_pair.rs"]
mod plugin_pair;

use nccl_net_dqplb::plugin::{self, telemetry};
use plugin_pair::{one_message, pair};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(30);
const CHILD_VAR: &str = "DQPLB_STATS_STALE_CHILD";

/// The child's part: a plugin connection with a stats file, one message, then it waits for its
/// SIGKILL with the comm open.
#[test]
fn child_writes_its_file_and_waits() {
    let Ok(template) = std::env::var(CHILD_VAR) else {
        return; // only as the child of the test below
    };
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    std::env::set_var("NCCL_DQPLB_STATS_FILE", &template);
    plugin::init(None).expect("init");
    let (mut send, mut recv) = pair(0);
    one_message(&mut send, &mut recv, 4096);
    let path = telemetry::expand_path(&template);
    assert!(path.exists(), "no stats file at {}", path.display());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn stats(args: &[&str], file: &std::path::Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("stats")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Kills (SIGKILL) and reaps the child if the test ends early, so that no sleeping child keeps
/// the test's output pipe open.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn proc_state(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next())
        .map(String::from)
}

#[test]
fn a_killed_processs_file_is_reported_stale() {
    if std::env::var(CHILD_VAR).is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dqplb-stats-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("s.%p.toml");
    let mut child = Reaped(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_writes_its_file_and_waits",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, &template)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let path = dir.join(format!("s.{pid}.toml"));
    // The child writes its file after its first message, then waits with the comm open.
    let start = Instant::now();
    while telemetry::read_file(&path).map_or(true, |f| f.comms.len() != 1) {
        if let Some(st) = child.0.try_wait().unwrap() {
            panic!("the child ended ({st}) without writing {}", path.display());
        }
        assert!(start.elapsed() < DEADLINE, "no stats file from the child");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Alive: no stale mark anywhere.
    let live = stats(&[], &path);
    assert_eq!(text(&live.stderr), "");
    let header = text(&live.stdout).lines().next().unwrap_or("").to_string();
    assert!(header.starts_with(&format!("# pid {pid} on ")), "{header}");
    assert!(!header.contains("STALE"), "{header}");
    let live_json = stats(&["--json"], &path);
    assert!(
        text(&live_json.stdout).contains("\"process\":\"running\""),
        "{}",
        text(&live_json.stdout)
    );
    child.0.kill().unwrap(); // SIGKILL: no chance to remove the file
    let want_err = |host: &str| {
        format!(
            "dqplb stats: {}: stale: process {pid} on {host} is not running (killed or crashed before removing the file)\n",
            path.display()
        )
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let check = |when: &str| {
        assert!(path.exists(), "{when}: the killed process's file is gone");
        let t = stats(&[], &path);
        assert_eq!(text(&t.stderr), want_err(&host), "{when}");
        let out = text(&t.stdout);
        let header = out.lines().next().unwrap_or("");
        assert!(
            header.starts_with(&format!("# pid {pid} on {host}, written "))
                && header.ends_with("; STALE: the process is not running"),
            "{when}: {header}"
        );
        let j = stats(&["--json"], &path);
        assert!(
            text(&j.stdout).contains("\"process\":\"not running\""),
            "{when}: {}",
            text(&j.stdout)
        );
    };
    // Killed but not yet reaped: a zombie is not running.
    let start = Instant::now();
    while proc_state(pid).as_deref() != Some("Z") {
        assert!(
            start.elapsed() < DEADLINE,
            "the child never became a zombie"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    check("zombie");
    child.0.wait().unwrap();
    check("reaped");
    let _ = std::fs::remove_dir_all(&dir);
}
