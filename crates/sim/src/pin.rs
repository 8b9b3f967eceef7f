//! Source ports of a phase's QPs under `--source-port`: from the QPNs, fixed, or pinned by the
//! engine's pinning module (relative or absolute), and the new port of a re-pinned straggler.

use std::collections::HashMap;

use dqplb_engine::pinning::{
    channel_qp_index, AbsoluteSpec, BucketSelect, FlowFields, HashFamily, HashSpec, RelativePins,
};

use super::conn::Conn;
use super::error::SimError;
use super::hashing::{udp_sport, SourcePort, PIN_BASE};
use super::topology::{nic_ip, Rail};

/// A QP's hashed ends: its UDP source port and its destination QPN.
pub(crate) type QpEnd = (u16, u32);

/// Relative pinning as the plugin runs it: it knows the switches' family (CRC-32), selection
/// (`mod`), field layout and group size (`--spines`, the healthy group), not their seeds.
fn relative(rail: &Rail) -> Result<RelativePins, SimError> {
    RelativePins::new(
        HashFamily::Crc32,
        BucketSelect::Mod,
        rail.hash.layout(),
        rail.spines as u32,
        PIN_BASE,
    )
    .map_err(|e| SimError::Config(format!("--source-port pinned: {e}")))
}

/// The hash of `src`'s leaf towards `dst` in full (its seed and live group) for absolute
/// pinning; None where the leaf does not choose among spines of one pod (same leaf, another
/// pod: those pairs take relative ports).
fn absolute(rail: &Rail, src: usize, dst: usize) -> Option<AbsoluteSpec> {
    let (a, b) = (rail.leaf_of(src), rail.leaf_of(dst));
    if a == b || !rail.same_pod(a, b) {
        return None;
    }
    let n = rail.group_len(a, b);
    (n > 0).then(|| AbsoluteSpec {
        hash: HashSpec {
            family: HashFamily::Crc32,
            seed: rail.leaf_seed(a),
            layout: rail.hash.layout(),
        },
        select: BucketSelect::Mod,
        group: n as u32,
    })
}

/// `(ref_qpn, qpn)` for the pinning calls where the switches hash the destination QPN.
fn qpn_arg(rail: &Rail, qpn: u32) -> Option<(u32, u32)> {
    rail.hash.dest_qpn.then_some((0, qpn))
}

/// Every QP's hashed ends, `out[c * qps + k]` for QP k of connection c. Pinned modes number a
/// NIC pair's QPs over its connections (NCCL's channels) with [`channel_qp_index`].
pub(crate) fn phase_ports(rail: &Rail, conns: &[Conn], qps: usize) -> Result<Vec<QpEnd>, SimError> {
    let mode = rail.hash.source_port;
    let mut out = Vec::with_capacity(conns.len() * qps);
    let rel = if mode.pinned() {
        Some(relative(rail)?)
    } else {
        None
    };
    for c in conns {
        for k in 0..qps as u32 {
            let (l, r) = (c.lqpn + k, c.rqpn + k);
            let port = match &rel {
                None => udp_sport(mode, l, r),
                Some(pins) => {
                    let i = channel_qp_index(c.channel, k, qps as u32);
                    match qpn_arg(rail, r) {
                        Some((q0, q)) => pins.port_qpn(i, q0, q),
                        None => pins.port(i),
                    }
                    .map_err(|e| SimError::Config(format!("--source-port pinned: {e}")))?
                }
            };
            out.push((port, r));
        }
    }
    if mode == SourcePort::PinnedAbsolute {
        // Each NIC pair's QPs, every channel's together, balanced over the live group.
        let mut pairs: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
        for (i, c) in conns.iter().enumerate() {
            pairs.entry((c.src, c.dst)).or_default().push(i);
        }
        for ((src, dst), idx) in pairs {
            let Some(spec) = absolute(rail, src as usize, dst as usize) else {
                continue;
            };
            let (sip, dip) = (
                nic_ip(rail.index, src as usize),
                nic_ip(rail.index, dst as usize),
            );
            let flows: Vec<FlowFields> = idx
                .iter()
                .flat_map(|&c| (0..qps).map(move |k| c * qps + k))
                .map(|f| FlowFields::roce(sip, dip, PIN_BASE, out[f].1))
                .collect();
            let ports = spec
                .ports(PIN_BASE, &flows)
                .map_err(|e| SimError::Config(format!("--source-port pinned-absolute: {e}")))?;
            let slots = idx.iter().flat_map(|&c| (0..qps).map(move |k| c * qps + k));
            for (f, p) in slots.zip(ports) {
                out[f].0 = p;
            }
        }
    }
    Ok(out)
}

/// The ends of a straggler QP re-created with QPNs `l` -> `r` (the re-hash rule) that had
/// `old`: from the new QPNs, or pinned to the next relative bucket (relative), or to another
/// live member than its current one (absolute).
pub(crate) fn repin(rail: &Rail, src: usize, dst: usize, old: QpEnd, l: u32, r: u32) -> QpEnd {
    let mode = rail.hash.source_port;
    if !mode.pinned() {
        return (udp_sport(mode, l, r), r);
    }
    if mode == SourcePort::PinnedAbsolute {
        if let Some(spec) = absolute(rail, src, dst) {
            let flow = FlowFields::roce(nic_ip(rail.index, src), nic_ip(rail.index, dst), old.0, r);
            if let Ok(Some(p)) = spec.repin(&flow, None) {
                return (p, r);
            }
            return (old.0, r);
        }
    }
    let Ok(pins) = relative(rail) else {
        return (old.0, r);
    };
    let cur = pins.relative_bucket(old.0, qpn_arg(rail, old.1));
    let next = (cur + 1) % pins.group();
    match pins.port_for(next, 0, qpn_arg(rail, r)) {
        Ok(p) => (p, r),
        Err(_) => (old.0, r),
    }
}

#[cfg(test)]
mod tests {
    use super::super::conn::{ConnShape, PhaseRun, SimPolicy, SIM_REHASH};
    use super::super::hashing::HashFields;
    use super::super::rng::Rng;
    use super::super::topology::FabricSpec;
    use super::super::traffic::{phases, Placement, TrafficKind, TrafficSpec};
    use super::*;
    use dqplb_engine::PolicyKind;
    use std::collections::BTreeMap;

    const QPS: usize = 4;

    /// A 64-host rail of 8 leafs x 8 spines with `failed` failed uplinks; a fragmented ring over
    /// 2 channels of `QPS` QPs each: 8 QPs per NIC pair, as many as spines.
    fn ring(source_port: SourcePort, dest_qpn: bool, failed: usize) -> (Rail, Vec<PairSpines>) {
        let spec = FabricSpec {
            hosts: 64,
            rails: 1,
            hosts_per_leaf: 8,
            spines: 8,
            failed_links: failed,
            hash: HashFields {
                source_port,
                dest_qpn,
            },
            ..FabricSpec::default()
        };
        let mut rng = Rng::new(3);
        let rail = Rail::new(&spec, 0, &mut rng);
        let traffic = TrafficSpec {
            kind: TrafficKind::Ring,
            placement: Placement::Fragmented,
            channels: 2,
            ..TrafficSpec::default()
        };
        let ph = phases(&traffic, 64, 8, 64, &mut rng).remove(0);
        let shape = ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: QPS,
            outstanding: 2,
            segment_bytes: 128 * 1024,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        };
        let mut qpn: Vec<u32> = (0..64).map(|h| 0x100 + 977 * h).collect();
        let run = PhaseRun::new(&ph, &shape, &mut qpn).unwrap();
        let ends = phase_ports(&rail, &run.conns, QPS).unwrap();
        // Per NIC pair that crosses the spines: the spine of each of its QPs (both channels).
        let mut per_pair: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
        for (ci, c) in run.conns.iter().enumerate() {
            for k in 0..QPS {
                let (sport, rqpn) = ends[ci * QPS + k];
                let p = rail
                    .ecmp_path_port(c.src as usize, c.dst as usize, sport, rqpn)
                    .unwrap();
                if p.hops == 4 {
                    let spine =
                        (p.links[1] - rail.leaf_up(rail.leaf_of(c.src as usize), 0)) as usize;
                    per_pair.entry((c.src, c.dst)).or_default().push(spine);
                }
            }
        }
        (rail, per_pair.into_values().map(PairSpines).collect())
    }

    /// The spines of one NIC pair's 8 QPs.
    struct PairSpines(Vec<usize>);

    fn distinct(v: &[usize]) -> usize {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    #[test]
    fn pinned_nic_pairs_cover_every_spine_once() {
        for dest_qpn in [false, true] {
            for mode in [SourcePort::Pinned, SourcePort::PinnedAbsolute] {
                let (_, pairs) = ring(mode, dest_qpn, 0);
                assert!(pairs.len() > 40, "most ring pairs cross the spines");
                for p in &pairs {
                    assert_eq!(p.0.len(), 2 * QPS);
                    assert_eq!(distinct(&p.0), 8, "{mode:?} qpn {dest_qpn}: {:?}", p.0);
                }
            }
            // Hashed ports leave some pairs with QPs sharing a spine.
            let (_, pairs) = ring(SourcePort::FromQpn, dest_qpn, 0);
            assert!(pairs.iter().any(|p| distinct(&p.0) < 8));
        }
    }

    #[test]
    fn absolute_pinning_balances_over_a_group_with_a_failed_uplink() {
        let (rail, pairs) = ring(SourcePort::PinnedAbsolute, false, 1);
        let dead = rail.alive.iter().filter(|&&a| !a).count();
        assert_eq!(dead, 2, "one leaf-spine pair, both directions");
        let mut short = 0;
        for p in &pairs {
            let mut load = [0u32; 8];
            for &s in &p.0 {
                load[s] += 1;
            }
            let used: Vec<u32> = load.iter().copied().filter(|&l| l > 0).collect();
            if used.len() == 7 {
                // 8 QPs over the 7 live members: one member carries two.
                short += 1;
                assert_eq!(used.iter().filter(|&&l| l == 2).count(), 1, "{load:?}");
            } else {
                assert_eq!(used, vec![1; 8]);
            }
        }
        assert!(short > 0, "some pairs cross the failed uplink's group");
    }

    #[test]
    fn relative_pinning_refuses_a_group_that_is_no_power_of_two() {
        let spec = FabricSpec {
            hosts: 12,
            rails: 1,
            hosts_per_leaf: 4,
            spines: 6,
            hash: HashFields {
                source_port: SourcePort::Pinned,
                dest_qpn: false,
            },
            ..FabricSpec::default()
        };
        let rail = Rail::new(&spec, 0, &mut Rng::new(1));
        let err = relative(&rail).unwrap_err().to_string();
        assert!(err.contains("--source-port pinned"), "{err}");
        assert!(err.contains("power-of-two ECMP group, got 6"), "{err}");
    }

    #[test]
    fn repin_moves_a_qp_to_another_spine() {
        for mode in [SourcePort::Pinned, SourcePort::PinnedAbsolute] {
            let (rail, _) = ring(mode, false, 0);
            let (src, dst) = (0usize, 63usize);
            let spine = |e: QpEnd| {
                let p = rail.ecmp_path_port(src, dst, e.0, e.1).unwrap();
                p.links[1] - rail.leaf_up(rail.leaf_of(src), 0)
            };
            let old = (PIN_BASE, 0x500);
            let new = repin(&rail, src, dst, old, 0x900, 0x901);
            assert_eq!(new.1, 0x901);
            assert_ne!(spine(new), spine(old), "{mode:?}");
        }
        // From the QPNs: the new QPNs' port, as before pinning existed.
        let (rail, _) = ring(SourcePort::FromQpn, false, 0);
        assert_eq!(
            repin(&rail, 0, 63, (1, 2), 0x900, 0x901),
            (udp_sport(SourcePort::FromQpn, 0x900, 0x901), 0x901)
        );
    }
}
