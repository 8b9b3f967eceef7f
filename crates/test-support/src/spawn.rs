//! Child processes that play a role: a test binary re-executes itself on one of its own ignored
//! tests with the role in the environment; the child talks to its parent in "@@" stdout lines.

use std::io::Write;
use std::process::Command;

/// libtest arguments that run exactly the ignored test `entry`, uncaptured, on one thread.
pub fn role_args(entry: &str) -> [&str; 5] {
    [
        "--exact",
        entry,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// This test binary, re-executed on its ignored test `entry` with `role_var=role`, the plugin
/// pointed at loopback (NCCL_SOCKET_IFNAME=lo). The caller adds the rest of the environment.
pub fn role_command(entry: &str, role_var: &str, role: &str) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args(role_args(entry))
        .env(role_var, role)
        .env("NCCL_SOCKET_IFNAME", "lo");
    cmd
}

/// Emits one protocol line to the parent (stdout lines without "@@" are libtest's own).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@{line}");
    let _ = out.flush();
}

/// The body of a test binary's ignored child-role test: nothing unless `role_var` is set (a
/// plain `cargo test -- --ignored` run); else runs the role and, if it fails, says "FAIL <error>"
/// to the parent and panics, so the child exits unsuccessfully.
pub fn child_role(role_var: &str, run: impl FnOnce() -> Result<(), String>) {
    if std::env::var_os(role_var).is_none() {
        return;
    }
    if let Err(e) = run() {
        say(&format!("FAIL {e}"));
        panic!("{role_var} child failed: {e}");
    }
}

/// The protocol line in a child's stdout line: what follows "@@" (libtest may print
/// "test <name> ... " in front of the first one); None for libtest's own lines.
pub fn protocol_line(line: &str) -> Option<&str> {
    line.find("@@").map(|at| &line[at + 2..])
}
