//! B mode: every engine segment crosses its path hop by hop, serialized on each link's FIFO with
//! cut-through (the next hop starts one hop latency after this one started), acknowledged back.

// Links are lossless with unbounded FIFOs (no ECN, PFC or DCQCN; ECN and DCQCN: see pmode.rs).

use super::bound::{phase_bound, phase_split, Bracket};
use super::conn::{ConnShape, PhaseRun, SimPolicy, LP_SLICES};
use super::error::SimError;
use super::events::Core;
use super::pin::phase_ports;
use super::rng::Rng;
use super::spray::SpraySets;
use super::timeseries::{TsKind, TsRow};
use super::timeseries_bf::Sampler;
use super::topology::{Path, Ps, Rail};

/// A segment on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct Seg {
    conn: u32,
    qp: u16,
    hop: u8,
    imm: u32,
    len: u32,
    /// When its last byte left the previous hop.
    tail: Ps,
    path: Path,
}

/// What one phase on one rail produced.
#[derive(Debug, Clone, Default)]
pub struct PhaseOutcome {
    pub time_ps: Ps,
    pub events: u64,
    /// Fluid re-solves (F mode only).
    pub solves: u64,
    /// Bytes carried per link.
    pub link_bytes: Vec<u64>,
    /// Paths per leaf uplink (QPs hashed there; spray counts none).
    pub uplink_paths: Vec<u32>,
    /// Deepest FIFO seen on any link, in segments (B mode).
    pub max_queue: usize,
    /// The best split over the QP paths (time over ideal), for this phase's paths.
    pub bound: Option<super::bound::Bracket>,
    /// B and F mode: the time series (timeseries_bf.rs), empty unless sampled.
    pub timeseries: Vec<TsRow>,
}

/// The fixed path of every (connection, QP), or None under spraying; counts paths per uplink.
/// Sets the QPs' hashed ends (`run.ends`, pin.rs) first.
pub(crate) fn qp_paths(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    uplink_paths: &mut [u32],
) -> Result<Vec<Path>, SimError> {
    run.ends = phase_ports(rail, &run.conns, shape.qps)?;
    let mut paths = Vec::with_capacity(run.conns.len() * shape.qps);
    let first_up = rail.leaf_up(0, 0) as usize;
    for (ci, c) in run.conns.iter().enumerate() {
        for k in 0..shape.qps {
            let (sport, rqpn) = run.ends[ci * shape.qps + k];
            let p = rail
                .ecmp_path_port(c.src as usize, c.dst as usize, sport, rqpn)
                .ok_or(SimError::NoPath {
                    rail: rail.index,
                    src: c.src,
                    dst: c.dst,
                })?;
            if p.hops >= 4 && shape.policy != SimPolicy::Spray {
                uplink_paths[p.links[1] as usize - first_up] += 1;
            }
            paths.push(p);
        }
    }
    Ok(paths)
}

/// Every engine QP's fixed path (`paths[c * shape.engine_qps() + k]`, see [`qp_paths`]) and the
/// phase's split bound over the q hashed paths. Under `lp-split` sub-QP r of a connection takes
/// the hashed path that the bound's greedy split gave slice r, so the engine's static split
/// loads every link as that split does.
pub(crate) fn engine_paths(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    uplink_paths: &mut [u32],
) -> Result<(Vec<Path>, Bracket), SimError> {
    let paths = qp_paths(rail, run, shape, uplink_paths)?;
    if shape.policy != SimPolicy::LpSplit {
        let bound = phase_bound(rail, &paths, shape.qps, run.phase);
        return Ok((paths, bound));
    }
    let (bound, picks) = phase_split(rail, &paths, shape.qps, run.phase);
    let conns = run.conns.len();
    let mut sub = Vec::with_capacity(conns * LP_SLICES);
    for c in 0..conns {
        for r in 0..LP_SLICES {
            sub.push(paths[c * shape.qps + usize::from(picks[r * conns + c])]);
        }
    }
    Ok((sub, bound))
}

/// Under spraying, every QP's subset of its ECMP group (`--spray-paths`), drawn from `rng`.
pub(crate) fn spray_sets(
    rail: &Rail,
    run: &PhaseRun,
    shape: &ConnShape,
    rng: &mut Rng,
) -> SpraySets {
    if shape.policy != SimPolicy::Spray {
        return SpraySets::default();
    }
    let ends = run
        .conns
        .iter()
        .flat_map(|c| std::iter::repeat_n((c.src as usize, c.dst as usize), shape.qps));
    SpraySets::new(rail, ends, rail.spray_paths, rng)
}

/// Runs one phase in B mode; `rng` draws the spray choices; a time series every `sample_ps`
/// (0: none) with `phase` in its rows.
pub(crate) fn run_phase(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    rng: &mut Rng,
    sample_ps: Ps,
    phase: usize,
) -> Result<PhaseOutcome, SimError> {
    let mut ts = Sampler::new(sample_ps, phase, run.conns.len() * shape.engine_qps());
    // Two copies of the loop: without samples it has no trace of them.
    if ts.on {
        drive::<true>(rail, run, shape, rng, &mut ts)
    } else {
        drive::<false>(rail, run, shape, rng, &mut ts)
    }
}

/// The event loop of [`run_phase`], sampling into `ts` when `TS`.
#[inline(never)]
fn drive<const TS: bool>(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    rng: &mut Rng,
    ts: &mut Sampler,
) -> Result<PhaseOutcome, SimError> {
    let nl = rail.links() as u32;
    let hosts = rail.hosts as u32;
    // One acknowledgement queue per path length (2, 4 and with a third tier 6 hops), each pushed
    // at now + a constant.
    let ack_q = nl + hosts;
    let classes = u32::from(rail.max_hops() / 2);
    let lat = rail.hop_latency_ps;
    let mut out = PhaseOutcome {
        link_bytes: vec![0; nl as usize],
        uplink_paths: vec![0; rail.leaves * rail.spines],
        ..PhaseOutcome::default()
    };
    let (mut paths, bound) = engine_paths(rail, run, shape, &mut out.uplink_paths)?;
    out.bound = Some(bound);
    let spray = shape.policy == SimPolicy::Spray;
    let sets = spray_sets(rail, run, shape, rng);
    let qps = shape.engine_qps();
    let capacity = run.conns.len() * qps * shape.outstanding as usize;
    let mut segs: Vec<Seg> = Vec::with_capacity(capacity);
    let mut free: Vec<u32> = Vec::with_capacity(capacity);
    let mut core: Core<u32> = Core::new((nl + hosts + classes) as usize);
    core.reserve(ack_q, capacity.min(1 << 22));
    for c in 1..classes {
        core.reserve(ack_q + c, capacity.min(1 << 22));
    }
    let mut wake: Vec<u32> = Vec::with_capacity(run.conns.len());
    let mut now: Ps = 0;
    let mut end_time: Ps = 0;
    loop {
        // Re-hashed stragglers: new QPNs, new path, back into the engine.
        run.rehash_pending(rail, &mut paths, qps);
        // Post and transmit for every connection the last event touched.
        std::mem::swap(&mut wake, &mut run.wake);
        for &c in &wake {
            let c = c as usize;
            run.try_post(c, now);
            while let Some(t) = run.transmit(c, now) {
                let conn = &run.conns[c];
                let path = if spray {
                    let n = rail.spines_between(conn.src as usize, conn.dst as usize);
                    let k = if n > 1 {
                        sets.pick(c * qps + t.qp, n, rng)
                    } else {
                        0
                    };
                    rail.path_via(conn.src as usize, conn.dst as usize, k)
                } else {
                    paths[c * qps + t.qp]
                };
                let seg = Seg {
                    conn: c as u32,
                    qp: t.qp as u16,
                    hop: 0,
                    imm: t.imm,
                    len: t.len,
                    tail: now,
                    path,
                };
                let id = match free.pop() {
                    Some(i) => {
                        segs[i as usize] = seg;
                        i
                    }
                    None => {
                        segs.push(seg);
                        (segs.len() - 1) as u32
                    }
                };
                core.push_inlined(path.links[0], now, id);
            }
        }
        wake.clear();
        if run.done() {
            // The collective is complete (a background job, if any, is cut off here).
            end_time = end_time.max(now);
            break;
        }
        if TS {
            if let Some(t) = core.peek_time() {
                while ts.next <= t {
                    sample(ts, rail, run, qps, &core, &segs, &out.link_bytes);
                }
            }
        }
        let Some((t, q, id)) = core.pop_inlined() else {
            break;
        };
        now = t;
        if q < nl {
            let s = &mut segs[id as usize];
            let ser = (f64::from(s.len) * rail.ps_per_byte[q as usize]).ceil() as Ps;
            let end = (now + ser).max(s.tail + rail.lat_in(&s.path, s.hop));
            core.set_not_before(q, end);
            out.link_bytes[q as usize] += u64::from(s.len);
            out.max_queue = out.max_queue.max(core.len(q) + 1);
            s.tail = end;
            s.hop += 1;
            if s.hop < s.path.hops {
                core.push_inlined(s.path.links[s.hop as usize], now + rail.lat_out(q), id);
            } else {
                core.push_inlined(nl + run.conns[s.conn as usize].dst, end + lat, id);
            }
        } else if q < ack_q {
            let s = segs[id as usize];
            if TS {
                ts.delivered(s.conn as usize * qps + usize::from(s.qp), s.len);
            }
            run.on_arrival(s.conn as usize, s.imm, s.len, now);
            core.push_inlined(
                ack_q + u32::from(s.path.hops / 2 - 1),
                now + rail.one_way_ps(s.path.hops),
                id,
            );
        } else {
            let s = segs[id as usize];
            free.push(id);
            run.on_ack(s.conn as usize, s.qp as usize, now);
        }
    }
    if TS {
        // The phase's final counts, at the first sample time after it ended.
        sample(ts, rail, run, qps, &core, &segs, &out.link_bytes);
        out.timeseries = std::mem::take(&mut ts.rows);
    }
    out.time_ps = end_time;
    out.events = core.events;
    Ok(out)
}

/// One sample at `ts.next`: every data QP, then every link that carried bytes by then with the
/// bytes of the segments that reached it and wait (the one on the wire excluded). A host's up
/// link is its NIC's send FIFO: segments the engine transmitted, not yet serialized.
fn sample(
    ts: &mut Sampler,
    rail: &Rail,
    run: &PhaseRun,
    qps: usize,
    core: &Core<u32>,
    segs: &[Seg],
    link_bytes: &[u64],
) {
    ts.qp_rows(rail, run, qps, None);
    let base = ts.base(rail);
    for (l, &b) in link_bytes.iter().enumerate() {
        if b == 0 {
            continue;
        }
        let q = l as u32;
        let waiting: u64 = core
            .due_items(q, ts.next)
            .map(|id| u64::from(segs[id as usize].len))
            .sum();
        ts.rows.push(TsRow {
            kind: TsKind::Link(rail.kind(q)),
            id: q,
            bytes: b,
            queue_bytes: waiting,
            ..base
        });
    }
    ts.advance();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::SIM_REHASH;
    use crate::topology::FabricSpec;
    use crate::traffic::{phases, Placement, TrafficKind, TrafficSpec};
    use dqplb_engine::PolicyKind;

    fn shape(policy: SimPolicy) -> ConnShape {
        ConnShape {
            policy,
            qps: 8,
            outstanding: 2,
            segment_bytes: 128 << 10,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        }
    }

    #[test]
    fn lp_split_sub_qps_load_the_links_as_the_bounds_split() {
        // 64 hosts, 8 leaves of 8, 8 spines: a fragmented permutation collides on uplinks.
        let spec = FabricSpec {
            hosts: 64,
            hosts_per_leaf: 8,
            spines: 8,
            ..FabricSpec::default()
        };
        let traffic = TrafficSpec {
            kind: TrafficKind::Permutation,
            bytes: 64 << 20,
            placement: Placement::Fragmented,
            ..TrafficSpec::default()
        };
        let mut rng = Rng::new(7);
        let rail = Rail::new(&spec, 0, &mut rng);
        let ph = phases(&traffic, 64, 8, 64, &mut rng).remove(0);
        let qpns: Vec<u32> = (0..64).map(|h| 0x100 + 977 * h).collect();
        let paths_of = |policy| {
            let (mut q, s) = (qpns.clone(), shape(policy));
            let mut run = PhaseRun::new(&ph, &s, &mut q).unwrap();
            let mut up = vec![0; rail.leaves * rail.spines];
            let (paths, bound) = engine_paths(&rail, &mut run, &s, &mut up).unwrap();
            (paths, bound, up)
        };
        let (base, b8, up8) = paths_of(SimPolicy::Engine(PolicyKind::Dqplb));
        let (sub, blp, uplp) = paths_of(SimPolicy::LpSplit);
        // The same 8 hashed QPs per connection (QPNs as for any 8-QP policy), the same bound.
        assert_eq!((up8, b8), (uplp, blp));
        assert_eq!(base.len(), 64 * 8);
        assert_eq!(sub.len(), 64 * LP_SLICES);
        let mut load = vec![0.0f64; rail.links()];
        let slice = ph.chunk as f64 / LP_SLICES as f64;
        for c in 0..64 {
            let mine = &base[c * 8..c * 8 + 8];
            for p in &sub[c * LP_SLICES..(c + 1) * LP_SLICES] {
                assert!(
                    mine.contains(p),
                    "connection {c}: a sub-QP off its hashed paths"
                );
                for &l in p.links() {
                    load[l as usize] += slice * rail.ps_per_byte[l as usize];
                }
            }
        }
        // Its fullest link is the bound's upper value: the engine's static split over the
        // sub-QPs is the bound's split.
        let ideal = ph.ideal_bytes_per_step() * rail.ps_per_byte[0];
        let worst = load.iter().copied().fold(0.0, f64::max) / ideal;
        assert!((worst - blp.upper).abs() < 1e-9, "{worst} vs {blp:?}");
        assert!(blp.upper > 1.0, "this seed collides: {blp:?}");
    }
}
