//! The whole PXN-less all-to-all (`--traffic cross-rail-all-to-all`, crates/sim/src/cross_rail.rs) in
//! NCCL's p2p schedule, end to end: exact times and counts, every message once, seeds, refusals.

mod sim_support;

use serde_json::Value;
use sim_support::{assert_refused, dqplb, f, run_clean, text, u};

/// One hop (the default 1 us) in ps.
const HOP: f64 = 1e6;
/// 512 KiB at 400 Gb/s: 20 ps per byte.
const SER: f64 = (512u64 << 10) as f64 * 20.0;

/// `dqplb sim --traffic cross-rail-all-to-all ARGS`, every message once and no error.
fn run(args: &[&str]) -> Vec<Value> {
    run_clean("cross-rail-all-to-all", args)
}

/// 8 hosts x 4 rails, 4 per leaf, 4 spines.
const FABRIC: [&str; 8] = [
    "--hosts",
    "8",
    "--rails",
    "4",
    "--hosts-per-leaf",
    "4",
    "--spines",
    "4",
];

#[test]
fn two_hosts_of_two_rails_send_two_segments_per_nic_in_one_batch() {
    // 2 hosts x 2 rails: group size 2 (gcd(8, 2)), groups 2; group delta 0 stays inside the
    // hosts (NVLink), group delta 1's two rounds send rail r of host 0 to rails r and r + 1 of
    // host 1 (and back): 2 connections out of and into every NIC, 8 in all, one batch. 2 MiB
    // over 4 ranks: 512 KiB, one message (--step-bytes 512K) and one segment each. A NIC's two
    // segments serialize (2 x 512 KiB at 20 ps/B), the last one's 4 hops out and its
    // acknowledgement's 4 back: in B, F and P mode.
    let tiny = |mode: &str, step: &[&str]| {
        let mut args = vec![
            "--hosts",
            "2",
            "--rails",
            "2",
            "--hosts-per-leaf",
            "1",
            "--spines",
            "1",
            "--bytes",
            "2M",
            "--segment",
            "512K",
            "--policy",
            "single-qp",
            "--outstanding",
            "1",
            "--epoch-us",
            "0",
            "--mode",
            mode,
        ];
        args.extend(step);
        run(&args).remove(0)
    };
    for mode in ["b", "f", "p"] {
        let r = &tiny(mode, &["--step-bytes", "512K"]);
        assert!(
            (f(&r["time_us"]) * 1e6 - (8.0 * HOP + 2.0 * SER)).abs() < 0.5,
            "{mode}: {r}"
        );
        assert!((f(&r["ideal_us"]) * 1e6 - 2.0 * SER).abs() < 0.5, "{mode}");
        assert_eq!(u(&r["messages"]), 8, "{mode}");
        assert_eq!(u(&r["rails_simulated"]), 2);
    }
    // Without --step-bytes the messages are NCCL's p2p chunk, 128 KiB: 4 per connection.
    let r = tiny("b", &[]);
    assert_eq!(u(&r["messages"]), 32);
    assert_eq!(u(&r["step_bytes"]), 128 << 10);
}

#[test]
fn every_gpu_reaches_every_gpu_of_every_other_host_once() {
    // 8 hosts x 4 rails: 32 ranks, each sends 4 MiB / 32 = 128 KiB (one NCCL step) to each of
    // the 28 ranks on other hosts: 896 connections of one message. The ideal: a NIC's 28 x
    // 128 KiB at 20 ps/B = 73.40032 us, whatever the placement or batches.
    for (placement, batches) in [
        ("contiguous", "1"),
        ("fragmented", "1"),
        ("fragmented", "3"),
    ] {
        for mode in ["b", "f"] {
            let rest = [
                "--bytes",
                "4M",
                "--mode",
                mode,
                "--placement",
                placement,
                "--p2p-batches",
                batches,
                "--policy",
                "single-qp,static-split,dqplb",
            ];
            let rs = run(&[&FABRIC[..], &rest].concat());
            assert_eq!(rs.len(), 3);
            for r in &rs {
                let what = format!("{mode} {placement} {batches}: {}", r["policy"]);
                assert_eq!(r["p2p_batches"].to_string(), batches, "{what}");
                assert_eq!(u(&r["messages"]), 896, "{what}");
                assert!((f(&r["ideal_us"]) - 73.40032).abs() < 1e-6, "{what}");
                let pct = f(&r["pct_of_ideal"]);
                assert!(pct > 5.0 && pct <= 100.0 + 1e-9, "{what}: {pct}");
            }
        }
    }
}

#[test]
fn same_seed_same_bytes_another_seed_another_placement() {
    let go = |seed: &str| {
        let head = ["sim", "--traffic", "cross-rail-all-to-all"];
        let rest = [
            "--bytes",
            "8M",
            "--mode",
            "b",
            "--placement",
            "fragmented",
            "--policy",
            "dqplb",
            "--seed",
            seed,
            "--format",
            "csv",
        ];
        let out = dqplb(&[&head[..], &FABRIC, &rest].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        out.stdout
    };
    assert_eq!(go("5"), go("5"));
    assert_ne!(go("5"), go("6"));
}

#[test]
fn fabrics_it_cannot_run_exit_2_naming_why() {
    let cases: [(&[&str], &str); 6] = [
        (&["--rails", "1"], "cross-rail-all-to-all needs two rails"),
        // One host has no peer on the network: FabricSpec::validate refuses it first.
        (
            &["--hosts", "1", "--hosts-per-leaf", "1"],
            "hosts 1 must be 2",
        ),
        (&["--hosts", "40"], "multiple of hosts per leaf"),
        (&["--pods", "2"], "no --pods"),
        (
            &["--rails-simulated", "1"],
            "cross-rail-all-to-all couples the rails",
        ),
        (
            &["--p2p-batches", "0"],
            "error: invalid value '0' for '--p2p-batches <K>': must be 1 or more",
        ),
    ];
    for (extra, want) in cases {
        assert_refused(
            &["sim", "--traffic", "cross-rail-all-to-all", "--bytes", "1M"],
            extra,
            want,
        );
    }
    assert_refused(
        &["sim", "--traffic", "cross-rail", "--p2p-batches", "2"],
        &[],
        "--p2p-batches 2 applies to --traffic cross-rail-all-to-all only, not cross-rail",
    );
    assert_refused(
        &["sim", "sweep"],
        &["--traffic", "cross-rail-all-to-all"],
        "mixes same-rail and cross-rail connections",
    );
}
