//! `dqplb sim --svg DIR`: writes the charts of crates/cli/src/charts for the runs of one
//! invocation, the time series of every sampled run, and the per-uplink utilisation as CSV.

use std::path::{Path, PathBuf};

use dqplb_sim::SimResult;

use super::charts::timeseries::timeseries;
use super::charts::{collisions::collisions, heatmap::heatmap, ideal::ideal_bars};

/// Fails unless files can be created in `dir` (made if absent): checked before a run so that a
/// bad --svg costs no simulation time.
pub(crate) fn check_writable(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let probe = dir.join(format!(".dqplb-sim-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("cannot write into it: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes DIR/ideal.svg, per run DIR/collisions-P-qQ.svg and DIR/heatmap-P-qQ.svg (and
/// DIR/timeseries-P-qQ.svg when it was sampled), and DIR/uplinks.csv; returns the files written.
pub(crate) fn write_all(dir: &Path, runs: &[&SimResult]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    let mut put = |name: String, body: String| -> Result<(), String> {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))?;
        files.push(p);
        Ok(())
    };
    put("ideal.svg".into(), ideal_bars(runs)?)?;
    let mut csv = String::from(SimResult::UPLINK_CSV_HEADER);
    csv.push('\n');
    for r in runs {
        let tag = format!("{}-q{}", r.policy, r.qps);
        put(format!("collisions-{tag}.svg"), collisions(r)?)?;
        put(format!("heatmap-{tag}.svg"), heatmap(r)?)?;
        if let Some(ts) = timeseries(r) {
            put(format!("timeseries-{tag}.svg"), ts?)?;
        }
        csv.push_str(&r.uplink_csv());
    }
    put("uplinks.csv".into(), csv)?;
    Ok(files)
}
