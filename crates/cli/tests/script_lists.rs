//! The test scripts' lists agree: the VM suite expects every dqplb step the guest runs, and the
//! fault suite's tools come from `setup-deps.sh --test` instead of an install of its own.

use std::path::PathBuf;

fn repo_file(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The dqplb steps of the Soft-RoCE VM suite: devices (table, JSON) and the two-process perf.
const VM_DQPLB_STEPS: [&str; 4] = [
    "dqplb_devices",
    "dqplb_devices_json",
    "dqplb_perf_2proc_verbs",
    "dqplb_perf_2proc_verbs_bidir",
];

#[test]
fn the_vm_suite_expects_every_dqplb_step_the_guest_runs() {
    let guest = repo_file("scripts/softroce/guest-suite.sh");
    let host = repo_file("scripts/verbs-tests.sh");
    // Steps with a literal name in the guest (plain_step / plugin_step NAME ...).
    let ran: Vec<&str> = guest
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("plain_step ")
                .or_else(|| l.strip_prefix("plugin_step "))
        })
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|name| !name.starts_with('$'))
        .collect();
    assert_eq!(ran, VM_DQPLB_STEPS, "the guest's named steps");
    let expected: Vec<&str> = host
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("expected+=("))
        .flat_map(|rest| rest.trim_end_matches(')').split_whitespace())
        .collect();
    for step in VM_DQPLB_STEPS {
        assert!(
            expected.contains(&step),
            "verbs-tests.sh does not expect {step}: {expected:?}"
        );
    }
    // The host ships the binary whatever PERFTEST says: the copy is not inside a PERFTEST test.
    let copy = host
        .lines()
        .find(|l| l.contains("\"$share/perf/dqplb\"") && l.contains("must cp"))
        .expect("verbs-tests.sh copies the dqplb binary into the share");
    assert!(copy.starts_with("must cp"), "conditional copy: {copy:?}");
}

#[test]
fn the_fault_suites_tools_come_from_setup_deps() {
    let deps = repo_file("scripts/setup-deps.sh");
    let test_pkgs = deps
        .lines()
        .find(|l| l.trim_start().starts_with("pkgs+=(libibverbs-dev"))
        .expect("setup-deps.sh's --test package line");
    for pkg in ["nftables", "ethtool"] {
        assert!(
            test_pkgs.split(['(', ')', ' ']).any(|w| w == pkg),
            "{pkg} not in {test_pkgs:?}"
        );
    }
    let suite = repo_file("scripts/fault-suite.sh");
    assert!(
        !suite.contains("apt-get"),
        "fault-suite.sh installs packages itself"
    );
    assert!(
        suite.contains("run bash scripts/setup-deps.sh --test"),
        "fault-suite.sh's error for a missing tool names setup-deps.sh"
    );
}
