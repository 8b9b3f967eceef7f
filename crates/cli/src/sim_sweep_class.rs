//! `dqplb sim sweep --class`: which site-config class the sweep sizes (same-rail, cross-rail or
//! cross-dc), its default fabric and grid, the round trip its table writes, the cross-DC BDP line.

use dqplb_config::plan::bdp_bytes;
use dqplb_sim::sweep::Findings;
use dqplb_sim::{SimConfig, TrafficKind};

/// The class a sweep sizes (`--class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Class {
    SameRail,
    CrossRail,
    CrossDc,
}

impl Class {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::SameRail => "same-rail",
            Class::CrossRail => "cross-rail",
            Class::CrossDc => "cross-dc",
        }
    }
}

/// The cross-DC sweep's fabric unless the command line or --config says otherwise: a k = 4 fat
/// tree whose 4 pods are DCs 100 us apart, every host sending 1 GiB to the next DC; 16 MiB NCCL steps
/// (8 slots: 128 MiB in flight) so that the QP window, not NCCL's buffer, limits a connection.
pub(crate) const CROSS_DC_DEFAULTS: [(&str, &str); 7] = [
    ("preset", "fattree-k4"),
    ("traffic", "cross-dc"),
    ("dci-latency-us", "100"),
    ("bytes", "1G"),
    ("step-bytes", "16M"),
    ("mode", "b"),
    ("policy", "dqplb"),
];

/// The cross-rail sweep's fabric unless the command line or --config says otherwise: 64 hosts x
/// 4 rails under one tier of 16 spines (a 256-NIC plane), every GPU sending 64 MiB to the next
/// rail's GPU of another host; the grid is the same-rail one (the round trip is the same).
pub(crate) const CROSS_RAIL_DEFAULTS: [(&str, &str); 9] = [
    ("hosts", "64"),
    ("rails", "4"),
    ("hosts-per-leaf", "16"),
    ("spines", "16"),
    ("traffic", "cross-rail"),
    ("bytes", "64M"),
    ("mode", "b"),
    ("policy", "dqplb"),
    ("seed", "1"),
];

/// The cross-DC grid's defaults: (qps, outstanding, segments).
pub(crate) fn cross_dc_grid() -> (Vec<usize>, Vec<u32>, Vec<u32>) {
    (
        vec![1, 2, 4, 8],
        vec![1, 2, 4, 8, 16, 32, 64, 128],
        vec![512 << 10, 1 << 20, 4 << 20],
    )
}

/// Refuses a sweep whose traffic is not of its class, or a depth the site config cannot take.
pub(crate) fn check(class: Class, cfg: &SimConfig, depths: &[u32]) -> Result<(), String> {
    let kind = cfg.traffic.kind;
    let cross = kind == TrafficKind::CrossDc;
    match class {
        Class::CrossDc if !cross => Err(
            "--class cross-dc runs --traffic cross-dc (every connection between two DCs)".into(),
        ),
        Class::CrossRail if kind != TrafficKind::CrossRail => Err(
            "--class cross-rail runs --traffic cross-rail (every connection between two rails)"
                .into(),
        ),
        Class::SameRail if cross => {
            Err("--traffic cross-dc sizes the cross-dc class: add --class cross-dc".into())
        }
        Class::SameRail if kind == TrafficKind::CrossRail => {
            Err("--traffic cross-rail sizes the cross-rail class: add --class cross-rail".into())
        }
        Class::SameRail if kind.is_plane() => Err(format!(
            "--traffic {} mixes same-rail and cross-rail connections under one plan: sweep \
             --class cross-rail on --traffic cross-rail, or the same-rail class on all-to-all",
            kind.name()
        )),
        Class::CrossDc => match depths.iter().find(|&&d| !(1..=256).contains(&d)) {
            Some(d) => Err(format!(
                "--outstanding {d}: the site config's depths are 1 ..= 256"
            )),
            None => Ok(()),
        },
        Class::SameRail | Class::CrossRail => Ok(()),
    }
}

/// The round trip the class's table writes, in us, and what it is.
pub(crate) fn rtt(class: Class, cfg: &SimConfig) -> (f64, &'static str) {
    match class {
        // A leaf-spine-leaf path: 4 hops out, 4 back for the ACK.
        Class::SameRail | Class::CrossRail => (
            (8.0 * cfg.fabric.hop_latency_ps as f64 / 1e6).max(0.001),
            "the simulated leaf-spine-leaf round trip",
        ),
        Class::CrossDc => (
            (cfg.fabric.cross_dc_rtt_ps() as f64 / 1e6).max(0.001),
            "the simulated DC-to-DC round trip: 2 x (5 hops + the DCI span)",
        ),
    }
}

/// The BDP rule next to the sweep's depth (cross-dc): the plan's ceil(rate x RTT / segment) with
/// the propagation round trip, and with the segment's own (plus its serialization).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub(crate) struct BdpCheck {
    pub rtt_us: f64,
    pub segment_rtt_us: f64,
    pub segment_bytes: u32,
    /// ceil(rate x rtt / segment), the plan's rule with `rtt_us`.
    pub n_out: u64,
    /// The same with `segment_rtt_us`: the depth at which one QP reaches the line rate.
    pub n_out_segment_rtt: u64,
    pub qps: usize,
    /// The sweep's depth (per QP) at q*, and q* x d* segments in flight per connection.
    pub outstanding: u32,
    pub segments_in_flight: u64,
}

pub(crate) fn bdp_check(cfg: &SimConfig, f: &Findings) -> BdpCheck {
    let rate = cfg.fabric.host_gbps;
    let seg = u64::from(f.segment_bytes);
    let rtt = cfg.fabric.cross_dc_rtt_ps();
    let rtt1 = rtt + cfg.fabric.cross_dc_serialization_ps(seg);
    let n = |ps: u64| bdp_bytes(rate, ps as f64 / 1e6).div_ceil(seg.max(1));
    BdpCheck {
        rtt_us: rtt as f64 / 1e6,
        segment_rtt_us: rtt1 as f64 / 1e6,
        segment_bytes: f.segment_bytes,
        n_out: n(rtt),
        n_out_segment_rtt: n(rtt1),
        qps: f.qps,
        outstanding: f.outstanding,
        segments_in_flight: f.qps as u64 * u64::from(f.outstanding),
    }
}

pub(crate) fn bdp_text(b: &BdpCheck) -> String {
    format!(
        "BDP rule at segment {} B: ceil(rate x rtt / segment) = {} with the propagation round trip \
         ({} us), {} with the segment's ({} us, its serialization included); the sweep: {} QPs x \
         {} = {} segments in flight\n",
        b.segment_bytes,
        b.n_out,
        b.rtt_us,
        b.n_out_segment_rtt,
        b.segment_rtt_us,
        b.qps,
        b.outstanding,
        b.segments_in_flight
    )
}
