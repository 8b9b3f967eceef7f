//! `dqplb sim sweep --mode p --dcqcn firmware,paper,FILE.toml[:NAME]`: loading the profiles of the
//! DCQCN axis and printing its findings (the rule is in crates/sim/src/sweep_profile.rs).

use dqplb_config::dcqcn::{DcqcnSection, ProfileFile};
use dqplb_config::parse_str;
use dqplb_dcqcn::profile::resolve;
use dqplb_dcqcn::RpParams;
use dqplb_sim::packet::dcqcn_profile;
use dqplb_sim::sweep_profile::{params_of_profile, ProfileChoice};

/// What B and F mode answer to `--dcqcn` (they model no ECN, CNP or DCQCN).
pub(crate) const REFUSED_OUTSIDE_P: &str =
    "--dcqcn is a P-mode axis: B and F mode model no ECN, CNPs or DCQCN (add --mode p)";

/// One profile of the axis.
#[derive(Debug, Clone)]
pub(crate) struct SimProfile {
    /// As listed (`firmware`, `paper`) or the file's profile name.
    pub name: String,
    /// `built-in` or the file it came from.
    pub source: String,
    pub rp: RpParams,
    /// The CNP interval its runs use, us (a file profile's np_min_time_between_cnps, else the
    /// command's --cnp-interval-us).
    pub cnp_us: u64,
}

/// Loads every entry of a `--dcqcn` list. A file is a site config (its `[dcqcn]` table: the
/// selected `profile`, or NAME) or a profiles file laid out as plugin-conf/dcqcn-profiles.toml
/// (`[profiles.NAME]`: NAME, or its only profile); either way resolved by `dqplb check`'s resolver
/// (built-in check profiles and `extends` included) and mapped by `params_of_profile`.
pub(crate) fn load(list: &str, cnp_us: u64) -> Result<Vec<SimProfile>, String> {
    let mut out: Vec<SimProfile> = Vec::new();
    for spec in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let p = load_one(spec, cnp_us)?;
        if out.iter().any(|o| o.name == p.name) {
            return Err(format!("--dcqcn lists profile {} twice", p.name));
        }
        out.push(p);
    }
    if out.is_empty() {
        return Err("--dcqcn needs at least one profile".into());
    }
    Ok(out)
}

fn load_one(spec: &str, cnp_us: u64) -> Result<SimProfile, String> {
    if !spec.contains(".toml") {
        let rp = dcqcn_profile(spec).map_err(|e| {
            format!("--dcqcn {spec}: {e}, or a site TOML file (FILE.toml or FILE.toml:PROFILE)")
        })?;
        return Ok(SimProfile {
            name: spec.to_string(),
            source: "built-in".into(),
            rp,
            cnp_us,
        });
    }
    let (path, name) = match spec.rsplit_once(':') {
        Some((p, n)) if p.ends_with(".toml") => (p, Some(n.to_string())),
        _ => (spec, None),
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("--dcqcn {path}: {e}"))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("--dcqcn {path}: {e}"))?;
    let (section, name) = if table.contains_key("profiles") {
        let file: ProfileFile =
            toml::from_str(&text).map_err(|e| format!("--dcqcn {path}: {e}"))?;
        let name = match (name, file.profiles.len()) {
            (Some(n), _) => n,
            (None, 1) => file.profiles.keys().next().cloned().unwrap_or_default(),
            (None, _) => {
                return Err(format!(
                    "--dcqcn {path}: name one of its profiles ({}) as {path}:NAME",
                    file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            }
        };
        let section = DcqcnSection {
            profiles: file.profiles,
            ..DcqcnSection::default()
        };
        (section, name)
    } else {
        let site = parse_str(&text, path).map_err(|e| format!("--dcqcn {path}: {e}"))?;
        let name = name.unwrap_or_else(|| site.dcqcn.profile.clone());
        (site.dcqcn, name)
    };
    let profile = resolve(&section, &name).map_err(|e| format!("--dcqcn {spec}: {e}"))?;
    let (rp, cnp) = params_of_profile(&profile, cnp_us);
    if cnp == 0 {
        return Err(format!(
            "--dcqcn {spec}: np_min_time_between_cnps 0 is not simulated (at least 1 us)"
        ));
    }
    Ok(SimProfile {
        name,
        source: path.to_string(),
        rp,
        cnp_us: cnp,
    })
}

/// The per-profile findings in words.
pub(crate) fn choice_text(c: &ProfileChoice, profiles: &[SimProfile], seg: &str) -> String {
    let mut s = format!(
        "DCQCN profiles at q={} outstanding {} segment {seg} (chosen: the fastest within {}%, then fewest ECN marks, then lowest peak queue):\n",
        c.qps, c.outstanding, c.tie_pct
    );
    s.push_str(&format!(
        "  {:<20} {:>8} {:>10} {:>8} {:>8} {:>8} {:>6}  source\n",
        "profile", "%ideal", "peak_q_kB", "marks", "cnps", "cuts", "faults"
    ));
    for (i, (r, p)) in c.per_profile.iter().zip(profiles).enumerate() {
        s.push_str(&format!(
            "  {:<20} {:>8.2} {:>10.1} {:>8} {:>8} {:>8} {:>6}  {}{}{}\n",
            r.name,
            r.pct_of_ideal,
            r.max_queue_bytes as f64 / 1000.0,
            r.ecn_marks,
            r.cnps,
            r.rate_cuts,
            r.faults,
            p.source,
            if r.tied { ", tied" } else { "" },
            if i == c.chosen { ", CHOSEN" } else { "" }
        ));
    }
    s.push_str(&format!("chosen DCQCN profile: {}\n", c.chosen_name));
    s
}
