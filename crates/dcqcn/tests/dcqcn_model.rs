//! Reaction-point model traces computed by hand from the DCQCN equations (see the comments for
//! each number), plus the impact summary's monotonic sanity on firmware defaults.

use dqplb_dcqcn::impact::{impact, params_from_lookup, run_backlogged};
use dqplb_dcqcn::model::{AlphaSchedule, CnpOutcome, GConvention, ReactionPoint, RpParams, Stage};

const US: u64 = 1_000;

fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} != {b}");
}

#[test]
fn single_cnp_with_firmware_defaults() {
    let mut rp = ReactionPoint::new(RpParams::firmware_defaults(), 100_000.0);
    assert_eq!(rp.on_cnp(0), CnpOutcome::Cut);
    // alpha = 1023, gd = 11: rate = 100000 * (1 - 1023/2048) = 100000 * 1025/2048.
    close(rp.rate_mbps(), 50_048.828_125);
    close(rp.target_mbps(), 100_000.0);
    // g = (1024 - 1019)/1024 = 5/1024: alpha = floor((1019*1023 + 1024*5)/1024) = floor(1047557/1024) = 1023.
    assert_eq!(rp.alpha(), 1023);
    assert!(rp.is_recovering());
    assert_eq!(rp.stages(), (0, 0));
}

#[test]
fn direct_g_convention_changes_alpha_only() {
    // The paper's schedule (crates/sim/tests/dcqcn_alpha_schedule.rs has the per-period one).
    let mut p = RpParams::firmware_defaults();
    p.alpha_schedule = AlphaSchedule::PerCnp;
    p.g_convention = GConvention::Direct;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    close(rp.rate_mbps(), 50_048.828_125);
    // g = 1019/1024: alpha = floor((5*1023 + 1024*1019)/1024) = floor(1048571/1024) = 1023.
    assert_eq!(rp.alpha(), 1023);
    // Alpha timer at 1 us: floor(5*1023/1024) = 4 (under one-minus it would be 1018).
    rp.advance_to(US);
    assert_eq!(rp.alpha(), 4);
}

#[test]
fn cnp_burst_cuts_once_per_monitor_period() {
    let mut p = RpParams::firmware_defaults();
    p.dce_tcp_rtt_us = 0; // no alpha decay between CNPs: alpha stays 1023 (see above)
    let mut rp = ReactionPoint::new(p, 100_000.0);
    let factor = 1025.0 / 2048.0;
    rp.on_cnp(0);
    // 2 us later: inside the 4 us monitor period, ignored.
    assert_eq!(rp.on_cnp(2 * US), CnpOutcome::Ignored);
    close(rp.rate_mbps(), 100_000.0 * factor);
    for k in 1..5u64 {
        assert_eq!(rp.on_cnp(4 * US * k), CnpOutcome::Cut);
    }
    // Five cuts of 1025/2048 each: 100000 * (1025/2048)^5 = 3140.2886... Mb/s.
    close(rp.rate_mbps(), 100_000.0 * factor.powi(5));
    close(rp.rate_mbps(), 3_140.288_620_502_931_7);
    // Default clamp_tgt_rate = 0 and no increase in between: the target stays at the first cut.
    close(rp.target_mbps(), 100_000.0);
    assert_eq!(rp.cnp_counts(), (5, 1));
}

#[test]
fn cnp_burst_with_alpha_decay_between_cuts() {
    // The paper's schedule (crates/sim/tests/dcqcn_alpha_schedule.rs has the per-period one).
    let mut p = RpParams::firmware_defaults();
    p.alpha_schedule = AlphaSchedule::PerCnp;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    // Alpha timer every 1 us, g = 5/1024: 1023 -> 1018 -> 1013 -> 1008 -> 1003 at 1,2,3,4 us.
    // floor(1023*1019/1024)=1018, floor(1018*1019/1024)=1013, 1013->1008, 1008->1003.
    rp.on_cnp(4 * US);
    // The second cut uses alpha 1003: factor 1 - 1003/2048 = 1045/2048.
    close(
        rp.rate_mbps(),
        100_000.0 * 1025.0 / 2048.0 * 1045.0 / 2048.0,
    );
    // Then alpha = floor((1019*1003 + 5120)/1024) = floor(1027177/1024) = 1003.
    assert_eq!(rp.alpha(), 1003);
}

#[test]
fn min_rate_and_min_dec_fac_bound_the_cut() {
    let mut p = RpParams::firmware_defaults();
    p.dce_tcp_rtt_us = 0;
    p.min_rate_mbps = 30_000;
    let mut rp = ReactionPoint::new(p.clone(), 100_000.0);
    rp.on_cnp(0);
    rp.on_cnp(4 * US);
    // 50048.83 * 1025/2048 = 25048.85 < 30000: held at the floor.
    close(rp.rate_mbps(), 30_000.0);

    p.min_rate_mbps = 1;
    p.min_dec_fac_pct = 80;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    // The cut to 50.05% is bounded by 80% of the old rate.
    close(rp.rate_mbps(), 80_000.0);
}

#[test]
fn rate_to_set_on_first_cnp_jumps() {
    let mut p = RpParams::firmware_defaults();
    p.rate_to_set_on_first_cnp_mbps = 10_000;
    p.dce_tcp_rtt_us = 0;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    close(rp.rate_mbps(), 10_000.0);
    rp.on_cnp(4 * US);
    // Later CNPs cut normally: 10000 * 1025/2048.
    close(rp.rate_mbps(), 10_000.0 * 1025.0 / 2048.0);
}

/// Exact binary fractions: line 8000 Mb/s, alpha 512 and gd 10 (each cut halves), g = 0
/// (dce_tcp_g 1024 one-minus: alpha never changes), F = 4, AI 100, HAI 500, timer 10 us,
/// byte counter 1000 x 64 B = 64000 B, clamp_tgt_rate = 1.
fn three_stage_params() -> RpParams {
    RpParams {
        clamp_tgt_rate: true,
        clamp_tgt_rate_ati: true,
        time_reset_us: 10,
        byte_reset_64b: 1000,
        threshold: 4,
        ai_rate_mbps: 100,
        max_rate_mbps: 0,
        hai_rate_mbps: 500,
        min_dec_fac_pct: 50,
        min_rate_mbps: 1,
        rate_to_set_on_first_cnp_mbps: 0,
        dce_tcp_g: 1024,
        dce_tcp_rtt_us: 1,
        rate_reduce_monitor_period_us: 4,
        initial_alpha: 512,
        gd: 10,
        g_convention: GConvention::OneMinus,
        alpha_schedule: AlphaSchedule::PerCnp,
    }
}

#[test]
fn recovery_goes_through_fast_recovery_additive_and_hyper() {
    let mut rp = ReactionPoint::new(three_stage_params(), 8000.0);
    rp.on_cnp(0); // target 8000, current 4000
    rp.on_cnp(4 * US); // clamp: target 4000, current 2000; timer restarts: 14, 24, 34 ... us
    close(rp.target_mbps(), 4000.0);
    close(rp.rate_mbps(), 2000.0);
    assert_eq!(rp.next_timer_ns(), Some(14 * US));

    let mut expect = |at_us: u64, t: u32, b: u32, stage: Stage, target: f64, current: f64| {
        rp.advance_to(at_us * US);
        assert_eq!(rp.stages(), (t, b), "at {at_us} us");
        assert_eq!(rp.last_stage(), Some(stage), "at {at_us} us");
        close(rp.target_mbps(), target);
        close(rp.rate_mbps(), current);
    };
    // Fast recovery, T = 1..3 < F: current = (4000 + current) / 2.
    expect(14, 1, 0, Stage::FastRecovery, 4000.0, 3000.0);
    expect(24, 2, 0, Stage::FastRecovery, 4000.0, 3500.0);
    expect(34, 3, 0, Stage::FastRecovery, 4000.0, 3750.0);
    // T = 4 reaches F: additive, target 4100, current (4100 + 3750)/2.
    expect(44, 4, 0, Stage::Additive, 4100.0, 3925.0);

    // 4 x 64000 B sent by 50 us: B = 1, 2, 3 additive, B = 4 hyper (i = min(4,4) - 4 + 1 = 1).
    assert_eq!(rp.on_bytes_sent(50 * US, 4 * 64_000), 4);
    assert_eq!(rp.stages(), (4, 4));
    assert_eq!(rp.last_stage(), Some(Stage::Hyper(1)));
    // B=1: 4200, (4200+3925)/2 = 4062.5; B=2: 4300, 4181.25; B=3: 4400, 4290.625;
    // B=4: 4400 + 500 = 4900, (4900 + 4290.625)/2 = 4595.3125.
    close(rp.target_mbps(), 4900.0);
    close(rp.rate_mbps(), 4595.3125);

    // Timer at 54 us: T = 5, i = min(5,4) - 4 + 1 = 1: target 5400, current 4997.65625.
    rp.advance_to(54 * US);
    assert_eq!(rp.last_stage(), Some(Stage::Hyper(1)));
    close(rp.target_mbps(), 5400.0);
    close(rp.rate_mbps(), 4_997.656_25);

    // Bytes below one period do nothing; completing it: B = 5, i = 2: target 6400,
    // current (6400 + 4997.65625)/2 = 5698.828125.
    assert_eq!(rp.on_bytes_sent(56 * US, 63_999), 0);
    assert_eq!(rp.on_bytes_sent(57 * US, 1), 1);
    assert_eq!(rp.last_stage(), Some(Stage::Hyper(2)));
    close(rp.target_mbps(), 6400.0);
    close(rp.rate_mbps(), 5_698.828_125);
}

#[test]
fn recovery_ends_at_line_rate_and_stops_timers() {
    let mut p = three_stage_params();
    p.threshold = 1;
    p.hai_rate_mbps = 100_000;
    let mut rp = ReactionPoint::new(p, 8000.0);
    rp.on_cnp(0);
    // T=1 at 10 us: additive (B=0): target min(8000+100, 8000) = 8000, current 6000.
    rp.advance_to(10 * US);
    close(rp.rate_mbps(), 6000.0);
    let done = run_backlogged(&mut rp, 1_000_000_000, |r| !r.is_recovering());
    assert!(done.is_some());
    close(rp.rate_mbps(), 8000.0);
    assert_eq!(rp.next_timer_ns(), None);
    assert_eq!(rp.stages(), (0, 0));
}

#[test]
fn impact_of_firmware_defaults() {
    let p = RpParams::firmware_defaults();
    let m = impact(&p, 100_000.0);
    close(m.after_1_cnp_mbps, 50_048.828_125);
    assert!(m.after_5_cnps_mbps < m.after_1_cnp_mbps / 8.0, "{m:?}");
    let r1 = m.recover_after_1_ns.expect("recovers");
    let r5 = m.recover_after_5_ns.expect("recovers");
    assert!(r1 > 300 * US, "at least one timer period: {r1}");
    assert!(r5 > r1, "deeper cut recovers later: {r5} vs {r1}");
    // A faster additive/hyper increase must recover sooner.
    let (fast, defaulted) = params_from_lookup(
        |n| match n {
            "rp_ai_rate" => Some(100),
            "rp_hai_rate" => Some(1000),
            "rp_time_reset" => Some(55),
            _ => None,
        },
        GConvention::OneMinus,
    );
    assert_eq!(defaulted.len(), 13);
    let f = impact(&fast, 100_000.0);
    assert!(f.recover_after_5_ns.unwrap() < r5);
}
