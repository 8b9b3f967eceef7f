//! The parent side: runs P emulated ranks as child processes of this test binary (env role),
//! with a deadline; a failing or late child gets all of them killed and their output reported.

use dqplb_test_support::spawn::{protocol_line, role_command};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// The transport under test: NCCL_DQPLB_TRANSPORT from the environment (default: the plugin's
/// own default, TCP), passed on to the children like every other variable.
pub(crate) fn transport() -> String {
    std::env::var("NCCL_DQPLB_TRANSPORT").unwrap_or_else(|_| "tcp".into())
}

pub(crate) struct Outcome {
    /// Per rank, its "@@" lines.
    pub lines: Vec<Vec<String>>,
}

fn tail(path: &PathBuf, n: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_string()
}

/// Runs `nranks` children with `envs`; Err carries every child's exit status and output tail.
pub(crate) fn run(
    name: &str,
    nranks: usize,
    envs: &[(&str, String)],
    limit: Duration,
) -> Result<Outcome, String> {
    let dir = std::env::temp_dir().join(format!(
        "dqplb-emu-{}-{}-{name}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let mut kids: Vec<(Child, PathBuf, PathBuf)> = Vec::new();
    for rank in 0..nranks {
        let out = dir.join(format!("rank{rank}.out"));
        let err = dir.join(format!("rank{rank}.err"));
        let mut cmd = role_command("emulator_child_role", "DQPLB_EMU_ROLE", "rank");
        cmd.env("DQPLB_EMU_RANK", rank.to_string())
            .env("DQPLB_EMU_NRANKS", nranks.to_string())
            .env("DQPLB_EMU_DIR", dir.join("rv"))
            .env("NCCL_DQPLB_TRANSPORT", transport())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).map_err(|e| e.to_string())?)
            .stderr(std::fs::File::create(&err).map_err(|e| e.to_string())?);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| format!("spawn rank {rank}: {e}"))?;
        kids.push((child, out, err));
    }
    let start = Instant::now();
    let mut status: Vec<Option<std::process::ExitStatus>> = vec![None; nranks];
    let mut failure: Option<String> = None;
    while status.iter().any(|s| s.is_none()) {
        for (i, (c, _, _)) in kids.iter_mut().enumerate() {
            if status[i].is_none() {
                if let Ok(Some(s)) = c.try_wait() {
                    if !s.success() && failure.is_none() {
                        failure = Some(format!("rank {i} exited with {s}"));
                    }
                    status[i] = Some(s);
                }
            }
        }
        if failure.is_none() && start.elapsed() > limit {
            failure = Some(format!("deadline of {limit:?} passed"));
        }
        if failure.is_some() {
            for (c, _, _) in kids.iter_mut() {
                let _ = c.kill();
            }
            for (i, (c, _, _)) in kids.iter_mut().enumerate() {
                if status[i].is_none() {
                    status[i] = c.wait().ok();
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut lines = Vec::new();
    let mut report = String::new();
    for (i, (_, out, err)) in kids.iter().enumerate() {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        let mine: Vec<String> = text
            .lines()
            .filter_map(|l| protocol_line(l).map(str::to_string))
            .collect();
        report += &format!(
            "\n--- rank {i}: {:?}\n  lines: {mine:?}\n  stderr tail:\n{}",
            status[i],
            tail(err, 3000)
        );
        lines.push(mine);
    }
    if let Some(f) = failure {
        return Err(format!(
            "{name}: {f} (after {:.1}s){report}",
            start.elapsed().as_secs_f64()
        ));
    }
    for (i, l) in lines.iter().enumerate() {
        if !l.iter().any(|x| x.starts_with("OK ")) {
            return Err(format!("{name}: rank {i} printed no OK line{report}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Outcome { lines })
}

/// The value of `key=` in a child's OK line.
pub(crate) fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}
