//! `dqplb sim sweep`: runs the simulator over a qps x outstanding x segment grid, applies the
//! criteria of crates/sim/src/sweep.rs and prints the findings and a ready `[class.same-rail]` table
//! (`[class.cross-dc]` / `[class.cross-rail]` with `--class`, sim_sweep_class.rs).

use std::time::Instant;

use dqplb_sim::svg_sweep::sweep_grid;
use dqplb_sim::sweep::{analyse, class_snippet, Criteria, Findings, SweepPoint};
use dqplb_sim::{run, SimConfig, SimPolicy, SimResult};

use dqplb_sim::sweep_profile::{cc_values, choose_profile, envelope, profile_block, ProfilePoint};
use dqplb_sim::Mode;

use super::sim::{num, parse_args, parse_bytes};
use super::sim_sweep_class::{self as class, Class};
use super::sim_sweep_dcqcn::{self as dcq, SimProfile};

/// Usage text of `dqplb sim sweep`.
pub(crate) const USAGE: &str = "\
usage: dqplb sim sweep [grid] [criteria] [dqplb sim options]

Runs one simulation per point of the grid (one policy, default dqplb; --mode b by default) and
prints: the smallest q within --bound-pct of the fluid bound (the best split over the hashed QP
paths, lowest over the grid), the smallest outstanding depth that loses no throughput at that q,
the largest segment without head-of-line cost, and a [class.same-rail] table for the site TOML.

grid (comma lists):
  --qps LIST            data QPs per connection (1,2,4,8,16)
  --outstanding LIST    segments in flight per QP (1,2,4,8)
  --segment LIST        segment bytes, K/M suffixes (128K,512K,1M)
criteria (percent):
  --bound-pct P         q: best time over ideal <= (1 + P/100) x the fluid bound (5)
  --loss-pct P          depth: time <= (1 + P/100) x the best depth's at the same q, segment (1)
  --hol-pct P           segment: message p99 <= (1 + P/100) x the smallest segment's (10)
class:
  --class C             same-rail (default), or cross-dc: prints [class.cross-dc], runs
                        --traffic cross-dc on --preset fattree-k4 --dci-latency-us 100 --bytes 1G
                        --step-bytes 16M --mode b unless given, grid --qps 1,2,4,8 --outstanding
                        1,2,4,...,128 --segment 512K,1M,4M, and prints the BDP rule next to it;
                        or cross-rail: prints [class.cross-rail], runs --traffic cross-rail on
                        --hosts 64 --rails 4 --hosts-per-leaf 16 --spines 16 --bytes 64M --mode b
                        unless given (the same-rail grid)
DCQCN profile axis (--mode p only):
  --dcqcn LIST          firmware, paper, FILE.toml[:PROFILE] (a site config's [dcqcn] profile
                        or a [profiles.*] file, as dqplb check reads them); every grid point runs
                        once per profile, and q, depth and segment are chosen on the fastest clean
                        profile per point; then the profile at the chosen point: the fastest,
                        any within --profile-tie-pct counting as tied, then fewest ECN marks, then
                        lowest peak queue; printed as a [dcqcn] block for the site TOML
  --profile-tie-pct P   profiles within P% of the fastest's time are tied (0.5)
  --alpha-update S      per-cnp or per-period for every profile (default: each profile's own:
                        paper per-cnp, firmware and site files per-period)
  --format F            table (default), json, or csv (the points; findings on stderr)
  --svg DIR             also write DIR/sweep.svg: per segment a q x outstanding grid of % of
                        ideal, the cells within --bound-pct and the chosen point marked
every other dqplb sim option sets the runs (dqplb sim --help); without --config the defaults are
a small fabric: --hosts 64 --rails 2 --hosts-per-leaf 8 --spines 8 --traffic ring
--placement fragmented --bytes 128M --mode b (seconds for the default grid in release).
Without --dcqcn, --mode p runs every point under the configured profile (dqplb sim --dcqcn).

exit status: 0 success, 1 a run found engine/protocol errors, 2 bad input";

/// The small fabric the sweep runs on unless the command line or --config says otherwise.
const DEFAULTS: [&str; 18] = [
    "--hosts",
    "64",
    "--rails",
    "2",
    "--hosts-per-leaf",
    "8",
    "--spines",
    "8",
    "--traffic",
    "ring",
    "--placement",
    "fragmented",
    "--bytes",
    "128M",
    "--mode",
    "b",
    "--policy",
    "dqplb",
];

struct Sweep {
    base: SimConfig,
    format: String,
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

fn list<T>(opt: &str, v: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let out: Vec<T> = v
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(f)
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err(format!("{opt} needs at least one value"));
    }
    Ok(out)
}

/// A segment the site config also takes (segment-bytes: a multiple of 128 in 4 KiB ..= 64 MiB),
/// so the printed snippet is always valid.
fn segment(v: &str) -> Result<u32, String> {
    let b = parse_bytes(v)?;
    if !(4096..=64 << 20).contains(&b) || !b.is_multiple_of(128) {
        return Err(format!(
            "--segment {v}: a multiple of 128 in 4K ..= 64M (the site config's range)"
        ));
    }
    Ok(b as u32)
}

fn parse(args: &[String]) -> Result<Option<Sweep>, String> {
    let mut grid = Sweep {
        base: parse_args(&[])?.cfg,
        format: "table".into(),
        qps: vec![1, 2, 4, 8, 16],
        outstanding: vec![1, 2, 4, 8],
        segments: vec![128 << 10, 512 << 10, 1 << 20],
        criteria: Criteria::default(),
        profiles: Vec::new(),
        tie_pct: 0.5,
        class: Class::SameRail,
        svg: None,
    };
    // Which grid axes the command line set (the cross-dc class has its own defaults).
    let mut set = [false; 3];
    let mut dcqcn: Option<String> = None;
    let mut rest: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let ours = matches!(
            name.as_str(),
            "--qps"
                | "--outstanding"
                | "--segment"
                | "--bound-pct"
                | "--loss-pct"
                | "--hol-pct"
                | "--dcqcn"
                | "--profile-tie-pct"
                | "--class"
                | "--svg"
        );
        if !ours {
            rest.push(arg.clone());
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("option {name} needs a value"))?,
        };
        match name.as_str() {
            "--qps" => (grid.qps, set[0]) = (list(&name, &v, |x| num(&name, x))?, true),
            "--outstanding" => {
                (grid.outstanding, set[1]) = (list(&name, &v, |x| num(&name, x))?, true)
            }
            "--segment" => (grid.segments, set[2]) = (list(&name, &v, segment)?, true),
            "--class" => grid.class = Class::parse(&v)?,
            "--bound-pct" => grid.criteria.bound_pct = num(&name, &v)?,
            "--loss-pct" => grid.criteria.loss_pct = num(&name, &v)?,
            "--dcqcn" => dcqcn = Some(v),
            "--profile-tie-pct" => grid.tie_pct = num(&name, &v)?,
            "--svg" => grid.svg = Some(v),
            _ => grid.criteria.hol_pct = num(&name, &v)?,
        }
    }
    let has_config = rest
        .iter()
        .any(|a| a == "--config" || a.starts_with("--config="));
    let mut full: Vec<String> = if has_config {
        Vec::new()
    } else if grid.class == Class::CrossDc {
        class::CROSS_DC_DEFAULTS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else if grid.class == Class::CrossRail {
        class::CROSS_RAIL_DEFAULTS
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        DEFAULTS.iter().map(|s| s.to_string()).collect()
    };
    if grid.class == Class::CrossDc {
        let (q, d, s) = class::cross_dc_grid();
        if !set[0] {
            grid.qps = q;
        }
        if !set[1] {
            grid.outstanding = d;
        }
        if !set[2] {
            grid.segments = s;
        }
    }
    full.extend(rest);
    let a = parse_args(&full)?;
    if a.timeseries.is_some() {
        return Err("--timeseries: the sweep writes no time series (use dqplb sim)".into());
    }
    if a.policies.len() != 1 {
        return Err("the sweep runs one policy (--policy P)".into());
    }
    if a.policies[0] == SimPolicy::LpSplit {
        return Err(
            "--policy lp-split is an oracle the plugin cannot run, and the sweep prints \
                    a class to deploy: run it with dqplb sim --policy lp-split"
                .into(),
        );
    }
    grid.base = a.cfg;
    grid.base.shape.policy = a.policies[0];
    class::check(grid.class, &grid.base, &grid.outstanding)?;
    grid.format = a.format;
    if let Some(list) = &dcqcn {
        if grid.base.mode != Mode::Packet {
            return Err(dcq::REFUSED_OUTSIDE_P.into());
        }
        let cnp_us = (grid.base.packet.cnp_interval_ps as f64 / 1e6).round() as u64;
        grid.profiles = dcq::load(list, cnp_us.max(1))?;
        // --alpha-update (or the config's alpha-update) overrides every profile's schedule.
        if let Some(s) = a.alpha_update {
            for p in &mut grid.profiles {
                p.rp.alpha_schedule = s;
            }
        }
    }
    for v in [
        grid.criteria.bound_pct,
        grid.criteria.loss_pct,
        grid.criteria.hol_pct,
        grid.tie_pct,
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("a criterion of {v}% (must be >= 0)"));
        }
    }
    grid.qps.sort_unstable();
    grid.qps.dedup();
    grid.outstanding.sort_unstable();
    grid.outstanding.dedup();
    grid.segments.sort_unstable();
    grid.segments.dedup();
    Ok(Some(grid))
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
pub(crate) fn run_cli(args: &[String]) -> i32 {
    let g = match parse(args) {
        Ok(Some(g)) => g,
        Ok(None) => {
            println!("{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("dqplb sim sweep: {e}\n\n{USAGE}");
            return 2;
        }
    };
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
        let body = sweep_grid(&analysed, &f, &describe(&g.base));
        if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, body)) {
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
    match g.format.as_str() {
        "json" => {
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
        "csv" => {
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
        _ => {
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
