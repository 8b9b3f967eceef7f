//! NCCL emulator: drives the RELEASE libnccl_net_dqplb.so the way NCCL 2.20-2.30 does (loader:
//! newest ncclNetPlugin_vN first, v9-v12 natively as 2.24/2.26/2.28/2.30 call them and v8 through
//! the shim (tests/emulator/versions.rs, nccl.rs), GDR probe, net transport setup, proxy progress
//! loops, destroy/abort, dlclose), written from NCCL's source (src/transport/net.cc, src/plugin/net*.cc, src/net.cc, src/proxy.cc); every
//! emulated behaviour in tests/emulator/ names the NCCL file, function and versions it follows.
//!
//! Ranks are child processes of this binary (`emulator_child_role`); handles go through files.
//! Transport: NCCL_DQPLB_TRANSPORT from the environment (default tcp), NCCL_SOCKET_IFNAME=lo.
//! Build the library first: `cargo test --release --test nccl_emulator` builds target/release/deps/.
//!
//! Against a plugin whose vtable sets `irecvConsumed` to a function that fails (the DQPLB vtable
//! before the fix), every data-moving test here fails at the first consumed receive, exactly where
//! NCCL's recvProxyProgress would abort; the probe tests still pass.

mod emulator;

use emulator::spawn::{self, field};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

/// Child-process entry point: a no-op unless spawned with DQPLB_EMU_ROLE.
#[test]
#[ignore = "entry point of the emulated NCCL ranks (child processes)"]
fn emulator_child_role() {
    dqplb_test_support::spawn::child_role("DQPLB_EMU_ROLE", emulator::child::run);
}

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Runs a workload and checks the OK lines: every rank verified data and, under the 2.24+ loader
/// with several communicators, dlopened and dlclosed once per communicator.
fn run(name: &str, nranks: usize, pairs: &[(&'static str, &str)]) -> Vec<String> {
    let e = env(pairs);
    let out = spawn::run(name, nranks, &e, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let comms: u64 = pairs
        .iter()
        .find(|(k, _)| *k == "DQPLB_EMU_COMMS")
        .map_or(2, |(_, v)| v.parse().unwrap());
    let direct = pairs
        .iter()
        .any(|(k, v)| *k == "DQPLB_EMU_NCCL" && *v == "2.20");
    let mut oks = Vec::new();
    for (rank, lines) in out.lines.iter().enumerate() {
        let ok = lines.iter().find(|l| l.starts_with("OK ")).unwrap().clone();
        if !ok.starts_with("OK probe") {
            assert!(
                field(&ok, "verified").unwrap() > 0,
                "{name} rank {rank}: nothing verified: {ok}"
            );
        }
        let (opens, closes, inits) = (
            field(&ok, "dlopens"),
            field(&ok, "dlcloses"),
            field(&ok, "inits"),
        );
        if direct {
            assert_eq!(
                (opens, closes, inits),
                (Some(1), Some(0), Some(1)),
                "{name} rank {rank}: {ok}"
            );
        } else {
            assert_eq!(
                (opens, closes, inits),
                (Some(comms), Some(comms), Some(comms)),
                "{name} rank {rank}: {ok}"
            );
        }
        oks.push(ok);
    }
    eprintln!("{name}: {oks:#?}");
    oks
}

/// Init through the loader, getProperties, then the GDR probe sequence (listen, connect/accept
/// alternating in one thread, regMr/deregMr on both comms, close) with host memory, in two
/// communicators with dlclose/dlopen in between (NCCL 2.28 loader).
#[test]
fn gdr_probe_sequence_host_memory_and_reload() {
    run(
        "probe",
        1,
        &[("DQPLB_EMU_WORK", "probe"), ("DQPLB_EMU_COMMS", "2")],
    );
}

/// The test-only switch (DQPLB_TEST_FORCE_GDR=1) advertises NCCL_PTR_CUDA: NCCL's GDR probe
/// (ncclGpuGdrSupport: regMr with NCCL_PTR_CUDA on both comms) runs at every communicator init
/// and again as the workload, and passes.
#[test]
fn gdr_probe_passes_with_cuda_advertised() {
    let oks = run(
        "probe-cuda",
        1,
        &[
            ("DQPLB_EMU_WORK", "probe"),
            ("DQPLB_EMU_COMMS", "2"),
            ("DQPLB_TEST_FORCE_GDR", "1"),
        ],
    );
    assert_eq!(field(&oks[0], "cuda_devs"), Some(1), "{oks:?}");
}

/// GDR receives as NCCL runs them (useGdr, needFlush): receive buffers registered as
/// NCCL_PTR_CUDA after the GDR probe, and every SIMPLE step that received data flushed through
/// iflush, its request tested until done (a NULL request on TCP; an RDMA READ on verbs).
#[test]
fn gdr_probe_then_ring_with_gdr_receives_and_iflush() {
    let oks = run(
        "ring-gdr-simple",
        2,
        &[
            ("DQPLB_EMU_WORK", "ring"),
            ("DQPLB_EMU_PROTO", "SIMPLE"),
            ("DQPLB_EMU_CHANNELS", "2"),
            ("DQPLB_EMU_BYTES", "1048576"),
            ("DQPLB_EMU_COMMS", "2"),
            ("DQPLB_TEST_FORCE_GDR", "1"),
            ("DQPLB_EMU_GDR", "1"),
        ],
    );
    // verbs (the VM): every flush is an RDMA READ request; TCP has no flush QP: all NULL
    let verbs = std::env::var("NCCL_DQPLB_TRANSPORT").as_deref() == Ok("verbs");
    for ok in &oks {
        let (flushes, irecvs) = (field(ok, "iflush").unwrap(), field(ok, "irecv").unwrap());
        assert!(flushes > 0 && flushes <= irecvs, "{ok}");
        let requests = field(ok, "iflush_req").unwrap();
        assert_eq!(requests, if verbs { flushes } else { 0 }, "{ok}");
    }
}

/// The 2.20-2.23 loader: dlopen once, init once, never dlclose, for three communicators.
#[test]
fn probe_with_direct_v8_loader_of_nccl_2_20() {
    run(
        "probe-2.20",
        1,
        &[
            ("DQPLB_EMU_WORK", "probe"),
            ("DQPLB_EMU_COMMS", "3"),
            ("DQPLB_EMU_NCCL", "2.20"),
        ],
    );
}

fn ring(policy: &str, p: usize, c: usize, bytes: usize, proto: &str, nccl: &str) {
    let name = format!("ring-{policy}-p{p}-c{c}-{proto}-{nccl}");
    let (b, cs) = (bytes.to_string(), c.to_string());
    run(
        &name,
        p,
        &[
            ("NCCL_DQPLB_POLICY", policy),
            ("DQPLB_EMU_WORK", "ring"),
            ("DQPLB_EMU_CHANNELS", &cs),
            ("DQPLB_EMU_BYTES", &b),
            ("DQPLB_EMU_PROTO", proto),
            ("DQPLB_EMU_NCCL", nccl),
            ("DQPLB_EMU_COMMS", "2"),
        ],
    );
}

fn a2a(policy: &str, p: usize, c: usize, bytes: usize, nccl: &str) {
    let name = format!("a2a-{policy}-p{p}-c{c}-{nccl}");
    let (b, cs) = (bytes.to_string(), c.to_string());
    run(
        &name,
        p,
        &[
            ("NCCL_DQPLB_POLICY", policy),
            ("DQPLB_EMU_WORK", "a2a"),
            ("DQPLB_EMU_CHANNELS", &cs),
            ("DQPLB_EMU_BYTES", &b),
            ("DQPLB_EMU_NCCL", nccl),
            ("DQPLB_EMU_COMMS", "2"),
        ],
    );
}

const MIB: usize = 1 << 20;

macro_rules! matrix {
    ($($name:ident: $kind:ident $p:literal x $c:literal, $bytes:expr;)*) => {$(
        #[test]
        fn $name() {
            matrix!(@ $kind $p $c $bytes);
        }
    )*};
    (@ ring $p:literal $c:literal $bytes:expr) => { ring("dqplb", $p, $c, $bytes, "SIMPLE", "2.28") };
    (@ a2a $p:literal $c:literal $bytes:expr) => { a2a("dqplb", $p, $c, $bytes, "2.28") };
}

// The full P x C matrix for the dqplb policy: ring all-reduce (SIMPLE) and all-to-all (p2p).
matrix! {
    ring_allreduce_dqplb_p2_c1: ring 2 x 1, 8 * MIB;
    ring_allreduce_dqplb_p2_c4: ring 2 x 4, 8 * MIB;
    ring_allreduce_dqplb_p2_c8: ring 2 x 8, 8 * MIB;
    ring_allreduce_dqplb_p4_c1: ring 4 x 1, 4 * MIB;
    ring_allreduce_dqplb_p4_c4: ring 4 x 4, 4 * MIB;
    ring_allreduce_dqplb_p4_c8: ring 4 x 8, 4 * MIB;
    ring_allreduce_dqplb_p8_c1: ring 8 x 1, 2 * MIB;
    ring_allreduce_dqplb_p8_c4: ring 8 x 4, 2 * MIB;
    ring_allreduce_dqplb_p8_c8: ring 8 x 8, 2 * MIB;
    all_to_all_dqplb_p2_c1: a2a 2 x 1, 4 * MIB;
    all_to_all_dqplb_p2_c4: a2a 2 x 4, 4 * MIB;
    all_to_all_dqplb_p2_c8: a2a 2 x 8, 4 * MIB;
    all_to_all_dqplb_p4_c1: a2a 4 x 1, 3 * MIB;
    all_to_all_dqplb_p4_c4: a2a 4 x 4, 3 * MIB;
    all_to_all_dqplb_p4_c8: a2a 4 x 8, 3 * MIB;
    all_to_all_dqplb_p8_c1: a2a 8 x 1, 2 * MIB;
    all_to_all_dqplb_p8_c4: a2a 8 x 4, 2 * MIB;
    all_to_all_dqplb_p8_c8: a2a 8 x 8, 2 * MIB;
}

/// Every engine policy on one P/C combination, all three protocols (LL, LL128, SIMPLE step and
/// slice sizes), plus an all-to-all.
fn policy(policy: &str) {
    ring(policy, 4, 4, 3 * MIB + 4096 * 3, "ALL", "2.28");
    a2a(policy, 4, 4, 3 * MIB, "2.28");
}

#[test]
fn policy_dqplb_all_protocols() {
    policy("dqplb");
}

#[test]
fn policy_dqplb_led_all_protocols() {
    policy("dqplb-led");
}

#[test]
fn policy_static_split_all_protocols() {
    policy("static-split");
}

#[test]
fn policy_round_robin_message_all_protocols() {
    policy("round-robin-message");
}

#[test]
fn policy_single_qp_all_protocols() {
    policy("single-qp");
}

/// The other NCCL generations loading the plugin as a v8-only plugin would be loaded
/// (`DQPLB_EMU_PLUGIN_VERSION=8`: dlsym finds only ncclNetPlugin_v8): 2.20 (direct v8, no
/// dlclose), 2.24 (shim, dlclose), 2.30 (receive sizes no longer capped by nbytes: p2p posts a
/// full 128 KiB chunk even for 0-byte messages).
/// NCCL's shared-comm pattern: ranks of one process share a proxy and its comms, so ops with
/// different tags (each rank's tpRank) travel over one comm, each op its own ncclProxyArgs,
/// offered in the proxy's list order (progressOps, src/proxy.cc; sendProxyProgress and
/// recvProxyProgress, src/transport/net.cc 2.20-2.30). The sender's list runs in the other order
/// (DQPLB_EMU_A2A_SPLIT=1): its first isends carry tags the receiver's head group lacks, which
/// net_ib answers with a NULL request (ncclIbIsend) and the proxy offers again; every byte must
/// arrive where its tag says.
#[test]
fn ops_with_different_tags_over_one_comm_in_proxy_order() {
    for nccl in ["2.20", "2.28", "2.30"] {
        let name = format!("a2a-split-{nccl}");
        let oks = run(
            &name,
            2,
            &[
                ("NCCL_DQPLB_POLICY", "dqplb"),
                ("DQPLB_EMU_WORK", "a2a"),
                ("DQPLB_EMU_CHANNELS", "2"),
                ("DQPLB_EMU_BYTES", "3145728"),
                ("DQPLB_EMU_NCCL", nccl),
                ("DQPLB_EMU_COMMS", "2"),
                ("DQPLB_EMU_A2A_SPLIT", "1"),
            ],
        );
        for ok in &oks {
            assert!(field(ok, "isend_null").unwrap() > 0, "{name}: {ok}");
        }
    }
}

#[test]
fn nccl_versions_2_20_2_24_2_30() {
    for v in ["2.20", "2.24", "2.30"] {
        versioned("ring", v, "8", &[]);
        versioned("a2a", v, "8", &[]);
    }
}

/// `work` (ring with every protocol, or all-to-all) under NCCL `nccl`, the plugin capped at
/// version `cap`; returns each rank's VERSIONS line.
fn versioned(work: &str, nccl: &str, cap: &str, extra: &[(&'static str, &str)]) -> Vec<String> {
    let name = format!("{work}-nccl{nccl}-v{cap}");
    let mut pairs = vec![
        ("NCCL_DQPLB_POLICY", "dqplb"),
        ("DQPLB_EMU_WORK", work),
        ("DQPLB_EMU_CHANNELS", if work == "ring" { "4" } else { "2" }),
        (
            "DQPLB_EMU_BYTES",
            if work == "ring" { "2097152" } else { "1048576" },
        ),
        ("DQPLB_EMU_NCCL", nccl),
        ("DQPLB_EMU_COMMS", "2"),
        ("DQPLB_EMU_PLUGIN_VERSION", cap),
    ];
    if work == "ring" {
        pairs.push(("DQPLB_EMU_PROTO", "ALL"));
    }
    pairs.extend_from_slice(extra);
    let e = env(&pairs);
    let out = spawn::run(&name, 2, &e, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let mut lines = Vec::new();
    for (rank, l) in out.lines.iter().enumerate() {
        let ok = l.iter().find(|x| x.starts_with("OK ")).unwrap();
        assert!(
            field(ok, "verified").unwrap() > 0,
            "{name} rank {rank}: {ok}"
        );
        if nccl != "2.20" {
            // Every communicator dlopens, inits (v8/v9/v10: once per load; v11+: per
            // communicator, which here is also once per load) and dlcloses the plugin.
            for k in ["dlopens", "dlcloses", "inits"] {
                assert_eq!(field(ok, k), Some(2), "{name} rank {rank} {k}: {ok}");
            }
        }
        let v = l
            .iter()
            .find(|x| x.starts_with("VERSIONS "))
            .unwrap()
            .clone();
        eprintln!("{name} rank {rank}: {v}");
        lines.push(v);
    }
    lines
}

/// A signed `key=` value of a VERSIONS line.
fn ifield(line: &str, key: &str) -> i64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// Each version loaded natively by the NCCL that first looks for it: v9 by 2.24, v10 by 2.26,
/// v11 by 2.28, v12 by 2.30 (v8 by 2.20-2.23 and through the shim: nccl_versions_2_20_2_24_2_30),
/// ring with every protocol and all-to-all, two communicators each with dlclose/dlopen between.
/// Checked per version: the 0x1 optional-completion hint on every irecv (v9+) is overwritten;
/// the communicator's trafficClass (DQPLB_EMU_TC=72, v10+) is on the plugin's TCP sockets
/// (getsockopt IP_TOS on this process's sockets) or, over rxe0, in the GRH of its data QPs (what
/// ibv_query_qp reports, logged per QP): v10 marks the connecting side only, since v10's listen
/// has no config; v11+ both sides; profiler events (v10+) one per segment, all stopped, as many
/// bytes as were sent; v11+ init/finalize per communicator with setNetAttr,
/// and no descriptor or thread left after the last finalize + dlclose; v12 railId/planeId from
/// NCCL_IB_HCA (`=lo::11`: fabricId 11, 8 rails -> rail 3, no plane) and -1 without it.
#[test]
fn native_versions_v9_v10_v11_v12() {
    let verbs = on_verbs();
    let dir = std::env::temp_dir().join(format!("dqplb-emu-versions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Over rxe0 the traffic class is checked on the data QPs (the plugin logs what
    // ibv_query_qp reports for each), over TCP on the sockets.
    let hca_dev = if verbs { "=rxe0:1:11" } else { "=lo::11" };
    for (nccl, v) in [("2.24", 9), ("2.26", 10), ("2.28", 11), ("2.30", 12)] {
        for work in ["ring", "a2a"] {
            let log = dir.join(format!("{work}-{v}"));
            let log_s = log.to_string_lossy().to_string();
            let mut extra: Vec<(&'static str, &str)> = vec![("DQPLB_EMU_TC", "72")];
            if verbs {
                extra.push(("NCCL_DEBUG", "INFO"));
                extra.push(("DQPLB_EMU_LOG_FILE", &log_s));
            }
            if v == 12 && work == "a2a" {
                extra.push(("NCCL_IB_HCA", hca_dev));
            }
            let lines = versioned(work, nccl, "12", &extra);
            let (qp_lines, qp_marked) = if verbs {
                qp_traffic_classes(&log, 72)
            } else {
                (0, 0)
            };
            for line in lines {
                assert_eq!(ifield(&line, "plugin_version"), v, "{line}");
                assert!(ifield(&line, "hints") > 0, "{line}");
                assert_eq!(ifield(&line, "hints_left"), 0, "{line}");
                let (socks, marked) = if verbs {
                    (qp_lines, qp_marked)
                } else {
                    (ifield(&line, "tcp_socks"), ifield(&line, "tos_marked"))
                };
                assert!(
                    socks > 0,
                    "no {} seen: {line}",
                    if verbs { "data QP" } else { "socket" }
                );
                match v {
                    9 => assert_eq!(marked, 0, "{line}"),
                    // The connecting side's streams/QPs only: about half of them.
                    10 => assert!(marked > 0 && marked < socks, "{marked} of {socks}: {line}"),
                    _ => assert!(marked > 0 && marked == socks, "{marked} of {socks}: {line}"),
                }
                let finalizes = ifield(&line, "finalize");
                assert_eq!(finalizes, if v >= 11 { 2 } else { 0 }, "{line}");
                assert_eq!(ifield(&line, "set_net_attr"), i64::from(v >= 11), "{line}");
                assert_eq!(ifield(&line, "make_vdevice"), 0, "{line}");
                // Profiler events (v10+): one per segment, each stopped, bytes = bytes sent.
                let starts = ifield(&line, "prof_starts");
                assert_eq!(ifield(&line, "prof_bad"), 0, "{line}");
                if v >= 10 {
                    assert!(starts > 0, "{line}");
                    assert_eq!(ifield(&line, "prof_stops"), starts, "{line}");
                    assert_eq!(
                        ifield(&line, "prof_bytes"),
                        ifield(&line, "isend_bytes"),
                        "{line}"
                    );
                } else {
                    assert_eq!(starts, 0, "{line}");
                }
                if v >= 11 {
                    // Over RDMA the device contexts (uverbs and async-event descriptors) stay
                    // open for the process once opened, as net_ib's ncclIbDevs do; what each
                    // communicator opens must be gone: the second comes back to the first's count.
                    let base = if verbs { "fds_first" } else { "fds_before" };
                    assert_eq!(ifield(&line, "fds_after"), ifield(&line, base), "{line}");
                    assert_eq!(
                        ifield(&line, "threads_after"),
                        ifield(&line, "threads_before"),
                        "{line}"
                    );
                }
                let (rail, plane) = (ifield(&line, "rail_id"), ifield(&line, "plane_id"));
                match (v, work) {
                    (12, "a2a") => assert_eq!((rail, plane), (3, -1), "{line}"),
                    (12, _) => assert_eq!((rail, plane), (-1, -1), "{line}"),
                    _ => assert_eq!((rail, plane), (-2, -2), "{line}"),
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether this run drives the plugin over RDMA (the Soft-RoCE VM sets NCCL_DQPLB_TRANSPORT).
fn on_verbs() -> bool {
    std::env::var("NCCL_DQPLB_TRANSPORT").as_deref() == Ok("verbs")
}

/// (data QPs the plugin reported, those whose queried GRH traffic class is `tc`), from its
/// `data QP q (QPN n): GRH traffic class t (ibv_query_qp)` lines in a run's log files.
fn qp_traffic_classes(log: &std::path::Path, tc: u32) -> (i64, i64) {
    let (mut all, mut marked) = (0, 0);
    let stem = log.file_name().unwrap().to_string_lossy().to_string();
    for e in std::fs::read_dir(log.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        if !e
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("{stem}."))
        {
            continue;
        }
        for l in std::fs::read_to_string(e.path()).unwrap().lines() {
            let Some(rest) = l.split("GRH traffic class ").nth(1) else {
                continue;
            };
            if !rest.contains("(ibv_query_qp)") {
                continue;
            }
            all += 1;
            let got: u32 = rest.split_whitespace().next().unwrap().parse().unwrap();
            marked += i64::from(got == tc);
        }
    }
    (all, marked)
}

/// ncclCommAbort with sends and receives in flight (closeSend/closeRecv after deregMr, requests
/// never tested again), then a fresh communicator after dlclose/dlopen that must work.
#[test]
fn abort_with_requests_in_flight_then_new_communicator() {
    let e = env(&[
        ("DQPLB_EMU_WORK", "abort"),
        ("DQPLB_EMU_CHANNELS", "2"),
        ("DQPLB_EMU_BYTES", "2097152"),
        ("DQPLB_EMU_COMMS", "2"),
    ]);
    let out = spawn::run("abort", 2, &e, LIMIT).unwrap_or_else(|e| panic!("{e}"));
    for (rank, lines) in out.lines.iter().enumerate() {
        let a = lines
            .iter()
            .find(|l| l.starts_with("ABORTED "))
            .expect("ABORTED line");
        assert!(
            field(a, "pending_recvs").unwrap() > 0,
            "rank {rank}: no receive was in flight at the abort: {a}"
        );
        let ok = lines.iter().find(|l| l.starts_with("OK ")).unwrap();
        assert!(field(ok, "verified").unwrap() > 0, "rank {rank}: {ok}");
        assert_eq!(field(ok, "dlcloses"), Some(2), "rank {rank}: {ok}");
    }
}

/// Small collectives: ring chunks of a few KiB, so that SIMPLE's second slice and whole chunks
/// past the end of the buffer are 0-byte isends (NCCL posts them), on every protocol.
#[test]
fn ring_allreduce_small_sizes_zero_byte_slices() {
    for bytes in [40 * 1024 + 12, 4096] {
        let oks = run_ring_small(bytes);
        assert!(
            oks.iter().all(|l| field(l, "zero_byte").unwrap() > 0),
            "{bytes} bytes: no 0-byte message was sent: {oks:?}"
        );
    }
}

fn run_ring_small(bytes: usize) -> Vec<String> {
    let b = bytes.to_string();
    run(
        &format!("ring-small-{bytes}"),
        4,
        &[
            ("DQPLB_EMU_WORK", "ring"),
            ("DQPLB_EMU_CHANNELS", "4"),
            ("DQPLB_EMU_BYTES", &b),
            ("DQPLB_EMU_PROTO", "ALL"),
            ("DQPLB_EMU_COMMS", "1"),
        ],
    )
}

/// Segments per data QP of every send comm a run's ranks closed, from the plugin's close-time
/// INFO line (`... segments per QP 12/0/3/9, ...`) in the emulator's log files.
fn segments_per_qp(log: &std::path::Path) -> Vec<u64> {
    let dir = log.parent().unwrap();
    let stem = log.file_name().unwrap().to_string_lossy().to_string();
    let mut per = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if !e.file_name().to_string_lossy().starts_with(&stem) {
            continue;
        }
        for l in std::fs::read_to_string(e.path()).unwrap().lines() {
            // The comm's INFO line at close: "... closed: 4 QPs, ..., segments per QP 12/0/3/9, ..."
            if !l.starts_with("3 NET/DQPLB : send comm ") {
                continue;
            }
            let Some(rest) = l.split(" segments per QP ").nth(1) else {
                continue;
            };
            let counts = rest.split(',').next().unwrap_or("");
            for (q, n) in counts.split('/').enumerate() {
                let n: u64 = n.parse().unwrap_or_else(|_| panic!("no segments in {l}"));
                if per.len() <= q {
                    per.resize(q + 1, 0);
                }
                per[q] += n;
            }
        }
    }
    per
}

/// setNetAttr picks the policy per traffic pattern (net.cc 2.28-2.30: populateCommNetAttrs at
/// connect, setXferNetAttrs before each op's first isend/irecv). Over 4-QP connections, with
/// `[patterns]` alltoall = static-split over 2 QPs (env override): ncclAlltoAll under 2.28 (v11)
/// and 2.30 (v12) puts nothing on QPs 2 and 3; the same all-to-all as grouped send/recv with one
/// peer (p2p pattern) and under 2.26 (v10: no setNetAttr) runs DQPLB on all four; a ring
/// all-reduce with collective = single-qp uses QP 0 only.
#[test]
fn set_net_attr_picks_the_policy_per_pattern() {
    let dir = std::env::temp_dir().join(format!("dqplb-emu-patterns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    type Case<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a [(&'static str, &'a str)],
        [bool; 4],
    );
    let cases: [Case; 5] = [
        ("a2a", "2.28", "11", &[], [true, true, false, false]),
        ("a2a", "2.30", "12", &[], [true, true, false, false]),
        (
            "a2a",
            "2.28",
            "11",
            &[("DQPLB_EMU_A2A_API", "sendrecv")],
            [true; 4],
        ),
        ("a2a", "2.26", "10", &[], [true; 4]),
        (
            "ring",
            "2.30",
            "12",
            &[("NCCL_DQPLB_PATTERNS_COLLECTIVE", "single-qp")],
            [true, false, false, false],
        ),
    ];
    for (i, (work, nccl, cap, extra, used)) in cases.iter().enumerate() {
        let log = dir.join(format!("case{i}"));
        let log_s = log.to_string_lossy().to_string();
        let mut pairs: Vec<(&'static str, &str)> = vec![
            ("NCCL_DEBUG", "INFO"),
            ("DQPLB_EMU_LOG_FILE", &log_s),
            ("NCCL_DQPLB_PATTERNS_ALLTOALL_QPS", "2"),
            ("NCCL_DQPLB_CLASS_SAME_RAIL_QPS", "4"),
            ("NCCL_DQPLB_CLASS_CROSS_RAIL_QPS", "4"),
        ];
        pairs.extend_from_slice(extra);
        let lines = versioned(work, nccl, cap, &pairs);
        let calls: i64 = lines.iter().map(|l| ifield(l, "net_attr_calls")).sum();
        if *cap == "10" {
            assert_eq!(calls, 0, "case {i}: {lines:?}");
        } else {
            assert!(calls > 0, "case {i}: {lines:?}");
        }
        let per = segments_per_qp(&log);
        assert_eq!(
            per.len(),
            4,
            "case {i} ({work} {nccl}): segments per QP {per:?}"
        );
        let got: Vec<bool> = per.iter().map(|&n| n > 0).collect();
        assert_eq!(
            &got[..],
            &used[..],
            "case {i} ({work} {nccl} {extra:?}): segments per QP {per:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
