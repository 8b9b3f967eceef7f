//! The plugin on a host without libibverbs: a child process that cannot load libibverbs.so.1
//! (hidden by bind mounts in a private mount namespace, or simply not installed) dlopens the built
//! .so, whose init must succeed with TCP devices, log the missing library once at INFO and carry a
//! message over lo. Also: the .so has no NEEDED entry for libibverbs or librdmacm.

#[allow(dead_code)]
mod harness;

use dqplb_test_support::dl::{plugin_path, Plugin};
use dqplb_test_support::logger::CLogger;
use dqplb_test_support::spawn::{child_role, role_args, say};
use harness::driver::{Net, Ptr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "DQPLB_HIDDEN_ROLE";
/// What the plugin logs (once) when libibverbs.so.1 cannot be loaded.
const NO_LIB_LINE: &str = "libibverbs.so.1 not loadable";

/// The plugin .so, or None (after a loud message) where it was not shipped (the Soft-RoCE VM
/// copies test binaries without it).
fn plugin_or_skip(test: &str) -> Option<PathBuf> {
    let p = plugin_path();
    if p.exists() {
        return Some(p);
    }
    skip(&format!(
        "{test}: plugin library {} not found next to this test binary",
        p.display()
    ));
    None
}

/// A check that cannot run here: SKIPPED on a developer's host, a failure where every check must
/// run (DQPLB_REQUIRE_ALL=1, as CI's .ci/run sets).
fn skip(why: &str) {
    assert!(
        std::env::var("DQPLB_REQUIRE_ALL").as_deref() != Ok("1"),
        "cannot run, and DQPLB_REQUIRE_ALL=1 requires it: {why}"
    );
    eprintln!("!!!! SKIPPED: {why}");
}

/// Child-process entry point: does nothing unless `ROLE` is set.
#[test]
#[ignore = "entry point for the child process spawned by plugin_works_without_libibverbs"]
fn hidden_child() {
    child_role(ROLE, || {
        child()?;
        say("OK");
        Ok(())
    });
}

fn child() -> Result<(), String> {
    // the hiding worked: libibverbs.so.1 is not loadable in this process
    // SAFETY: plain dlopen of a soname; a handle, if any, is closed again at once.
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if !h.is_null() {
        // SAFETY: `h` came from dlopen above.
        unsafe { libc::dlclose(h) };
        return Err("libibverbs.so.1 is still loadable in the child".into());
    }
    let plugin = Plugin::load(&plugin_path())?;
    let logger = CLogger::load()?;
    let net = Net::new(&plugin);
    let ndev = net.init_and_check(&logger).map_err(|e| e.to_string())?;
    if ndev < 1 {
        return Err(format!("devices() = {ndev}"));
    }
    let props = net.properties(0).map_err(|e| e.to_string())?;
    // SAFETY: init_and_check verified the name is a non-NULL C string.
    let name = unsafe { std::ffi::CStr::from_ptr(props.name) }
        .to_string_lossy()
        .into_owned();
    if name != "lo" {
        return Err(format!(
            "device 0 is {name:?}, expected the TCP interface \"lo\""
        ));
    }
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    if maps.contains("libibverbs") {
        return Err("libibverbs is mapped into the child after init".into());
    }
    transfer(&net)?;
    say(&format!("DONE devices={ndev} dev0={name}"));
    Ok(())
}

/// listen / connect / accept on device 0 of this process, then one 6 KiB isend/irecv pair.
fn transfer(net: &Net) -> Result<(), String> {
    let e = |e: harness::driver::CallError| e.to_string();
    let (mut handle, listen) = net.listen(0).map_err(e)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut send, mut recv): (Option<Ptr>, Option<Ptr>) = (None, None);
    while send.is_none() || recv.is_none() {
        if send.is_none() {
            send = net.connect_once(0, &mut handle).map_err(e)?;
        }
        if recv.is_none() {
            recv = net.accept_once(listen).map_err(e)?;
        }
        if Instant::now() > deadline {
            return Err("connect/accept did not finish in 30 s".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let (send, recv) = (send.expect("send comm"), recv.expect("recv comm"));
    const LEN: usize = 6 * 1024 + 13;
    let mut src: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; LEN];
    let smh = net.reg_mr(send, &mut src).map_err(e)?;
    let rmh = net.reg_mr(recv, &mut dst).map_err(e)?;
    let (mut sreq, mut rreq) = (None, None);
    let (mut sdone, mut rdone) = (None, None);
    while sdone.is_none() || rdone.is_none() {
        if rreq.is_none() {
            // SAFETY: dst is registered as rmh and outlives the request.
            rreq = unsafe { net.irecv(recv, dst.as_mut_ptr(), LEN, 7, rmh) }.map_err(e)?;
        }
        if sreq.is_none() {
            // SAFETY: src is registered as smh and outlives the request.
            sreq = unsafe { net.isend(send, src.as_mut_ptr(), LEN, 7, smh) }.map_err(e)?;
        }
        if let (Some(r), None) = (sreq, sdone) {
            sdone = net.test(r).map_err(e)?;
        }
        if let (Some(r), None) = (rreq, rdone) {
            rdone = net.test(r).map_err(e)?;
        }
        if Instant::now() > deadline {
            return Err("isend/irecv did not complete in 30 s".into());
        }
    }
    if rdone != Some(LEN) {
        return Err(format!(
            "receive completed with {rdone:?} bytes, expected {LEN}"
        ));
    }
    if dst != src {
        let at = dst.iter().zip(&src).position(|(a, b)| a != b);
        return Err(format!("received bytes differ (first at {at:?})"));
    }
    net.dereg_mr(send, smh).map_err(e)?;
    net.dereg_mr(recv, rmh).map_err(e)?;
    net.close_send(send).map_err(e)?;
    net.close_recv(recv).map_err(e)?;
    net.close_listen(listen).map_err(e)?;
    Ok(())
}

/// Paths the dynamic loader could open for libibverbs.so.1 (ldconfig's cache, and where they lead).
fn libibverbs_paths() -> Vec<PathBuf> {
    let out = Command::new("ldconfig").arg("-p").output();
    let text = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(_) => String::new(),
    };
    let mut paths: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        if !line.trim_start().starts_with("libibverbs.so.1 ") {
            continue;
        }
        if let Some((_, p)) = line.split_once("=> ") {
            let p = PathBuf::from(p.trim());
            for q in [p.clone(), std::fs::canonicalize(&p).unwrap_or(p)] {
                if q.exists() && !paths.contains(&q) {
                    paths.push(q);
                }
            }
        }
    }
    paths
}

fn loadable_here() -> bool {
    // SAFETY: plain dlopen of a soname; the handle is closed again at once.
    let h = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        return false;
    }
    // SAFETY: `h` came from dlopen above.
    unsafe { libc::dlclose(h) };
    true
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[test]
fn plugin_works_without_libibverbs() {
    let Some(_) = plugin_or_skip("plugin_works_without_libibverbs") else {
        return;
    };
    // Where the kernel lists RDMA devices, a missing libibverbs makes them unusable and init
    // fails on purpose (no silent TCP): this test is about hosts without RDMA.
    let rdma = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    if rdma {
        skip("plugin_works_without_libibverbs: this host has RDMA devices");
        return;
    }
    // build the C logger once here, so the child only loads it
    CLogger::load().unwrap_or_else(|e| panic!("{e}"));
    let exe = std::env::current_exe().expect("current_exe");
    let child_args = role_args("hidden_child");
    let mut cmd = if !loadable_here() {
        eprintln!("libibverbs.so.1 is not installed here: running the child directly");
        let mut c = Command::new(&exe);
        c.args(child_args);
        c
    } else {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let unshare = Command::new("unshare")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let paths = libibverbs_paths();
        if !root || !unshare || paths.is_empty() {
            skip(&format!(
                "plugin_works_without_libibverbs: libibverbs is installed and cannot be hidden \
                 (root {root}, unshare {unshare}, ldconfig paths {paths:?})"
            ));
            return;
        }
        let empty = std::env::temp_dir().join(format!("dqplb-empty-{}.so", std::process::id()));
        std::fs::write(&empty, b"").expect("write the empty stand-in");
        let mut script = String::from("set -e\n");
        for p in &paths {
            script += &format!("mount --bind {} {}\n", sh_quote(&empty), sh_quote(p));
        }
        script += "exec \"$@\"\n";
        let mut c = Command::new("unshare");
        c.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(&exe)
        .args(child_args);
        c
    };
    let out = cmd
        .env(ROLE, "1")
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("NCCL_DEBUG", "INFO")
        .env("DQPLB_HARNESS_VERBOSE", "1")
        .env_remove("NCCL_DQPLB_TRANSPORT")
        .env_remove("NCCL_IB_DISABLE")
        .env_remove("DQPLB_PLUGIN_SO")
        .stdin(Stdio::null())
        .output()
        .expect("spawn the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- child stdout ---\n{stdout}\n--- child stderr ---\n{stderr}");
    if !out.status.success() && stderr.contains("mount") && !stdout.contains("@@") {
        // no CAP_SYS_ADMIN (unprivileged container): the namespace trick is unavailable
        skip("plugin_works_without_libibverbs: could not hide libibverbs");
        return;
    }
    assert!(
        out.status.success() && stdout.contains("@@OK"),
        "child failed ({})",
        out.status
    );
    assert!(stdout.contains("@@DONE devices="), "{stdout}");
    let info: Vec<&str> = stderr.lines().filter(|l| l.contains(NO_LIB_LINE)).collect();
    assert_eq!(
        info.len(),
        1,
        "expected one INFO line about libibverbs: {info:?}"
    );
    assert!(
        info[0].contains("[plugin L3"),
        "not logged at INFO: {}",
        info[0]
    );
    // The init line says which transport runs and why.
    assert!(
        info[0].contains("; transport TCP (no RDMA device found; libibverbs.so.1 not loadable ("),
        "{}",
        info[0]
    );
}

#[test]
fn plugin_has_no_rdma_core_dependency() {
    let Some(so) = plugin_or_skip("plugin_has_no_rdma_core_dependency") else {
        return;
    };
    let out = match Command::new("readelf").arg("-d").arg(&so).output() {
        Ok(o) if o.status.success() => o,
        _ => {
            skip("plugin_has_no_rdma_core_dependency: readelf unavailable");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<&str> = text.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        !needed.is_empty(),
        "no NEEDED entries at all in {}: {text}",
        so.display()
    );
    for l in &needed {
        assert!(
            !l.contains("libibverbs") && !l.contains("librdmacm"),
            "{} links rdma-core: {l}",
            so.display()
        );
    }
}
