//! The DCQCN profile axis of `dqplb sim sweep --mode p --dcqcn A,B,...`: the per-profile results
//! at the sweep's chosen (q, depth, segment), the choice among them, and the chosen profile as a
//! `[dcqcn]` block of the site TOML (the syntax `dqplb check` and crates/dcqcn/src/profile.rs read).

// The rule, exactly (docs/records/simulation.md, "Sweep", "DCQCN profile axis"):
// * Every (q, d, s) point of the grid runs once per profile. The q / depth / segment analysis of
//   crates/sim/src/sweep.rs runs on the envelope: per (q, d, s) the clean profile run with the lowest
//   time over ideal (the first listed on equal times); a point where no profile ran clean
//   contributes the first profile's run (with its faults, so the analysis excludes it).
// * At the chosen (q*, d*, s*): t_min = the lowest time over ideal of the clean profile runs.
//   A clean profile is tied when its time <= (1 + tie%/100) x t_min (default 0.5%). The chosen
//   profile is the tied one with the fewest ECN marks, then the lowest peak switch queue, then
//   the first listed.

use serde::Serialize;

use dqplb_dcqcn::impact::params_from_lookup;
use dqplb_dcqcn::profile::Profile;
use dqplb_dcqcn::{GConvention, RpParams};

use super::error::SimError;
use super::sweep::SweepPoint;

/// One run of the profile grid: the point and what P mode counted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ProfilePoint {
    /// Index into the sweep's profile list.
    pub profile: usize,
    pub point: SweepPoint,
    pub ecn_marks: u64,
    pub cnps: u64,
    pub rate_cuts: u64,
    /// Deepest switch egress backlog, bytes.
    pub max_queue_bytes: u64,
}

/// Per (q, d, s) the run the q / depth / segment analysis sees (see the rule above).
pub fn envelope(points: &[ProfilePoint]) -> Vec<SweepPoint> {
    let mut out: Vec<(SweepPoint, usize)> = Vec::new();
    for p in points {
        let key = (p.point.qps, p.point.outstanding, p.point.segment_bytes);
        let slot = out
            .iter_mut()
            .find(|(e, _)| (e.qps, e.outstanding, e.segment_bytes) == key);
        match slot {
            None => out.push((p.point, p.profile)),
            Some((e, idx)) => {
                let better = match (p.point.clean(), e.clean()) {
                    (true, false) => true,
                    (true, true) => {
                        p.point.time_over_ideal < e.time_over_ideal
                            || (p.point.time_over_ideal == e.time_over_ideal && p.profile < *idx)
                    }
                    (false, false) => p.profile < *idx,
                    (false, true) => false,
                };
                if better {
                    *e = p.point;
                    *idx = p.profile;
                }
            }
        }
    }
    out.into_iter().map(|(p, _)| p).collect()
}

/// One profile at the chosen point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileResult {
    pub name: String,
    pub time_over_ideal: f64,
    pub pct_of_ideal: f64,
    pub max_queue_bytes: u64,
    pub cnps: u64,
    pub ecn_marks: u64,
    pub rate_cuts: u64,
    pub faults: u64,
    /// Clean and within tie% of the best clean profile's time.
    pub tied: bool,
}

/// The profile choice at the chosen (q, d, s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileChoice {
    pub tie_pct: f64,
    pub qps: usize,
    pub outstanding: u32,
    pub segment_bytes: u32,
    /// In the order the profiles were listed.
    pub per_profile: Vec<ProfileResult>,
    /// Index into `per_profile`.
    pub chosen: usize,
    pub chosen_name: String,
}

/// Applies the rule above at (q, d, s); `names` are the profiles in listed order.
pub fn choose_profile(
    points: &[ProfilePoint],
    names: &[String],
    (qps, outstanding, segment_bytes): (usize, u32, u32),
    tie_pct: f64,
) -> Result<ProfileChoice, SimError> {
    let mut per_profile = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let p = points
            .iter()
            .find(|p| {
                p.profile == i
                    && (p.point.qps, p.point.outstanding, p.point.segment_bytes)
                        == (qps, outstanding, segment_bytes)
            })
            .ok_or_else(|| SimError::ProfileMissing {
                profile: name.clone(),
            })?;
        per_profile.push(ProfileResult {
            name: name.clone(),
            time_over_ideal: p.point.time_over_ideal,
            pct_of_ideal: p.point.pct_of_ideal,
            max_queue_bytes: p.max_queue_bytes,
            cnps: p.cnps,
            ecn_marks: p.ecn_marks,
            rate_cuts: p.rate_cuts,
            faults: p.point.faults,
            tied: false,
        });
    }
    let t_min = per_profile
        .iter()
        .filter(|r| r.faults == 0)
        .map(|r| r.time_over_ideal)
        .fold(f64::INFINITY, f64::min);
    if !t_min.is_finite() {
        return Err(SimError::NoCleanProfile);
    }
    for r in &mut per_profile {
        r.tied = r.faults == 0 && r.time_over_ideal <= (1.0 + tie_pct / 100.0) * t_min;
    }
    let chosen = per_profile
        .iter()
        .enumerate()
        .filter(|(_, r)| r.tied)
        .min_by_key(|(i, r)| (r.ecn_marks, r.max_queue_bytes, *i))
        .map(|(i, _)| i)
        .ok_or(SimError::NoTiedProfile)?;
    Ok(ProfileChoice {
        tie_pct,
        qps,
        outstanding,
        segment_bytes,
        chosen_name: per_profile[chosen].name.clone(),
        per_profile,
        chosen,
    })
}

/// The reaction-point parameters as cc_params (name, raw value), in kernel order: the inverse of
/// `dcqcn::impact::params_from_lookup`.
pub fn cc_values(p: &RpParams) -> [(&'static str, u64); 16] {
    [
        ("rp_clamp_tgt_rate", u64::from(p.clamp_tgt_rate)),
        ("rp_clamp_tgt_rate_ati", u64::from(p.clamp_tgt_rate_ati)),
        ("rp_time_reset", p.time_reset_us),
        ("rp_byte_reset", p.byte_reset_64b),
        ("rp_threshold", u64::from(p.threshold)),
        ("rp_ai_rate", p.ai_rate_mbps),
        ("rp_max_rate", p.max_rate_mbps),
        ("rp_hai_rate", p.hai_rate_mbps),
        ("rp_min_dec_fac", p.min_dec_fac_pct),
        ("rp_min_rate", p.min_rate_mbps),
        (
            "rp_rate_to_set_on_first_cnp",
            p.rate_to_set_on_first_cnp_mbps,
        ),
        ("rp_dce_tcp_g", u64::from(p.dce_tcp_g)),
        ("rp_dce_tcp_rtt", p.dce_tcp_rtt_us),
        (
            "rp_rate_reduce_monitor_period",
            p.rate_reduce_monitor_period_us,
        ),
        ("rp_initial_alpha_value", u64::from(p.initial_alpha)),
        ("rp_gd", u64::from(p.gd)),
    ]
}

/// The reaction-point parameters and CNP interval (us) a resolved `dqplb check` profile stands
/// for: an exact expectation gives its value; a range gives the value in it nearest the mlx5
/// firmware default (the default itself when the range holds it); a name the profile does not
/// check keeps the firmware default (the CNP interval: `default_cnp_us`). dce_tcp_g is read as
/// g = (1024 - raw) / 1024, `dqplb check`'s default convention.
pub fn params_of_profile(p: &Profile, default_cnp_us: u64) -> (RpParams, u64) {
    let fw = RpParams::firmware_defaults();
    let defaults = cc_values(&fw);
    let (rp, _) = params_from_lookup(
        |name| {
            let rule = p.rule(name)?;
            let d = defaults.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
            Some(rule.expected.nearest(d))
        },
        GConvention::OneMinus,
    );
    let cnp = p
        .rule("np_min_time_between_cnps")
        .map_or(default_cnp_us, |r| r.expected.nearest(Some(default_cnp_us)));
    (rp, cnp)
}

/// A profile name as a bare TOML key (letters, digits, '-' and '_'; anything else becomes '-').
pub(crate) fn toml_key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The chosen profile as a `[dcqcn]` block: `profile = "sim-NAME"` and a site profile with every
/// parameter the simulator models as an exact expectation (raw cc_params units), so `dqplb check`
/// compares a NIC against what was simulated. `note` is a comment line (the result it came from).
pub fn profile_block(name: &str, rp: &RpParams, cnp_us: u64, note: &str) -> String {
    let key = format!("sim-{}", toml_key(name));
    let mut s = String::new();
    s.push_str(&format!("# {note}\n"));
    s.push_str(
        "# Raw cc_params values (dce_tcp_g read as g = (1024 - raw) / 1024); merge into an\n\
         # existing [dcqcn] table. CNP DSCP and priority are not simulated, so not checked here.\n",
    );
    s.push_str(&format!(
        "# Simulated with the {} alpha update (the NIC's schedule is not a cc_params value).\n",
        rp.alpha_schedule.name()
    ));
    s.push_str(&format!("[dcqcn]\nprofile = \"{key}\"\n\n"));
    s.push_str(&format!("[dcqcn.profiles.{key}]\n"));
    s.push_str(&format!(
        "description = \"DCQCN profile {} as dqplb sim sweep simulated it\"\n\n",
        toml_key(name)
    ));
    s.push_str(&format!("[dcqcn.profiles.{key}.expect]\n"));
    let rows = cc_values(rp)
        .into_iter()
        .chain(std::iter::once(("np_min_time_between_cnps", cnp_us)));
    for (param, v) in rows {
        s.push_str(&format!(
            "{param} = {{ value = {v}, reason = \"the value dqplb sim sweep simulated\" }}\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::dcqcn_profile;
    use dqplb_config::dcqcn::DcqcnSection;
    use dqplb_dcqcn::profile::resolve;
    use dqplb_dcqcn::AlphaSchedule;

    fn pp(profile: usize, q: usize, t: f64, faults: u64, marks: u64, queue: u64) -> ProfilePoint {
        ProfilePoint {
            profile,
            point: SweepPoint {
                qps: q,
                outstanding: 1,
                segment_bytes: 4096,
                time_over_ideal: t,
                pct_of_ideal: 100.0 / t,
                bound_upper: 1.0,
                bound_lower: 1.0,
                p50_us: 1.0,
                p99_us: 2.0,
                faults,
                events: 1,
            },
            ecn_marks: marks,
            cnps: marks / 2,
            rate_cuts: marks / 4,
            max_queue_bytes: queue,
        }
    }

    #[test]
    fn envelope_and_choice_follow_the_rule() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let v = vec![
            // q = 1: b fastest; c faster still but faulty.
            pp(0, 1, 1.10, 0, 10, 100),
            pp(1, 1, 1.05, 0, 20, 100),
            pp(2, 1, 1.00, 1, 0, 0),
            // q = 2: a and c within 0.5% of b's 1.000; c has the fewest marks; a ties on
            // marks with b but b has the lower queue.
            pp(0, 2, 1.004, 0, 30, 500),
            pp(1, 2, 1.000, 0, 30, 400),
            pp(2, 2, 1.0049, 0, 5, 900),
        ];
        let env = envelope(&v);
        assert_eq!(env.len(), 2);
        assert_eq!(env[0].time_over_ideal, 1.05);
        assert_eq!(env[1].time_over_ideal, 1.0);
        let c = choose_profile(&v, &names, (2, 1, 4096), 0.5).unwrap();
        assert_eq!(c.chosen_name, "c");
        assert!(c.per_profile.iter().all(|r| r.tied));
        // A tighter tie: only b (exact best) and a (0.4%) remain; equal marks, b's queue lower.
        let c = choose_profile(&v, &names, (2, 1, 4096), 0.45).unwrap();
        assert_eq!((c.chosen, c.per_profile[2].tied), (1, false));
        // A faulty profile is never tied.
        let c = choose_profile(&v, &names, (1, 1, 4096), 100.0).unwrap();
        assert_eq!(c.chosen_name, "a");
        assert!(!c.per_profile[2].tied);
        // All faulty: the first profile stands in the envelope and nothing can be chosen.
        let bad = vec![pp(0, 1, 2.0, 1, 0, 0), pp(1, 1, 1.0, 1, 0, 0)];
        assert_eq!(envelope(&bad)[0].time_over_ideal, 2.0);
        assert!(choose_profile(&bad, &names[..2], (1, 1, 4096), 0.5).is_err());
    }

    #[test]
    fn block_round_trips_through_the_check_parser() {
        for name in ["firmware", "paper"] {
            let rp = dcqcn_profile(name).unwrap();
            let block = profile_block(name, &rp, 50, "test");
            let table: toml::Table = toml::from_str(&block).unwrap();
            let section: DcqcnSection = table["dcqcn"].clone().try_into().unwrap();
            assert_eq!(section.profile, format!("sim-{name}"));
            let p = resolve(&section, &section.profile).unwrap();
            assert_eq!(p.rules.len(), 17);
            // The alpha schedule is no cc_params value: read back, a profile runs the firmware's.
            let want = RpParams {
                alpha_schedule: AlphaSchedule::PerPeriod,
                ..rp
            };
            assert_eq!(params_of_profile(&p, 4), (want, 50));
        }
        // A range takes the value nearest the firmware default; unchecked names keep it.
        let s: DcqcnSection = toml::from_str(
            "[profiles.x.expect]\nrp_time_reset = { min = 50, max = 100 }\n\
             rp_ai_rate = { min = 1, max = 10 }\nnp_min_time_between_cnps = { min = 10 }\n",
        )
        .unwrap();
        let (rp, cnp) = params_of_profile(&resolve(&s, "x").unwrap(), 4);
        let fw = RpParams::firmware_defaults();
        assert_eq!((rp.time_reset_us, rp.ai_rate_mbps, cnp), (100, 5, 10));
        assert_eq!(rp.hai_rate_mbps, fw.hai_rate_mbps);
        assert_eq!(toml_key("my site.v2"), "my-site-v2");
    }
}
