//! `dqplb perf --plugin PATH`: the perf driver through a dlopened plugin's ncclNetPlugin_v8 (our
//! own built .so here), byte-checked end to end; a path that is no plugin exits 2 naming it.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Our plugin .so as a foreign one: `$DQPLB_PLUGIN_SO`, else the `libnccl_net_dqplb.so` cargo
/// built for this test run (`target/<profile>/deps/`), else the copy in `target/<profile>/`.
fn our_so() -> PathBuf {
    if let Some(p) = std::env::var_os("DQPLB_PLUGIN_SO") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    let fresh = deps.join("libnccl_net_dqplb.so");
    if fresh.exists() {
        return fresh;
    }
    let up = deps
        .parent()
        .expect("profile directory")
        .join("libnccl_net_dqplb.so");
    assert!(
        up.exists(),
        "no plugin .so at {} or {} (build the dqplb-net cdylib or set DQPLB_PLUGIN_SO)",
        fresh.display(),
        up.display()
    );
    up
}

fn dqplb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .arg("perf")
        .args(args)
        .env("NCCL_SOCKET_IFNAME", "lo")
        .output()
        .expect("run dqplb")
}

#[test]
fn our_own_so_through_dlopen_moves_every_byte() {
    let so = our_so();
    let so_s = so.to_str().expect("utf-8 path");
    let out = dqplb(&[
        "--plugin",
        so_s,
        "--min-bytes",
        "3",
        "--max-bytes",
        "1M",
        "--step-factor",
        "16",
        "--iters",
        "6",
        "--warmup",
        "2",
        "--qps",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The header names the .so, its vtable's name and the device (device 0 of our plugin is
    // the loopback interface with NCCL_SOCKET_IFNAME=lo).
    let head: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    assert!(
        head[0].starts_with("# dqplb perf: another plugin's ncclNetPlugin_v8 (--plugin), 4 in flight, check every iteration"),
        "{stdout}"
    );
    let want = format!("# plugin: {so_s} (name \"DQPLB\"), device 0 \"lo\"");
    assert_eq!(head[1], want, "{stdout}");
    let rows: Vec<(u64, u64, u64)> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[3].parse().unwrap(),
                f[7].parse().unwrap(),
            )
        })
        .collect();
    // Every size, every iteration, every received byte checked: #wrong 0.
    assert_eq!(
        rows,
        vec![
            (3, 6, 0),
            (48, 6, 0),
            (768, 6, 0),
            (12288, 6, 0),
            (196608, 6, 0),
            (1048576, 6, 0)
        ],
        "{stdout}"
    );
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    // --plugin-dev picks by name; a name the plugin lacks fails the run (exit 1) listing them.
    let out = dqplb(&[
        "--plugin",
        so_s,
        "--plugin-dev",
        "no-such-nic",
        "--min-bytes",
        "8",
        "--max-bytes",
        "8",
        "--iters",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "ERROR bw-recv: --plugin-dev no-such-nic: no such device; the plugin's devices are: lo"
        ),
        "{stderr}"
    );
}

#[test]
fn latency_through_the_dlopened_so_and_raw_tcp() {
    let so = our_so();
    let so_s = so.to_str().expect("utf-8 path");
    let out = dqplb(&[
        "--plugin",
        so_s,
        "--latency",
        "--iters",
        "200",
        "--warmup",
        "20",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "# plugin: {so_s} (name \"DQPLB\"), device 0 \"lo\""
        )),
        "{stdout}"
    );
    // One row per transport: the dlopened plugin, then raw TCP, 200 samples each.
    let rows: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("plugin".to_string(), "200".to_string()),
            ("raw-tcp".to_string(), "200".to_string())
        ],
        "{stdout}"
    );
}

/// The path of this process's libc as the loader mapped it: a loadable .so that is no plugin.
fn libc_path() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            std::path::Path::new(p)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libc.so"))
        })
        .expect("libc in /proc/self/maps")
        .to_string()
}

#[test]
fn a_path_that_is_no_plugin_exits_2_naming_path_and_symbol() {
    let libc = libc_path();
    let out = dqplb(&["--plugin", &libc, "--max-bytes", "8"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let want = format!(
        "dqplb perf: --plugin {libc}: not an NCCL net plugin: no symbol ncclNetPlugin_v8 ("
    );
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(
        stderr.contains("undefined symbol: ncclNetPlugin_v8"),
        "{stderr}"
    );

    let missing = "/nonexistent/libnccl-net-peer.so";
    let out = dqplb(&["--plugin", missing, "--max-bytes", "8"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!("dqplb perf: --plugin {missing}: cannot load it: {missing}: cannot open shared object file")),
        "{stderr}"
    );
}
