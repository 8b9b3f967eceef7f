//! F mode: each data QP is a fluid flow on its hashed path (or spread over every spine when
//! sprayed) at its max-min rate, re-solved when the set of QPs with bytes in flight changes.

// The engine stays in the loop: a QP drains its posted segments in FIFO order at its rate, each
// drained segment arrives one path latency later and is acknowledged a path latency after that.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::bmode::{engine_paths, PhaseOutcome};
use super::conn::{ConnShape, PhaseRun, SimPolicy};
use super::error::SimError;
use super::events::Core;
use super::fluid::{Incidence, MaxMin};
use super::timeseries_bf::Sampler;
use super::topology::{Ps, Rail};

#[derive(Debug, Clone, Copy)]
struct FSeg {
    conn: u32,
    qp: u16,
    hops: u8,
    imm: u32,
    len: u32,
}

#[derive(Debug, Clone, Default)]
struct FlowState {
    /// Bytes per picosecond.
    rate: f64,
    /// Bytes drained by `t_last`.
    served: f64,
    t_last: Ps,
    /// Cumulative byte count at which each queued segment is drained, with its immediate, length.
    ends: VecDeque<(u64, u32, u32)>,
    pushed: u64,
    version: u32,
}

/// Runs one phase in F mode. `epoch_ps` = 0: re-solve whenever the set of busy QPs changed
/// (exact). Above 0: re-solve at most once per epoch; meanwhile a QP that went idle keeps its
/// share unused and one that comes back resumes at its last rate (a new QP always re-solves).
/// A time series every `sample_ps` (0: none; per QP only, fluid links have no queues).
pub(crate) fn run_phase(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    epoch_ps: Ps,
    sample_ps: Ps,
    phase: usize,
    rng: &mut super::rng::Rng,
) -> Result<PhaseOutcome, SimError> {
    let mut ts = Sampler::new(sample_ps, phase, run.conns.len() * shape.engine_qps());
    // Two copies of the loop: without samples it has no trace of them.
    let sets = super::bmode::spray_sets(rail, run, shape, rng);
    if ts.on {
        drive::<true>(rail, run, shape, epoch_ps, &sets, &mut ts)
    } else {
        drive::<false>(rail, run, shape, epoch_ps, &sets, &mut ts)
    }
}

/// The event loop of [`run_phase`], sampling into `ts` when `TS`.
#[inline(never)]
fn drive<const TS: bool>(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    epoch_ps: Ps,
    sets: &super::spray::SpraySets,
    ts: &mut Sampler,
) -> Result<PhaseOutcome, SimError> {
    let nl = rail.links();
    let qps = shape.engine_qps();
    let mut out = PhaseOutcome {
        link_bytes: vec![0; nl],
        uplink_paths: vec![0; rail.leaves * rail.spines],
        ..PhaseOutcome::default()
    };
    let (paths, bound) = engine_paths(rail, run, shape, &mut out.uplink_paths)?;
    out.bound = Some(bound);
    let mut inc = Incidence::new();
    let mut hops = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        hops.push(p.hops);
        if shape.policy == SimPolicy::Spray && p.hops == 6 {
            let c = &run.conns[i / qps];
            let (src, dst) = (c.src as usize, c.dst as usize);
            let via = sets.of(i, rail.spines_between(src, dst));
            inc.push_flow(spread_links(rail, src, dst, p, &via));
        } else if shape.policy == SimPolicy::Spray && p.hops == 4 {
            let c = &run.conns[i / qps];
            let (src, dst) = (c.src as usize, c.dst as usize);
            let via = sets.of(i, rail.spines_between(src, dst));
            let w = 1.0 / via.len() as f64;
            let mut links = vec![(p.links[0], 1.0), (p.links[3], 1.0)];
            for &k in &via {
                let v = rail.path_via(src, dst, k);
                links.push((v.links[1], w));
                links.push((v.links[2], w));
            }
            inc.push_flow(links);
        } else {
            inc.push_flow(p.links().iter().map(|&l| (l, 1.0)));
        }
    }
    let caps: Vec<f64> = (0..nl as u32).map(|l| rail.bytes_per_ps(l)).collect();
    let flows = inc.flows();
    let mut solver = MaxMin::new(&inc, nl);
    let mut paths = paths;
    let mut rates = vec![0.0; flows];
    let mut active = vec![false; flows];
    let mut st: Vec<FlowState> = vec![FlowState::default(); flows];
    for s in &mut st {
        s.ends.reserve(shape.outstanding as usize);
    }
    let mut heap: BinaryHeap<Reverse<(Ps, u32, u32)>> = BinaryHeap::with_capacity(flows);
    // Queues: arrivals over 2, 4 (and 6) hops, then acknowledgements over the same.
    let classes = u32::from(rail.max_hops() / 2);
    let mut core: Core<FSeg> = Core::new(2 * classes as usize);
    let mut wake: Vec<u32> = Vec::with_capacity(run.conns.len());
    let (mut now, mut end_time, mut last_solve): (Ps, Ps, Ps) = (0, 0, 0);
    let (mut must_solve, mut dirty) = (false, false);
    let mut events = 0u64;
    // The rate each QP drains at now (bytes per picosecond; 0 when idle), for the samples.
    let mut now_rate: Vec<f64> = if TS { vec![0.0; flows] } else { Vec::new() };
    loop {
        // Re-hashed stragglers (drained, so idle): the flow takes its new path's links.
        if !run.replace.is_empty() {
            while let Some((c, qp)) = run.replace.pop() {
                let (c, qp) = (c as usize, qp as usize);
                let f = c * qps + qp;
                if let Some(p) = run.rehashed_path(rail, c, qp, qps) {
                    if p.hops == paths[f].hops && shape.policy != SimPolicy::Spray {
                        for (i, &link) in inc.of(f).zip(p.links()) {
                            inc.link[i] = link;
                        }
                        paths[f] = p;
                    }
                }
                run.replaced(c, qp);
            }
            solver = MaxMin::new(&inc, nl);
            must_solve = true;
        }
        std::mem::swap(&mut wake, &mut run.wake);
        for &c in &wake {
            let c = c as usize;
            run.try_post(c, now);
            while let Some(t) = run.transmit(c, now) {
                let f = c * qps + t.qp;
                let s = &mut st[f];
                if active[f] {
                    advance(s, now);
                    s.pushed += u64::from(t.len);
                    s.ends.push_back((s.pushed, t.imm, t.len));
                } else {
                    active[f] = true;
                    s.t_last = now;
                    s.pushed += u64::from(t.len);
                    s.ends.push_back((s.pushed, t.imm, t.len));
                    if epoch_ps > 0 && s.rate > 0.0 {
                        // Back within the coalescing epoch: its last rate until the next solve.
                        s.version = s.version.wrapping_add(1);
                        if let Some(t) = drain_time(s, now) {
                            heap.push(Reverse((t, f as u32, s.version)));
                        }
                        dirty = true;
                    } else {
                        must_solve = true;
                    }
                }
            }
        }
        wake.clear();
        if run.done() {
            // The collective is complete (a background job, if any, is cut off here).
            end_time = end_time.max(now);
            break;
        }
        let next_core = core.peek_time();
        let next_heap = loop {
            match heap.peek() {
                Some(&Reverse((t, f, v))) if v != st[f as usize].version => {
                    let _ = t;
                    heap.pop();
                }
                Some(&Reverse((t, _, _))) => break Some(t),
                None => break None,
            }
        };
        let next = match (next_core, next_heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let advancing = next.is_none_or(|t| t > now);
        if advancing && (must_solve || (dirty && now.saturating_sub(last_solve) >= epoch_ps)) {
            for f in 0..flows {
                if active[f] {
                    advance(&mut st[f], now);
                }
            }
            solver.solve(&inc, &caps, &active, &mut rates);
            heap.clear();
            for f in 0..flows {
                let s = &mut st[f];
                s.version = s.version.wrapping_add(1);
                if active[f] {
                    // An idle QP keeps its last rate: what it resumes with inside an epoch.
                    s.rate = rates[f];
                    if let Some(t) = drain_time(s, now) {
                        heap.push(Reverse((t, f as u32, s.version)));
                    }
                }
            }
            out.solves += 1;
            last_solve = now;
            must_solve = false;
            dirty = false;
            continue;
        }
        let Some(t) = next else { break };
        if TS {
            // Nothing changes before t: the samples up to t see the state now.
            while ts.next <= t {
                sample_all(ts, rail, run, qps, &st, &active, &mut now_rate);
            }
        }
        now = t;
        events += 1;
        if next_heap == Some(t) && next_core.is_none_or(|c| c > t) || next_core.is_none() {
            let Some(Reverse((_, f, _))) = heap.pop() else {
                break;
            };
            let f = f as usize;
            let s = &mut st[f];
            let Some((end, imm, len)) = s.ends.pop_front() else {
                continue;
            };
            s.served = end as f64;
            s.t_last = now;
            let c = f / qps;
            let h = hops[f];
            for i in inc.of(f) {
                out.link_bytes[inc.link[i] as usize] += (f64::from(len) * inc.weight[i]) as u64;
            }
            let seg = FSeg {
                conn: c as u32,
                qp: (f % qps) as u16,
                hops: h,
                imm,
                len,
            };
            core.push_inlined(u32::from(h / 2 - 1), now + rail.one_way_ps(h), seg);
            if s.ends.is_empty() {
                active[f] = false;
                s.version = s.version.wrapping_add(1);
                dirty = true;
            } else if let Some(t) = drain_time(s, now) {
                heap.push(Reverse((t, f as u32, s.version)));
            }
        } else {
            let Some((_, q, seg)) = core.pop_inlined() else {
                break;
            };
            if q < classes {
                if TS {
                    ts.delivered(seg.conn as usize * qps + usize::from(seg.qp), seg.len);
                }
                run.on_arrival(seg.conn as usize, seg.imm, seg.len, now);
                core.push_inlined(classes + q, now + rail.one_way_ps(seg.hops), seg);
            } else {
                run.on_ack(seg.conn as usize, seg.qp as usize, now);
            }
        }
    }
    if TS {
        // The phase's final counts, at the first sample time after it ended.
        sample_all(ts, rail, run, qps, &st, &active, &mut now_rate);
        out.timeseries = std::mem::take(&mut ts.rows);
    }
    out.time_ps = end_time;
    out.events = events + core.events;
    Ok(out)
}

/// One sample at `ts.next`: every data QP with its fluid rate (0 while it has nothing queued).
fn sample_all(
    ts: &mut Sampler,
    rail: &Rail,
    run: &PhaseRun,
    qps: usize,
    st: &[FlowState],
    active: &[bool],
    now_rate: &mut [f64],
) {
    for (f, r) in now_rate.iter_mut().enumerate() {
        *r = if active[f] { st[f].rate } else { 0.0 };
    }
    ts.qp_rows(rail, run, qps, Some(now_rate));
    ts.advance();
}

/// Brings a busy flow's drained byte count to `now` at its current rate.
#[inline]
fn advance(s: &mut FlowState, now: Ps) {
    if let Some(&(end, _, _)) = s.ends.front() {
        let served = s.served + s.rate * (now - s.t_last) as f64;
        s.served = served.min(end as f64);
    }
    s.t_last = now;
}

/// When the head segment of a busy flow is drained at the flow's rate.
#[inline]
fn drain_time(s: &FlowState, now: Ps) -> Option<Ps> {
    let &(end, _, _) = s.ends.front()?;
    let left = (end as f64 - s.served).max(0.0);
    if left == 0.0 {
        return Some(now);
    }
    if s.rate <= 0.0 {
        return None;
    }
    Some(now + (left / s.rate).ceil() as Ps)
}

/// Fluid spray over a third tier: the flow's share of every link of its paths `via` between its
/// pods (uniform over them), each link once with its summed weight, first-use order.
fn spread_links(
    rail: &Rail,
    src: usize,
    dst: usize,
    p: &super::topology::Path,
    via: &[usize],
) -> Vec<(u32, f64)> {
    let w = 1.0 / via.len() as f64;
    let mut links = vec![(p.links[0], 1.0), (p.links[5], 1.0)];
    for &k in via {
        let v = rail.path_via(src, dst, k);
        for &l in &v.links[1..5] {
            match links[2..].iter_mut().find(|e| e.0 == l) {
                Some(e) => e.1 += w,
                None => links.push((l, w)),
            }
        }
    }
    links
}
