//! The two DCQCN alpha-update schedules (`AlphaSchedule`): per-period traces computed by hand,
//! the per-CNP trace unchanged, and the settled alpha under a CNP every 4.2 us.

use dqplb_dcqcn::impact::run_backlogged;
use dqplb_dcqcn::model::{AlphaSchedule, CnpOutcome, GConvention, ReactionPoint, RpParams};

const US: u64 = 1_000;

fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} != {b}");
}

fn with(schedule: AlphaSchedule, initial_alpha: u32) -> RpParams {
    RpParams {
        alpha_schedule: schedule,
        initial_alpha,
        ..RpParams::firmware_defaults()
    }
}

#[test]
fn firmware_defaults_update_per_period_and_paper_per_cnp() {
    assert_eq!(
        RpParams::firmware_defaults().alpha_schedule,
        AlphaSchedule::PerPeriod
    );
    let paper = dqplb_sim::packet::dcqcn_profile("paper").unwrap();
    assert_eq!(paper.alpha_schedule, AlphaSchedule::PerCnp);
    assert_eq!(AlphaSchedule::parse("per-cnp"), Some(AlphaSchedule::PerCnp));
    assert_eq!(
        AlphaSchedule::parse("per-period"),
        Some(AlphaSchedule::PerPeriod)
    );
    assert_eq!(AlphaSchedule::parse("per_cnp"), None);
    assert_eq!(AlphaSchedule::PerPeriod.name(), "per-period");
}

/// Firmware values (g = 5/1024, 1 us alpha period, 4 us monitor period), initial alpha 100,
/// line 100 Gb/s; CNPs at 0 (cut), 3.5 us (ignored: inside the monitor period), 4.2 us (cut).
#[test]
fn per_period_trace_by_hand() {
    let mut rp = ReactionPoint::new(with(AlphaSchedule::PerPeriod, 100), 100_000.0);
    // 0: first cut with alpha = initial 100: rate 100000 * (1 - 100/2048); alpha unchanged,
    // the period [0, 1 us) marked.
    assert_eq!(rp.on_cnp(0), CnpOutcome::Cut);
    close(rp.rate_mbps(), 100_000.0 * 1948.0 / 2048.0);
    assert_eq!(rp.alpha(), 100);
    assert_eq!(rp.next_timer_ns(), Some(US));
    // 1 us, marked: up, floor((1019*100 + 1024*5)/1024) = floor(107020/1024) = 104.
    rp.advance_to(US);
    assert_eq!(rp.alpha(), 104);
    // 2 us, no CNP: down, floor(1019*104/1024) = floor(105976/1024) = 103.
    rp.advance_to(2 * US);
    assert_eq!(rp.alpha(), 103);
    // 3 us: floor(1019*103/1024) = floor(104957/1024) = 102.
    rp.advance_to(3 * US);
    assert_eq!(rp.alpha(), 102);
    // 3.5 us: ignored for the rate, but it marks [3, 4 us).
    assert_eq!(rp.on_cnp(3_500), CnpOutcome::Ignored);
    assert_eq!(rp.alpha(), 102);
    // 4 us, marked: up, floor((1019*102 + 5120)/1024) = floor(109058/1024) = 106.
    rp.advance_to(4 * US);
    assert_eq!(rp.alpha(), 106);
    // 4.2 us: the cut uses 106 (1 - 106/2048 = 1942/2048); the timer keeps its phase (5 us).
    assert_eq!(rp.on_cnp(4_200), CnpOutcome::Cut);
    close(
        rp.rate_mbps(),
        100_000.0 * 1948.0 / 2048.0 * 1942.0 / 2048.0,
    );
    assert_eq!(rp.alpha(), 106);
    assert_eq!(rp.next_timer_ns(), Some(5 * US));
    // 5 us, marked: floor((1019*106 + 5120)/1024) = floor(113134/1024) = 110;
    // 6 us: floor(1019*110/1024) = floor(112090/1024) = 109.
    rp.advance_to(5 * US);
    assert_eq!(rp.alpha(), 110);
    rp.advance_to(6 * US);
    assert_eq!(rp.alpha(), 109);
    assert_eq!(rp.cnp_counts(), (2, 1));
}

/// The same script under the paper's schedule (today's model): up at each cut, down every 1 us
/// after it, the period restarting at the cut; the ignored CNP does nothing.
#[test]
fn per_cnp_trace_unchanged() {
    let mut rp = ReactionPoint::new(with(AlphaSchedule::PerCnp, 100), 100_000.0);
    rp.on_cnp(0);
    close(rp.rate_mbps(), 100_000.0 * 1948.0 / 2048.0);
    // Up at the cut: floor(107020/1024) = 104; then 103, 102, 101, 100 at 1, 2, 3, 4 us
    // (floor(1019*101/1024) = floor(102919/1024) = 100).
    assert_eq!(rp.alpha(), 104);
    assert_eq!(rp.on_cnp(3_500), CnpOutcome::Ignored);
    rp.advance_to(4 * US);
    assert_eq!(rp.alpha(), 100);
    // 4.2 us: the cut uses 100, then up to 104; the period restarts (next at 5.2 us).
    rp.on_cnp(4_200);
    close(
        rp.rate_mbps(),
        100_000.0 * 1948.0 / 2048.0 * 1948.0 / 2048.0,
    );
    assert_eq!(rp.alpha(), 104);
    assert_eq!(rp.next_timer_ns(), Some(5_200));
}

/// Per period, the burst of crates/dcqcn/tests/dcqcn_model.rs (firmware defaults, CNPs at 0 and 4 us).
#[test]
fn per_period_burst_with_firmware_defaults() {
    let mut rp = ReactionPoint::new(RpParams::firmware_defaults(), 100_000.0);
    rp.on_cnp(0);
    close(rp.rate_mbps(), 50_048.828_125);
    assert_eq!(rp.alpha(), 1023);
    // 1 us marked: floor((1019*1023 + 5120)/1024) = floor(1047557/1024) = 1023; 2, 3, 4 us down:
    // floor(1042437/1024) = 1018, floor(1037342/1024) = 1013, floor(1032247/1024) = 1008. The
    // period ending at 4 us closes before the CNP at 4 us, whose cut uses 1008.
    rp.on_cnp(4 * US);
    assert_eq!(rp.alpha(), 1008);
    close(
        rp.rate_mbps(),
        100_000.0 * 1025.0 / 2048.0 * 1040.0 / 2048.0,
    );
    // 5 us marked: floor((1019*1008 + 5120)/1024) = floor(1032272/1024) = 1008.
    rp.advance_to(5 * US);
    assert_eq!(rp.alpha(), 1008);
}

/// Direct g (1019/1024) decays alpha to 0 in two periods; periods at alpha 0 without a CNP are
/// skipped, keeping the phase: a CNP at 1000.5 us marks [1000, 1001 us).
#[test]
fn per_period_alpha_zero_keeps_its_phase() {
    let mut p = RpParams::firmware_defaults();
    p.g_convention = GConvention::Direct;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    // 1 us marked: floor((5*1023 + 1024*1019)/1024) = floor(1048571/1024) = 1023;
    // 2 us: floor(5*1023/1024) = 4; 3 us: floor(20/1024) = 0.
    rp.advance_to(US);
    assert_eq!(rp.alpha(), 1023);
    rp.advance_to(3 * US);
    assert_eq!(rp.alpha(), 0);
    rp.advance_to(1_000_500);
    assert!(rp.is_recovering());
    // Increase timer at 300, 600, 900 us, next 1200 us; the alpha period's next end 1001 us.
    assert_eq!(rp.next_timer_ns(), Some(1_001 * US));
    let before = rp.rate_mbps();
    assert_eq!(rp.on_cnp(1_000_500), CnpOutcome::Cut);
    // Alpha 0 cuts nothing; the period is marked: up to floor(1024*1019/1024) = 1019.
    close(rp.rate_mbps(), before);
    rp.advance_to(1_001 * US);
    assert_eq!(rp.alpha(), 1019);
}

/// Recovery's end stops the period timer; the next CNP resets alpha and starts a new phase.
/// dce_tcp_rtt = 0: no period, alpha stays at initial_alpha.
#[test]
fn per_period_end_of_recovery_and_zero_period() {
    let mut p = with(AlphaSchedule::PerPeriod, 512);
    p.threshold = 1;
    p.hai_rate_mbps = 100_000;
    p.time_reset_us = 10;
    let mut rp = ReactionPoint::new(p, 8000.0);
    rp.on_cnp(0);
    let end = run_backlogged(&mut rp, 1_000_000_000, |r| !r.is_recovering()).expect("recovers");
    assert_eq!(rp.next_timer_ns(), None);
    let t = end + 700;
    rp.on_cnp(t);
    // Reset to 512 and cut by 512/2048; the new phase: t + 1 us; marked: up,
    // floor((1019*512 + 5120)/1024) = floor(526848/1024) = 514.
    close(rp.rate_mbps(), 8000.0 * 1536.0 / 2048.0);
    assert_eq!(rp.alpha(), 512);
    assert_eq!(rp.next_timer_ns(), Some(t + US));
    rp.advance_to(t + US);
    assert_eq!(rp.alpha(), 514);

    let mut p = with(AlphaSchedule::PerPeriod, 100);
    p.dce_tcp_rtt_us = 0;
    let mut rp = ReactionPoint::new(p, 100_000.0);
    rp.on_cnp(0);
    rp.on_cnp(4 * US);
    rp.on_cnp(8 * US);
    assert_eq!(rp.alpha(), 100);
    close(rp.rate_mbps(), 100_000.0 * (1948.0f64 / 2048.0).powi(3));
    assert_eq!(rp.next_timer_ns(), Some(8 * US + 300 * US));
}

/// Alpha at each of `n` CNPs 4.2 us apart (the value the cut uses), firmware values.
fn alphas_at_cnps(schedule: AlphaSchedule, initial: u32, n: u64) -> Vec<u64> {
    let mut rp = ReactionPoint::new(with(schedule, initial), 400_000.0);
    let mut out = Vec::new();
    for k in 0..n {
        rp.advance_to(k * 4_200);
        out.push(rp.alpha());
        assert_eq!(rp.on_cnp(k * 4_200), CnpOutcome::Cut);
    }
    out
}

/// The documented claim (docs/records/simulation.md): with a CNP every ~4.2 us and the firmware's 1 us
/// period, per-period alpha settles near 204/1024 from any start. Measured with this model: the
/// cuts use a five-CNP cycle 200, 201, 201, 201, 201 (21 periods: 5 marked, 16 not), reached
/// from 1023 by the 126th CNP and from 5 by the 246th. The paper's schedule stays at 5 from 5,
/// and from 1023 settles at 200 (204 just after each cut, four decays of 1).
#[test]
fn per_period_alpha_settles_from_any_start() {
    let cycle = [200, 201, 201, 201, 201];
    let high = alphas_at_cnps(AlphaSchedule::PerPeriod, 1023, 2000);
    let low = alphas_at_cnps(AlphaSchedule::PerPeriod, 5, 2000);
    assert_eq!(&high[1995..], &cycle);
    assert_eq!(&low[1995..], &cycle);
    let settled = |v: &[u64]| v.windows(5).position(|w| w == cycle).unwrap();
    assert_eq!((settled(&high), settled(&low)), (125, 245));
    // Once there, it stays: every later CNP continues the cycle.
    assert!(high[125..].chunks(5).all(|c| c == &cycle[..c.len()]));
    assert!(low[245..].chunks(5).all(|c| c == &cycle[..c.len()]));

    let paper_low = alphas_at_cnps(AlphaSchedule::PerCnp, 5, 2000);
    assert!(paper_low.iter().all(|&a| a == 5));
    let paper_high = alphas_at_cnps(AlphaSchedule::PerCnp, 1023, 2000);
    assert!(paper_high[87..].iter().all(|&a| a == 200));
    assert_eq!(paper_high[86], 201);
}
