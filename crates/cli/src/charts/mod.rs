//! Every SVG chart the command writes, on plotters' SVG backend: `dqplb sim --svg` (ideal,
//! collisions, heatmap, time series), `dqplb sim sweep --svg` (sweep) and `dqplb paths-bench`.

// One file per chart; `style` holds what they share (font, colours, header lines, legend box,
// rendering into a String). Charts read the simulator's results (dqplb_sim::SimResult and its
// time series, the sweep's points and findings) and never compute what the JSON reports.
// Where a test reads a chart back it relies on plotters' markup and on the drawing order the
// chart's own docs state (e.g. "the cells, after the 11 swatches of the legend").

pub(crate) mod collisions;
pub(crate) mod heatmap;
pub(crate) mod ideal;
pub(crate) mod paths;
pub(crate) mod paths_hashed;
pub(crate) mod style;
pub(crate) mod sweep;
pub(crate) mod timeseries;

use dqplb_sim::SimResult;

use style::human_bytes;

/// The line under a simulation chart's title: mode, traffic, fabric and seed of the run.
pub(crate) fn sim_subtitle(r: &SimResult) -> String {
    format!(
        "{} mode, {} of {} {}, {} hosts x {} rails ({} simulated), {} leaves x {} spines, oversub {}, seed {}",
        r.mode,
        r.traffic,
        human_bytes(r.bytes),
        r.placement,
        r.hosts,
        r.rails,
        r.rails_simulated,
        r.leaves,
        r.spines,
        r.oversub,
        r.seed
    )
}
