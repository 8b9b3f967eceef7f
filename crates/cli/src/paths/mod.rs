//! `dqplb paths-bench`: runs DQPLB and the NCCL-style policies over tc-shaped loopback paths in a
//! network namespace and reports throughput vs the ideal, per-path bytes and plots.

pub(crate) mod args;
pub(crate) mod hashed;
pub(crate) mod hashed_report;
pub(crate) mod hashed_shape;
pub(crate) mod metrics;
pub(crate) mod report;
pub(crate) mod scenario;
pub(crate) mod shape;
pub(crate) mod trial;

use std::time::Duration;

use args::Options;
use dqplb_engine::PolicyKind;
use metrics::{SeriesPoint, TrialSummary};
use scenario::{Scenario, ScenarioKnobs};
use trial::TrialSpec;

/// Entry point of the subcommand; returns the exit code (0 ok, 1 guard failed, 2 error).
pub(crate) fn run(a: args::PathsArgs) -> i32 {
    let opts = match a.options() {
        Ok(o) => o,
        Err(e) => return crate::usage_error(&["paths-bench"], e),
    };
    match bench(&opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paths-bench: {e}");
            2
        }
    }
}

/// Segment size a policy runs with. NCCL posts each isend of its default (round-robin) and
/// single-QP modes as one work request, so those policies get whole-message segments; with
/// smaller ones the engine, which cuts messages in order, would serialise messages across QPs.
pub(crate) fn policy_segment(policy: PolicyKind, sc: &Scenario) -> u32 {
    match policy {
        PolicyKind::RoundRobinMessage | PolicyKind::SingleQp => {
            let whole = sc.message_bytes.div_ceil(128) * 128;
            u32::try_from(whole).unwrap_or(u32::MAX / 128 * 128)
        }
        PolicyKind::Dqplb | PolicyKind::DqplbLed | PolicyKind::StaticSplit => sc.segment_bytes,
    }
}

fn spec_for(sc: &Scenario, policy: PolicyKind, o: &Options) -> TrialSpec {
    TrialSpec {
        policy,
        qps: sc.qps() as u16,
        outstanding: sc.outstanding,
        segment_bytes: policy_segment(policy, sc),
        message_bytes: sc.message_bytes,
        inflight_messages: sc.inflight_messages,
        duration: o.duration,
        sample_every: o.sample_every,
        idle_sleep: o.idle_sleep,
        port_base: o.port_base,
        port_stride: 1,
        socket_buffer_bytes: o.socket_buffer_bytes,
        rehash: None,
        stall_timeout_ms: 0,
        verify: false,
        pinned_ports: None,
    }
}

/// Runs one (scenario, policy) trial with its shaping plan installed for the trial's lifetime.
fn one_trial(
    sc: &Scenario,
    policy: PolicyKind,
    o: &Options,
) -> Result<(TrialSummary, Vec<SeriesPoint>), String> {
    let spec = spec_for(sc, policy, o);
    let _shaper = if o.shape {
        Some(shape::Shaper::install(o.port_base, &sc.rates_mbit)?)
    } else {
        None
    };
    let at: Vec<u64> = if o.shape {
        sc.changes.iter().map(|c| c.at_ms).collect()
    } else {
        Vec::new()
    };
    let mut action = |i: usize| -> Result<(), String> {
        let c = &sc.changes[i];
        shape::run_tc(&shape::change(c.path, c.mbit))
    };
    let out = trial::run(&spec, &at, &mut action)?;
    let summary = metrics::summarize(sc, policy, &out, o.warmup.as_secs_f64() * 1e3)?;
    Ok((summary, metrics::series(sc, &out.samples)))
}

/// The scenario knobs the options give.
fn knobs(o: &Options) -> ScenarioKnobs {
    ScenarioKnobs {
        unit_mbit: o.unit_mbit,
        duration_ms: o.duration.as_millis() as u64,
        segment_bytes: o.segment_bytes,
        outstanding: o.outstanding,
        message_bytes: o.message_bytes,
        inflight_messages: o.inflight,
        slow_fraction: o.slow_fraction,
    }
}

/// Message size rounded so every segment of every policy has one size (see trial::completed_bytes).
fn aligned_message(o: &Options, qps: usize) -> usize {
    let unit = o.segment_bytes as usize * qps.max(1);
    o.message_bytes.div_ceil(unit) * unit
}

fn bench(o: &Options) -> Result<i32, String> {
    if o.shape {
        shape::check_private_netns()?;
    }
    let mut rows: Vec<TrialSummary> = Vec::new();
    let mut series: Vec<(u32, &'static str, Vec<SeriesPoint>)> = Vec::new();
    let (hashed_ids, per_qp_ids): (Vec<u32>, Vec<u32>) = o
        .scenarios
        .iter()
        .partition(|id| hashed::HASHED_IDS.contains(id));
    for &id in &per_qp_ids {
        let probe = knobs(o);
        let qps = scenario::build(id, &probe)?.qps();
        let knobs = ScenarioKnobs {
            message_bytes: aligned_message(o, qps),
            ..probe
        };
        let sc = scenario::build(id, &knobs)?;
        println!(
            "# scenario {} ({}): {}; rates {:?} Mbit/s; {} QPs x {} outstanding ({}) x {} B segments; {} B messages, {} in flight",
            sc.id, sc.name, sc.what, sc.rates_mbit, sc.qps(), sc.outstanding, sc.depth_note, sc.segment_bytes, sc.message_bytes, sc.inflight_messages
        );
        for &policy in &o.policies {
            let (summary, pts) = one_trial(&sc, policy, o)
                .map_err(|e| format!("scenario {id} {}: {e}", policy.name()))?;
            println!("{}", report::line(&summary));
            if !sc.changes.is_empty() {
                series.push((sc.id, policy.name(), pts));
            }
            rows.push(summary);
            // Let TIME_WAIT and the qdisc settle between trials.
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let hashed_code = if hashed_ids.is_empty() {
        0
    } else {
        hashed_bench(o, &hashed_ids)?
    };
    if per_qp_ids.is_empty() {
        return Ok(hashed_code);
    }
    if let Some(dir) = &o.data_dir {
        report::write(dir, "paths-summary.csv", &report::summary_csv(&rows))?;
        report::write(dir, "paths-per-path.csv", &report::per_path_csv(&rows))?;
        if !series.is_empty() {
            report::write(dir, "paths-timeseries.csv", &report::series_csv(&series))?;
        }
        println!("# wrote CSV to {}", dir.display());
    }
    if let Some(dir) = &o.img_dir {
        crate::charts::paths::all(dir, &rows, &series)?;
        println!("# wrote SVG to {}", dir.display());
    }
    Ok(guard_verdict(o, &rows).max(hashed_code))
}

/// Scenarios 6, 7 and 8 (port-hash paths), with their own CSV and SVG files; 1 when a guard is
/// set and a pinned variant of scenario 8 fell below `hashed::PINNED_GOAL`.
fn hashed_bench(o: &Options, ids: &[u32]) -> Result<i32, String> {
    if !o.shape {
        return Err("scenarios 6, 7 and 8 are about shaped paths: drop --no-shape".into());
    }
    let knobs = knobs(o);
    // Any per-QP scenario carries the shared knobs; 8 streams set the message alignment.
    let sc = Scenario {
        message_bytes: aligned_message(o, 8),
        ..scenario::build(1, &knobs)?
    };
    let run = hashed::HashedRun {
        base: spec_for(&sc, PolicyKind::Dqplb, o),
        health: o.health,
        warmup_ms: o.warmup.as_secs_f64() * 1e3,
    };
    let rows = hashed::bench(ids, &run, o.unit_mbit, o.slow_fraction, o.buckets)?;
    let summaries: Vec<hashed::HashedSummary> = rows.iter().map(|r| r.0.clone()).collect();
    if let Some(dir) = &o.data_dir {
        report::write(
            dir,
            "paths-hashed-summary.csv",
            &hashed_report::summary_csv(&summaries),
        )?;
        report::write(
            dir,
            "paths-hashed-timeseries.csv",
            &hashed_report::series_csv(&rows),
        )?;
        println!("# wrote paths-hashed CSV to {}", dir.display());
    }
    if let Some(dir) = &o.img_dir {
        crate::charts::paths_hashed::plots(dir, &rows)?;
        println!("# wrote paths-hashed SVG to {}", dir.display());
    }
    let mut code = 0;
    for r in summaries.iter().filter(|r| r.scenario == 8) {
        let pinned = r.label.contains("pinned");
        let distinct = {
            let mut b = r.initial_buckets.clone();
            b.sort_unstable();
            b.dedup();
            b.len()
        };
        let verdict = if !pinned {
            "reference"
        } else if r.ratio >= hashed::PINNED_GOAL && r.corrupt_messages == 0 {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "pinned goal: scenario 8 {} ratio {:.3} over {distinct} of {} buckets, {} corrupt of {} received (goal >= {} for pinned ports): {verdict}",
            r.label, r.ratio, r.buckets, r.corrupt_messages, r.received_messages, hashed::PINNED_GOAL
        );
        if verdict == "FAILED" && o.guard.is_some() {
            code = 1;
        }
    }
    Ok(code)
}

/// 1 when a guard is set and some dqplb trial fell below it.
fn guard_verdict(o: &Options, rows: &[TrialSummary]) -> i32 {
    let Some(min) = o.guard else { return 0 };
    let mut code = 0;
    for s in rows.iter().filter(|s| s.policy == PolicyKind::Dqplb) {
        let verdict = if s.ratio >= min { "ok" } else { "FAILED" };
        println!(
            "guard: scenario {} dqplb ratio {:.3} (floor {min}): {verdict}",
            s.scenario, s.ratio
        );
        if s.ratio < min {
            code = 1;
        }
    }
    code
}
