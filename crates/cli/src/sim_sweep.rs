//! `dqplb sim sweep`: runs the simulator over a qps x outstanding x segment grid, applies the
//! criteria of crates/sim/src/sweep.rs and prints the findings and a ready `[class.same-rail]` table
//! (`[class.cross-dc]` / `[class.cross-rail]` with `--class`, sim_sweep_class.rs).

use std::time::Instant;

use dqplb_sim::sweep::{analyse, class_snippet, Criteria, Findings, SweepPoint};
use dqplb_sim::{run, SimConfig, SimPolicy, SimResult};

use dqplb_sim::sweep_profile::{cc_values, choose_profile, envelope, profile_block, ProfilePoint};
use dqplb_sim::Mode;

use super::sim::{build, SetupError};
use super::sim_args::{SimFormat, SweepArgs};
use super::sim_sweep_class::{self as class, Class};
use super::sim_sweep_dcqcn::{self as dcq, SimProfile};

/// The small fabric the sweep runs on unless the command line or --config says otherwise.
const DEFAULTS: [(&str, &str); 9] = [
    ("hosts", "64"),
    ("rails", "2"),
    ("hosts-per-leaf", "8"),
    ("spines", "8"),
    ("traffic", "ring"),
    ("placement", "fragmented"),
    ("bytes", "128M"),
    ("mode", "b"),
    ("policy", "dqplb"),
];

struct Sweep {
    base: SimConfig,
    format: SimFormat,
    qps: Vec<usize>,
    outstanding: Vec<u32>,
    segments: Vec<u32>,
    criteria: Criteria,
    /// The DCQCN axis (empty: none).
    profiles: Vec<SimProfile>,
    tie_pct: f64,
    class: Class,
    /// `--svg DIR`: where sweep.svg goes.
    svg: Option<String>,
}

/// The sweep the options ask for: the grid (the class's defaults where not given) over the
/// base run the other settings make.
fn sweep(o: SweepArgs) -> Result<Sweep, SetupError> {
    let input = SetupError::Input;
    // An axis the command line leaves out: the cross-dc class's own, else the same-rail one.
    let (dc_qps, dc_depths, dc_segments) = class::cross_dc_grid();
    let dc = o.class == Class::CrossDc;
    let mut qps = o
        .qps
        .unwrap_or(if dc { dc_qps } else { vec![1, 2, 4, 8, 16] });
    let mut outstanding = o
        .outstanding
        .unwrap_or(if dc { dc_depths } else { vec![1, 2, 4, 8] });
    let mut segments = o.segment.unwrap_or(if dc {
        dc_segments
    } else {
        vec![128 << 10, 512 << 10, 1 << 20]
    });
    let defaults: &[(&str, &str)] = if !o.config.is_empty() {
        &[]
    } else {
        match o.class {
            Class::CrossDc => &class::CROSS_DC_DEFAULTS,
            Class::CrossRail => &class::CROSS_RAIL_DEFAULTS,
            Class::SameRail => &DEFAULTS,
        }
    };
    let a = build(&o.config, defaults, &o.settings.pairs())?;
    if a.timeseries.is_some() {
        return Err(input(
            "--timeseries: the sweep writes no time series (use dqplb sim)".into(),
        ));
    }
    if a.policies.len() != 1 {
        return Err(input("the sweep runs one policy (--policy P)".into()));
    }
    if a.policies[0] == SimPolicy::LpSplit {
        return Err(input(
            "--policy lp-split is an oracle the plugin cannot run, and the sweep prints \
                    a class to deploy: run it with dqplb sim --policy lp-split"
                .into(),
        ));
    }
    let mut base = a.cfg;
    base.shape.policy = a.policies[0];
    class::check(o.class, &base, &outstanding).map_err(input)?;
    let mut profiles = Vec::new();
    if let Some(list) = &o.dcqcn {
        if base.mode != Mode::Packet {
            return Err(input(dcq::REFUSED_OUTSIDE_P.into()));
        }
        let cnp_us = (base.packet.cnp_interval_ps as f64 / 1e6).round() as u64;
        profiles = dcq::load(list, cnp_us.max(1)).map_err(input)?;
        // --alpha-update (or the config's alpha-update) overrides every profile's schedule.
        if let Some(s) = a.alpha_update {
            for p in &mut profiles {
                p.rp.alpha_schedule = s;
            }
        }
    }
    qps.sort_unstable();
    qps.dedup();
    outstanding.sort_unstable();
    outstanding.dedup();
    segments.sort_unstable();
    segments.dedup();
    Ok(Sweep {
        base,
        format: a.format,
        qps,
        outstanding,
        segments,
        criteria: Criteria {
            bound_pct: o.bound_pct,
            loss_pct: o.loss_pct,
            hol_pct: o.hol_pct,
        },
        profiles,
        tie_pct: o.profile_tie_pct,
        class: o.class,
        svg: o.svg,
    })
}

fn human(b: u32) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

fn point(r: &SimResult) -> SweepPoint {
    SweepPoint {
        qps: r.qps,
        outstanding: r.outstanding,
        segment_bytes: r.segment_bytes,
        time_over_ideal: r.time_over_ideal,
        pct_of_ideal: r.pct_of_ideal,
        bound_upper: r.bound_upper,
        bound_lower: r.bound_lower,
        p50_us: r.message_latency.p50_us,
        p99_us: r.message_latency.p99_us,
        faults: r.errors.total() + r.missing,
        events: r.events,
    }
}

fn describe(c: &SimConfig) -> String {
    format!(
        "mode {} policy {} traffic {} bytes {} placement {:?}; {} hosts x {} rails, {} leaves x {} hosts, {} spines, oversub {}, {} Gb/s, hop {} ns; seed {}{}",
        c.mode.name(),
        c.shape.policy.name(),
        c.traffic.kind.name(),
        c.traffic.bytes,
        c.traffic.placement,
        c.fabric.hosts,
        c.fabric.rails,
        c.fabric.leaves(),
        c.fabric.hosts_per_leaf,
        c.fabric.spines,
        c.fabric.oversub,
        c.fabric.host_gbps,
        c.fabric.hop_latency_ps / 1000,
        c.seed,
        if c.fabric.dci_latency_ps > 0 {
            format!(
                "; {} pods as DCs, DCI {} us per aggregation -> core hop",
                c.fabric.pods,
                c.fabric.dci_latency() as f64 / 1e6
            )
        } else {
            String::new()
        }
    )
}

/// The findings in words, one line each.
fn findings_text(f: &Findings) -> String {
    let c = &f.criteria;
    let mut s = format!(
        "fluid bound (best split over the hashed QP paths, lowest of the grid): {:.4} x ideal = {:.2}% of ideal\n",
        f.bound_over_ideal, f.bound_pct_of_ideal
    );
    for p in &f.per_q {
        s.push_str(&format!(
            "  q={:<3} best {:.2}% of ideal (outstanding {}, segment {}), its own bound {:.2}%{}\n",
            p.qps,
            100.0 / p.best_time_over_ideal,
            p.best_outstanding,
            human(p.best_segment_bytes),
            100.0 / p.bound_upper,
            if p.within_bound {
                format!(", within {}%", c.bound_pct)
            } else {
                String::new()
            }
        ));
    }
    if f.q_met {
        s.push_str(&format!(
            "smallest q within {}% of the fluid bound: {}\n",
            c.bound_pct, f.qps
        ));
    } else {
        s.push_str(&format!(
            "smallest q within {}% of the fluid bound: none in the grid; the fastest q, {}, stands in\n",
            c.bound_pct, f.qps
        ));
    }
    s.push_str(&format!(
        "smallest outstanding with no loss at q={} (time within {}% of the best depth's), per segment:",
        f.qps, c.loss_pct
    ));
    for p in &f.per_segment {
        match p.outstanding {
            Some(d) => s.push_str(&format!(" {}: {d}", human(p.segment_bytes))),
            None => s.push_str(&format!(" {}: none ran clean", human(p.segment_bytes))),
        }
    }
    s.push('\n');
    let p0 = f
        .per_segment
        .iter()
        .find(|p| p.outstanding.is_some())
        .map_or(0.0, |p| p.p99_us);
    s.push_str(&format!(
        "largest segment without head-of-line cost (message p99 within {}% of {:.1} us): {} (p99 {:.1} us, outstanding {}, {:.2}% of ideal)\n",
        c.hol_pct,
        p0,
        human(f.segment_bytes),
        f.per_segment
            .iter()
            .find(|p| p.segment_bytes == f.segment_bytes)
            .map_or(0.0, |p| p.p99_us),
        f.outstanding,
        100.0 / f.time_over_ideal.max(1e-12)
    ));
    s
}

/// Runs `dqplb sim sweep`; returns the exit code.
pub(crate) fn run_cli(o: SweepArgs) -> i32 {
    let g = match sweep(o) {
        Ok(g) => g,
        Err(e) => return e.report(&["sim", "sweep"]),
    };
    if let Some(dir) = &g.svg {
        if let Err(e) = super::sim_svg::check_writable(std::path::Path::new(dir)) {
            eprintln!("dqplb sim sweep: --svg {dir}: {e}");
            return 2;
        }
    }
    let t0 = Instant::now();
    let mut points = Vec::new();
    let mut walls = Vec::new();
    // The profile axis, innermost; one pass under the base config without it.
    let axis: Vec<Option<&SimProfile>> = if g.profiles.is_empty() {
        vec![None]
    } else {
        g.profiles.iter().map(Some).collect()
    };
    let mut ppoints: Vec<ProfilePoint> = Vec::new();
    for &q in &g.qps {
        for &d in &g.outstanding {
            for &s in &g.segments {
                for (pi, prof) in axis.iter().enumerate() {
                    let mut cfg = g.base.clone();
                    cfg.shape.qps = q;
                    cfg.shape.outstanding = d;
                    cfg.shape.segment_bytes = s;
                    if let Some(p) = prof {
                        cfg.packet.rp = p.rp.clone();
                        if p.source != "built-in" {
                            cfg.packet.cnp_interval_ps = p.cnp_us * 1_000_000;
                        }
                    }
                    let t = Instant::now();
                    match run(&cfg) {
                        Ok(r) => {
                            let pk = r.packet.clone().unwrap_or_default();
                            ppoints.push(ProfilePoint {
                                profile: pi,
                                point: point(&r),
                                ecn_marks: pk.ecn_marks,
                                cnps: pk.cnps,
                                rate_cuts: pk.rate_cuts,
                                max_queue_bytes: pk.max_queue_bytes,
                            });
                            points.push(point(&r));
                        }
                        Err(e) => {
                            eprintln!("dqplb sim sweep: q={q} outstanding={d} segment={s}: {e}");
                            return 2;
                        }
                    }
                    walls.push(t.elapsed().as_secs_f64());
                }
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let analysed = if g.profiles.is_empty() {
        points.clone()
    } else {
        envelope(&ppoints)
    };
    let f = match analyse(&analysed, &g.criteria) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("dqplb sim sweep: {e}");
            return 1;
        }
    };
    if let Some(dir) = &g.svg {
        let path = std::path::Path::new(dir).join("sweep.svg");
        let written =
            super::charts::sweep::sweep_grid(&analysed, &f, &describe(&g.base)).and_then(|body| {
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&path, body))
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            eprintln!("dqplb sim sweep: --svg {dir}: {}: {e}", path.display());
            return 2;
        }
        eprintln!("dqplb sim sweep: wrote {}", path.display());
    }
    let (rtt_us, rtt_note) = class::rtt(g.class, &g.base);
    let snippet = class_snippet(
        &f,
        g.class.name(),
        g.base.fabric.host_gbps,
        rtt_us,
        rtt_note,
        g.base.shape.policy.name(),
    );
    let bdp = (g.class == Class::CrossDc).then(|| class::bdp_check(&g.base, &f));
    let bdp_text = bdp.as_ref().map_or(String::new(), class::bdp_text);
    let names: Vec<String> = g.profiles.iter().map(|p| p.name.clone()).collect();
    let dcqcn = if g.profiles.is_empty() {
        None
    } else {
        match choose_profile(
            &ppoints,
            &names,
            (f.qps, f.outstanding, f.segment_bytes),
            g.tie_pct,
        ) {
            Ok(c) => {
                let p = &g.profiles[c.chosen];
                let r = &c.per_profile[c.chosen];
                let note = format!(
                    "From dqplb sim sweep: DCQCN profile {} ({}), {:.2}% of ideal, {} ECN marks, peak queue {} B at qps {} outstanding {} segment {}.",
                    p.name,
                    p.source,
                    r.pct_of_ideal,
                    r.ecn_marks,
                    r.max_queue_bytes,
                    c.qps,
                    c.outstanding,
                    human(c.segment_bytes)
                );
                let block = profile_block(&p.name, &p.rp, p.cnp_us, &note);
                let text = dcq::choice_text(&c, &g.profiles, &human(c.segment_bytes));
                Some((c, block, text))
            }
            Err(e) => {
                eprintln!("dqplb sim sweep: {e}");
                return 1;
            }
        }
    };
    let footer = format!(
        "{} runs in {wall:.2} s wall ({})",
        points.len(),
        describe(&g.base)
    );
    match g.format {
        SimFormat::Json => {
            let mut v = serde_json::json!({
                "config": describe(&g.base),
                "points": points,
                "findings": f,
                "snippet": snippet,
            });
            if let Some(b) = &bdp {
                v["bdp"] = serde_json::json!(b);
            }
            if let Some((c, block, _)) = &dcqcn {
                v["profiles"] = g
                    .profiles
                    .iter()
                    .map(|p| {
                        let cc: serde_json::Map<String, serde_json::Value> = cc_values(&p.rp)
                            .into_iter()
                            .map(|(k, x)| (k.to_string(), x.into()))
                            .collect();
                        serde_json::json!({"name": p.name, "source": p.source,
                            "np_min_time_between_cnps": p.cnp_us, "cc_params": cc,
                            "alpha_update": p.rp.alpha_schedule.name()})
                    })
                    .collect();
                v["profile_points"] = serde_json::json!(ppoints);
                v["dcqcn"] = serde_json::json!(c);
                v["dcqcn_block"] = serde_json::json!(block);
            }
            match serde_json::to_string_pretty(&v) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("dqplb sim sweep: {e}");
                    return 2;
                }
            }
            eprintln!("dqplb sim sweep: {footer}");
        }
        SimFormat::Csv => {
            let axis = !g.profiles.is_empty();
            println!(
                "qps,outstanding,segment_bytes,time_over_ideal,pct_of_ideal,bound_upper,bound_lower,msg_p50_us,msg_p99_us,faults,events{}",
                if axis { ",dcqcn,ecn_marks,cnps,rate_cuts,max_queue_bytes" } else { "" }
            );
            for (p, pp) in points.iter().zip(&ppoints) {
                let prof = match g.profiles.get(pp.profile) {
                    Some(x) if axis => format!(
                        ",{},{},{},{},{}",
                        x.name, pp.ecn_marks, pp.cnps, pp.rate_cuts, pp.max_queue_bytes
                    ),
                    _ => String::new(),
                };
                println!(
                    "{},{},{},{:.6},{:.3},{:.6},{:.6},{:.3},{:.3},{},{}{prof}",
                    p.qps,
                    p.outstanding,
                    p.segment_bytes,
                    p.time_over_ideal,
                    p.pct_of_ideal,
                    p.bound_upper,
                    p.bound_lower,
                    p.p50_us,
                    p.p99_us,
                    p.faults,
                    p.events
                );
            }
            eprint!("{}{bdp_text}\n{snippet}", findings_text(&f));
            if let Some((_, block, text)) = &dcqcn {
                eprint!("\n{text}\n{block}");
            }
            eprintln!("dqplb sim sweep: {footer}");
        }
        SimFormat::Table => {
            println!("# dqplb sim sweep: {}", describe(&g.base));
            println!(
                "{:>4} {:>6} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>7}{}",
                "qps",
                "outst",
                "segment",
                "%ideal",
                "bound%",
                "p50_us",
                "p99_us",
                "faults",
                "wall_s",
                if g.profiles.is_empty() {
                    String::new()
                } else {
                    format!(" {:<12} {:>7} {:>9}", "dcqcn", "marks", "peak_q_kB")
                }
            );
            for ((p, w), pp) in points.iter().zip(&walls).zip(&ppoints) {
                let prof = match g.profiles.get(pp.profile) {
                    Some(x) => format!(
                        " {:<12} {:>7} {:>9.1}",
                        x.name,
                        pp.ecn_marks,
                        pp.max_queue_bytes as f64 / 1000.0
                    ),
                    None => String::new(),
                };
                println!(
                    "{:>4} {:>6} {:>8} {:>8.2} {:>8.2} {:>9.1} {:>9.1} {:>6} {:>7.2}{prof}",
                    p.qps,
                    p.outstanding,
                    human(p.segment_bytes),
                    p.pct_of_ideal,
                    100.0 / p.bound_upper.max(1e-12),
                    p.p50_us,
                    p.p99_us,
                    p.faults,
                    w
                );
            }
            println!();
            print!("{}{bdp_text}", findings_text(&f));
            println!("\nready for the site TOML (plugin-conf/):\n\n{snippet}");
            if let Some((_, block, text)) = &dcqcn {
                println!("{text}\nready for the site TOML ([dcqcn], as dqplb check reads it):\n\n{block}");
            }
            println!("# {footer}");
        }
    }
    i32::from(points.iter().any(|p| !p.clean()))
}
