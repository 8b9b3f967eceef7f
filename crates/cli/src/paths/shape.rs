//! Per-path shaping of the namespace's loopback with tc HTB: one class per data stream matched on
//! its source port, everything else (control stream, acks) in a fast default class.

use std::process::Command;

/// Device shaped: only the loopback of the namespace the bench runs in.
pub(crate) const DEV: &str = "lo";
/// Class id (minor) of the fast default class; path i uses `PATH_CLASS_BASE + i`.
pub(crate) const DEFAULT_CLASS: u32 = 2;
const PATH_CLASS_BASE: u32 = 100;
/// Rate of the default class: far above anything the paths carry.
pub(crate) const DEFAULT_RATE: &str = "20gbit";
/// HTB bucket: loopback skbs are up to 64 KiB (GSO), so the bucket must hold a few of them.
const BURST_BYTES: u32 = 256 * 1024;

/// A tc invocation as its argument list (without the leading `tc`).
pub(crate) type TcArgs = Vec<String>;

pub(crate) fn args(s: &str) -> TcArgs {
    s.split_whitespace().map(str::to_string).collect()
}

/// tc rate in bit/s (tc's `bit` unit avoids rounding of fractional Mbit/s).
pub(crate) fn rate(mbit: f64) -> String {
    format!("{}bit", (mbit * 1e6).round() as u64)
}

/// Commands that install the plan: HTB root, default class, one class + u32 filter per path.
/// Data stream i (QP i) is connection stream i+1, whose source port is `port_base + 1 + i`;
/// the reverse direction (acks, TCP ACKs) has that port as destination and stays unshaped.
pub(crate) fn install(port_base: u16, rates_mbit: &[f64]) -> Result<Vec<TcArgs>, String> {
    let last = u32::from(port_base) + rates_mbit.len() as u32;
    if last > 65535 {
        return Err(format!(
            "port base {port_base} + {} paths exceeds port 65535",
            rates_mbit.len()
        ));
    }
    if let Some(bad) = rates_mbit.iter().find(|r| !r.is_finite() || **r < 0.01) {
        return Err(format!("path rate {bad} Mbit/s: must be at least 0.01"));
    }
    let mut cmds = vec![
        args(&format!("qdisc replace dev {DEV} root handle 1: htb default {DEFAULT_CLASS}")),
        args(&format!(
            "class add dev {DEV} parent 1: classid 1:{DEFAULT_CLASS} htb rate {DEFAULT_RATE} ceil {DEFAULT_RATE} burst 1mb cburst 1mb quantum 200000"
        )),
    ];
    for (i, r) in rates_mbit.iter().enumerate() {
        let class = PATH_CLASS_BASE + i as u32;
        cmds.push(class_cmd("add", class, *r));
        let port = u32::from(port_base) + 1 + i as u32;
        cmds.push(args(&format!(
            "filter add dev {DEV} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff match ip sport {port} 0xffff flowid 1:{class}"
        )));
    }
    Ok(cmds)
}

pub(crate) fn class_cmd(verb: &str, class: u32, mbit: f64) -> TcArgs {
    let r = rate(mbit);
    args(&format!(
        "class {verb} dev {DEV} parent 1: classid 1:{class} htb rate {r} ceil {r} burst {BURST_BYTES}b cburst {BURST_BYTES}b quantum 65536"
    ))
}

/// The command that changes path `path` to `mbit` (scenario 4's degradation and recovery).
pub(crate) fn change(path: usize, mbit: f64) -> TcArgs {
    class_cmd("change", PATH_CLASS_BASE + path as u32, mbit)
}

/// Removes the root qdisc (and with it every class and filter).
pub(crate) fn remove() -> TcArgs {
    args(&format!("qdisc del dev {DEV} root"))
}

/// Runs one tc command; Err carries tc's stderr.
pub(crate) fn run_tc(a: &TcArgs) -> Result<(), String> {
    let out = Command::new("tc")
        .args(a)
        .output()
        .map_err(|e| format!("cannot run tc {}: {e}", a.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "tc {} failed ({}): {}",
            a.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Refuses to shape anything unless this process lives in a named network namespace made by
/// `ip netns add` (its nsfs inode is one of /run/netns/*): the host's loopback is never touched.
pub(crate) fn check_private_netns() -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let mine = std::fs::metadata("/proc/self/ns/net")
        .map_err(|e| format!("cannot stat /proc/self/ns/net: {e}"))?;
    let named = std::fs::read_dir("/run/netns").map_err(|e| {
        format!("no /run/netns ({e}): refusing to shape the host loopback; run through scripts/paths-bench.sh (ip netns exec)")
    })?;
    for entry in named.flatten() {
        if let Ok(m) = std::fs::metadata(entry.path()) {
            if m.dev() == mine.dev() && m.ino() == mine.ino() {
                return Ok(());
            }
        }
    }
    Err("refusing to shape: this process is not inside a namespace from `ip netns add` (/run/netns); run it through scripts/paths-bench.sh".into())
}

/// Installs a shaping plan and removes it when dropped.
pub(crate) struct Shaper {
    installed: bool,
}

impl Shaper {
    pub(crate) fn install(port_base: u16, rates_mbit: &[f64]) -> Result<Shaper, String> {
        Shaper::run_plan(install(port_base, rates_mbit)?)
    }

    /// Installs any plan whose first command replaces the root qdisc (see `hashed_shape`).
    pub(crate) fn run_plan(cmds: Vec<TcArgs>) -> Result<Shaper, String> {
        check_private_netns()?;
        // A leftover plan from an aborted trial is replaced; a missing one is not an error.
        let _ = run_tc(&remove());
        let mut s = Shaper { installed: true };
        for c in cmds {
            if let Err(e) = run_tc(&c) {
                s.clear();
                return Err(e);
            }
        }
        Ok(s)
    }

    fn clear(&mut self) {
        if self.installed {
            self.installed = false;
            if let Err(e) = run_tc(&remove()) {
                eprintln!("paths-bench: warning: {e}");
            }
        }
    }
}

impl Drop for Shaper {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_matches_each_data_stream_by_source_port() {
        let cmds = install(20000, &[100.0, 12.5]).unwrap();
        let text: Vec<String> = cmds.iter().map(|c| c.join(" ")).collect();
        assert_eq!(text.len(), 6);
        assert_eq!(text[0], "qdisc replace dev lo root handle 1: htb default 2");
        assert!(
            text[2].contains("classid 1:100 htb rate 100000000bit ceil 100000000bit"),
            "{}",
            text[2]
        );
        // Stream 0 (control, port 20000) is not matched; QP 0 is port 20001, QP 1 port 20002.
        assert!(
            text[3].ends_with("match ip sport 20001 0xffff flowid 1:100"),
            "{}",
            text[3]
        );
        assert!(text[4].contains("rate 12500000bit"), "{}", text[4]);
        assert!(
            text[5].ends_with("match ip sport 20002 0xffff flowid 1:101"),
            "{}",
            text[5]
        );
        assert!(
            !text.iter().any(|t| t.contains("dport")),
            "acks must not be shaped"
        );
    }

    #[test]
    fn bad_plans_are_refused() {
        assert!(install(65534, &[1.0, 1.0])
            .unwrap_err()
            .contains("exceeds port 65535"));
        assert!(install(20000, &[0.0])
            .unwrap_err()
            .contains("at least 0.01"));
        assert!(install(20000, &[f64::NAN]).is_err());
        assert_eq!(change(2, 10.0).join(" "), "class change dev lo parent 1: classid 1:102 htb rate 10000000bit ceil 10000000bit burst 262144b cburst 262144b quantum 65536");
    }
}
