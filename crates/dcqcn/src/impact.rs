//! What a set of DCQCN parameters means for one backlogged QP at a given line rate: the rate after
//! 1 and 5 CNPs and the time to climb back to 95 % of line rate, computed with the model.

use super::model::{GConvention, ReactionPoint, RpParams};

/// Simulated time after which recovery is reported as "not within the horizon".
pub(crate) const HORIZON_NS: u64 = 10_000_000_000;
const MAX_STEPS: u64 = 20_000_000;

/// The model's verdict for one parameter set.
#[derive(Debug, Clone, PartialEq)]
pub struct Impact {
    pub line_rate_mbps: f64,
    pub after_1_cnp_mbps: f64,
    pub after_5_cnps_mbps: f64,
    /// Time from the single CNP to 95 % of line rate; `None` beyond [`HORIZON_NS`] or never.
    pub recover_after_1_ns: Option<u64>,
    /// Time from the last of the 5 CNPs to 95 % of line rate.
    pub recover_after_5_ns: Option<u64>,
}

/// Builds parameters from observed cc_params values; names missing from `lookup` keep their
/// firmware default and are returned in the second element, in the order looked up. The alpha
/// schedule is the firmware's (`AlphaSchedule::PerPeriod`, NVIDIA's documented update).
pub fn params_from_lookup(
    lookup: impl Fn(&str) -> Option<u64>,
    convention: GConvention,
) -> (RpParams, Vec<&'static str>) {
    let mut p = RpParams::firmware_defaults();
    p.g_convention = convention;
    let mut defaulted = Vec::new();
    let mut get = |name: &'static str, default: u64| -> u64 {
        lookup(name).unwrap_or_else(|| {
            defaulted.push(name);
            default
        })
    };
    let u32_of = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    p.clamp_tgt_rate = get("rp_clamp_tgt_rate", p.clamp_tgt_rate as u64) != 0;
    p.clamp_tgt_rate_ati = get("rp_clamp_tgt_rate_ati", p.clamp_tgt_rate_ati as u64) != 0;
    p.time_reset_us = get("rp_time_reset", p.time_reset_us);
    p.byte_reset_64b = get("rp_byte_reset", p.byte_reset_64b);
    p.threshold = u32_of(get("rp_threshold", u64::from(p.threshold)));
    p.ai_rate_mbps = get("rp_ai_rate", p.ai_rate_mbps);
    p.max_rate_mbps = get("rp_max_rate", p.max_rate_mbps);
    p.hai_rate_mbps = get("rp_hai_rate", p.hai_rate_mbps);
    p.min_dec_fac_pct = get("rp_min_dec_fac", p.min_dec_fac_pct);
    p.min_rate_mbps = get("rp_min_rate", p.min_rate_mbps);
    p.rate_to_set_on_first_cnp_mbps = get(
        "rp_rate_to_set_on_first_cnp",
        p.rate_to_set_on_first_cnp_mbps,
    );
    p.dce_tcp_g = u32_of(get("rp_dce_tcp_g", u64::from(p.dce_tcp_g)));
    p.dce_tcp_rtt_us = get("rp_dce_tcp_rtt", p.dce_tcp_rtt_us);
    p.rate_reduce_monitor_period_us = get(
        "rp_rate_reduce_monitor_period",
        p.rate_reduce_monitor_period_us,
    );
    p.initial_alpha = u32_of(get("rp_initial_alpha_value", u64::from(p.initial_alpha)));
    p.gd = u32_of(get("rp_gd", u64::from(p.gd)));
    (p, defaulted)
}

/// Drives a backlogged QP (always sending at its current rate) until `done` holds or `until_ns`
/// passes; returns the model time at which `done` first held.
pub fn run_backlogged(
    rp: &mut ReactionPoint,
    until_ns: u64,
    done: impl Fn(&ReactionPoint) -> bool,
) -> Option<u64> {
    for _ in 0..MAX_STEPS {
        if done(rp) {
            return Some(rp.now_ns());
        }
        let now = rp.now_ns();
        if now >= until_ns {
            return None;
        }
        let bytes_per_ns = rp.rate_mbps() / 8000.0;
        let timer_at = rp.next_timer_ns().unwrap_or(until_ns).min(until_ns);
        let byte_at = match rp.bytes_to_next_byte_event() {
            Some(need) if bytes_per_ns > 0.0 => {
                let dt = (need as f64 / bytes_per_ns).ceil();
                if dt >= (until_ns - now) as f64 {
                    None
                } else {
                    Some((now + (dt as u64).max(1), need))
                }
            }
            _ => None,
        };
        match byte_at {
            Some((at, need)) if at <= timer_at => {
                rp.on_bytes_sent(at, need);
            }
            _ => {
                let at = timer_at.max(now + 1);
                let sent = (bytes_per_ns * (at - now) as f64) as u64;
                rp.on_bytes_sent(at, sent);
            }
        }
    }
    None
}

/// The rate after 1 and after 5 CNPs (spaced by the monitor period, so each one cuts) and the
/// time to recover to 95 % of line rate afterwards.
pub fn impact(params: &RpParams, line_rate_mbps: f64) -> Impact {
    let goal = 0.95 * line_rate_mbps;
    let reached = move |rp: &ReactionPoint| rp.rate_mbps() >= goal;
    let spacing = params.rate_reduce_monitor_period_us.max(1) * 1_000;

    let mut one = ReactionPoint::new(params.clone(), line_rate_mbps);
    one.on_cnp(0);
    let after_1 = one.rate_mbps();
    let recover_1 = run_backlogged(&mut one, HORIZON_NS, reached);

    let mut five = ReactionPoint::new(params.clone(), line_rate_mbps);
    five.on_cnp(0);
    for k in 1..5u64 {
        let at = k * spacing;
        run_backlogged(&mut five, at, |_| false);
        five.on_cnp(at);
    }
    let last = 4 * spacing;
    let after_5 = five.rate_mbps();
    let recover_5 = run_backlogged(&mut five, last + HORIZON_NS, reached).map(|t| t - last);

    Impact {
        line_rate_mbps,
        after_1_cnp_mbps: after_1,
        after_5_cnps_mbps: after_5,
        recover_after_1_ns: recover_1,
        recover_after_5_ns: recover_5,
    }
}
