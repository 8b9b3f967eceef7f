//! The `dqplb` command line itself: --version (the plugin's version string), help of every
//! subcommand, bad usage (exit 2, clap's wording, did-you-mean), completions and the man page.

use std::process::{Command, Output};

fn dqplb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dqplb"))
        .args(args)
        .output()
        .expect("run dqplb")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every subcommand a user can call, as the words after `dqplb`.
const SUBCOMMANDS: [&[&str]; 9] = [
    &["plan"],
    &["check"],
    &["perf"],
    &["stats"],
    &["sim"],
    &["sim", "sweep"],
    &["paths-bench"],
    &["completions"],
    &["man"],
];

#[test]
fn version_is_the_plugins_with_a_git_hash() {
    for flag in ["--version", "-V"] {
        let out = dqplb(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let line = text(&out.stdout);
        assert_eq!(
            line,
            format!("dqplb {}\n", nccl_net_dqplb::VERSION),
            "{flag}"
        );
        // "dqplb 0.1.0 (abc1234)": the package version, then the short hash in parentheses.
        let rest = line
            .trim_end()
            .strip_prefix(&format!("dqplb {} (", env!("CARGO_PKG_VERSION")))
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{line:?}"));
        let in_git = Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| text(&o.stdout).trim().to_string());
        match in_git {
            // Built in this checkout: the hash of its HEAD (build.rs reruns when HEAD moves).
            Some(head) => assert_eq!(rest, head, "{line:?}"),
            None => assert!(
                rest == "unknown"
                    || std::env::var("DQPLB_GIT_HASH").is_ok_and(|h| h.trim() == rest),
                "{line:?}"
            ),
        }
        if rest != "unknown" {
            assert!(
                rest.len() >= 7 && rest.chars().all(|c| c.is_ascii_hexdigit()),
                "not a short hash: {line:?}"
            );
        }
    }
}

#[test]
fn help_of_every_subcommand_exits_0() {
    for words in SUBCOMMANDS {
        for flag in ["--help", "-h"] {
            let mut args = words.to_vec();
            args.push(flag);
            let out = dqplb(&args);
            let stdout = text(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?}: {}",
                text(&out.stderr)
            );
            assert!(
                stdout.contains(&format!("Usage: dqplb {}", words.join(" "))),
                "{args:?}: {stdout}"
            );
        }
    }
    // `dqplb help NAME` is the same as `dqplb NAME --help`.
    let out = dqplb(&["help", "plan"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, dqplb(&["plan", "--help"]).stdout);
    // The top-level help lists each subcommand with its one-paragraph description.
    let out = dqplb(&["--help"]);
    let top = text(&out.stdout);
    for line in [
        "  plan         show the site config in effect, the NCCL_IB_HCA devices and the per-class QP plan",
        "  check        compare each RDMA device's DCQCN parameters with the site profile; exit 0 match, 1 mismatch, 2 bad usage, 3 unverified",
        "  perf         point-to-point bandwidth / latency between two local processes",
        "  stats        the per-QP statistics files the plugin writes ([stats] file)",
        "  sim          fabric simulator: the real engine over a rail-optimized leaf-spine with ECMP",
        "  paths-bench  DQPLB vs NCCL-style policies over tc-shaped loopback paths",
    ] {
        assert!(top.contains(line), "{line:?} not in {top}");
    }
    // The hidden child role of perf is not advertised.
    assert!(!text(&dqplb(&["perf", "--help"]).stdout).contains("__role"));
}

#[test]
fn no_command_prints_the_help_and_exits_2() {
    let out = dqplb(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("Usage: dqplb <COMMAND>"));
}

#[test]
fn an_unknown_subcommand_exits_2_with_a_suggestion() {
    for (args, want) in [
        (&["pln"][..], "error: unrecognized subcommand 'pln'\n\n  tip: a similar subcommand exists: 'plan'\n"),
        (&["stat", "f"], "error: unrecognized subcommand 'stat'\n\n  tip: a similar subcommand exists: 'stats'\n"),
        (&["paths-bnech"], "error: unrecognized subcommand 'paths-bnech'\n\n  tip: a similar subcommand exists: 'paths-bench'\n"),
        (&["sim", "swep"], "error: unrecognized subcommand 'swep'\n\n  tip: a similar subcommand exists: 'sweep'\n"),
    ] {
        let out = dqplb(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with(want), "{args:?}: {err}");
        assert!(err.contains("For more information, try '--help'."), "{err}");
    }
}

#[test]
fn an_unknown_flag_exits_2_with_a_suggestion() {
    for (args, flag, near) in [
        (&["plan", "--hcaa", "x"][..], "--hcaa", "--hca"),
        (&["check", "--profle", "p"], "--profle", "--profile"),
        (&["perf", "--iter", "3"], "--iter", "--iters"),
        (&["stats", "--jsn", "f"], "--jsn", "--json"),
        (&["sim", "--spine", "4"], "--spine", "--spines"),
        (
            &["sim", "sweep", "--bound-pc", "5"],
            "--bound-pc",
            "--bound-pct",
        ),
        (
            &["paths-bench", "--scenarios", "1"],
            "--scenarios",
            "--scenario",
        ),
    ] {
        let out = dqplb(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        let want = format!(
            "error: unexpected argument '{flag}' found\n\n  tip: a similar argument exists: '{near}'\n"
        );
        assert!(err.starts_with(&want), "{args:?}: {err}");
    }
    // Far from every name: no suggestion, still exit 2.
    let out = dqplb(&["plan", "--qqqq"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: unexpected argument '--qqqq' found\n"),
        "{err}"
    );
    assert!(!err.contains("tip:"), "{err}");
}

#[test]
fn completions_cover_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = dqplb(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for name in [
            "plan",
            "check",
            "perf",
            "stats",
            "sim",
            "sweep",
            "paths-bench",
        ] {
            assert!(script.contains(name), "{shell}: no {name}");
        }
        assert!(
            script.contains("--hosts-per-leaf"),
            "{shell}: no sim options"
        );
        assert!(
            !script.contains("__role"),
            "{shell}: the hidden role leaked"
        );
    }
    let out = dqplb(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("[possible values: bash, elvish, fish, powershell, zsh]"));
}

#[test]
fn the_man_page_lists_the_subcommands() {
    let out = dqplb(&["man"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie"),
        "not roff: {}",
        &page[..page.len().min(200)]
    );
    assert!(page.contains(".TH dqplb 1"), "{page}");
    for name in ["plan", "check", "perf", "stats", "sim", "paths\\-bench"] {
        assert!(page.contains(name), "no {name} in the man page");
    }
    assert!(
        page.contains(nccl_net_dqplb::VERSION),
        "no version in the man page"
    );
}
