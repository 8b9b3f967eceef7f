//! P mode: every engine segment is cut into MTU packets, paced per QP by DCQCN, queued per switch
//! egress with ECN marking (and drops, loss.rs); receivers return CNPs; a segment lands whole.

// Event queues of the core (each pushed in time order): one per link (the switch egress FIFOs;
// a host's up link is driven by its NIC instead), one per host for packet arrivals, two for the
// acknowledgements and two for the CNPs (2- and 4-hop paths: each is pushed at now + a constant
// of its queue). The NIC transmitters and the staggered connection starts use a small timer heap
// with at most one live entry per host (and one per connection start), not one per packet.
// Hops are cut-through as in B mode. Buffers are lossless and unbounded unless `--buffer-kb`
// makes them finite (loss.rs: tail drop, go-back-N): without PFC a queue without ECN grows
// until the engine's window stops its senders. With PFC, every switch counts
// per ingress link the bytes that link sent and the switch has not forwarded yet (the wire's
// included); past Xoff it sends a pause to the link's sender, at Xon a resume, each arriving one
// hop latency later (one more core queue). A paused switch egress holds its head packet in the
// core (`Core::hold`/`release`), a paused NIC sends nothing. CNPs and ACKs are not queued on the
// reverse links (they are small and in a high-priority class); each takes its path's hop
// latencies.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::bmode::{engine_paths, spray_sets, PhaseOutcome};
use super::conn::{ConnShape, PhaseRun, SimPolicy};
use super::error::SimError;
use super::events::Core;
use super::loss::{ack_timeout_ps, acked, in_flight, rewind, Buffers, Recovery};
use super::nic::{Nics, Pick};
use super::packet::{PacketSpec, PacketSummary};
use super::pfc::Pfc;
use super::rng::Rng;
use super::switchq::{backlog, SwitchQueues};
use super::timeseries::{TsKind, TsRow};
use super::topology::{LinkKind, Path, Ps, Rail};

#[derive(Debug, Clone, Copy, Default)]
struct Pkt {
    seg: u32,
    /// Global QP index: conn * qps + qp.
    qp: u32,
    len: u32,
    hop: u8,
    ecn: bool,
    /// Its QP's packet sequence number.
    psn: u32,
    /// When its last byte left the previous hop.
    tail: Ps,
    /// The queue's byte stamp when it was queued (switchq.rs).
    cum: u64,
    path: Path,
}

#[derive(Debug, Clone, Copy, Default)]
struct PSeg {
    conn: u32,
    qp: u16,
    imm: u32,
    len: u32,
    npkts: u32,
    delivered: u32,
    hops: u8,
    /// PSN of its first packet on its QP.
    first_psn: u32,
}

/// A slab with a free list: ids stay valid until freed, freed slots are reused.
struct Slab<T: Copy> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    fn with_capacity(n: usize) -> Self {
        Slab {
            items: Vec::with_capacity(n),
            free: Vec::with_capacity(n),
        }
    }

    #[inline]
    fn insert(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = v;
                i
            }
            None => {
                self.items.push(v);
                (self.items.len() - 1) as u32
            }
        }
    }
}

const TIMER_NONE: Ps = Ps::MAX;

/// Runs one phase in P mode; `rng` draws ECN marks and spray choices.
pub(crate) fn run_phase(
    rail: &Rail,
    run: &mut PhaseRun,
    shape: &ConnShape,
    spec: &PacketSpec,
    phase_index: usize,
    rng: &mut Rng,
) -> Result<(PhaseOutcome, PacketSummary), SimError> {
    spec.validate()?;
    let nl = rail.links() as u32;
    let hosts = rail.hosts as u32;
    let arr_q = nl;
    // Per path length (2, 4, with a third tier 6 hops): one ack and one CNP queue.
    let classes = u32::from(rail.max_hops() / 2);
    let ack_q = nl + hosts;
    let cnp_q = ack_q + classes;
    let pfc_q = cnp_q + classes;
    // NAKs back to the sender, one queue per path length (lossy runs only).
    let nak_q = pfc_q + 2;
    let lat = rail.hop_latency_ps;
    let qps = shape.engine_qps();
    let mut out = PhaseOutcome {
        link_bytes: vec![0; nl as usize],
        uplink_paths: vec![0; rail.leaves * rail.spines],
        ..PhaseOutcome::default()
    };
    let (mut paths, bound) = engine_paths(rail, run, shape, &mut out.uplink_paths)?;
    out.bound = Some(bound);
    let spray = shape.policy == SimPolicy::Spray;
    let lossy = spec.loss.lossy();
    if lossy && spray {
        return Err(SimError::config("--buffer-kb with spray: a spraying NIC places packets out of order, and its loss recovery is not modelled"));
    }
    let sets = spray_sets(rail, run, shape, rng);
    let rto = ack_timeout_ps(spec.loss.ib_timeout);
    let mut bufs = Buffers::new(spec.loss.buffer_bytes, nl as usize);
    let mut rec = Recovery::default();
    let mut naks: Slab<(u32, u32)> = Slab::with_capacity(if lossy { 1024 } else { 0 });
    let nconn = run.conns.len();
    // Timer ids: a host's transmitter, then connection starts, then QP ACK timers.
    let qp_timer = hosts + nconn as u32;
    let owner: Vec<u32> = (0..nconn * qps).map(|g| run.conns[g / qps].src).collect();
    let line_mbps = 8e6 / rail.ps_per_byte[0];
    let depth = shape.outstanding as usize;
    let mut nics = Nics::new(rail.hosts, &owner, &spec.rp, line_mbps, depth);
    let mtu = spec.mtu;
    let seg_pkts = shape.segment_bytes.div_ceil(mtu).max(1) as usize;
    let window = (nconn * qps * depth).min(1 << 20);
    let mut segs: Slab<PSeg> = Slab::with_capacity(window);
    let mut pkts: Slab<Pkt> = Slab::with_capacity((window * seg_pkts).min(1 << 20));
    // PFC frames: over one hop (pfc_q), and back over a DC interconnect span (pfc_q + 1).
    let mut core: Core<u32> = Core::new((nak_q + classes) as usize);
    let mut pfc = Pfc::new(spec.pfc, nl as usize);
    for q in ack_q..cnp_q + classes {
        core.reserve(q, window.min(1 << 16));
    }
    let mut sq = SwitchQueues::new(nl as usize);
    let mut timers: BinaryHeap<Reverse<(Ps, u32)>> = BinaryHeap::with_capacity(rail.hosts + 16);
    let mut started = vec![true; nconn];
    if spec.stagger_ps > 0 {
        run.wake.clear();
        for (c, s) in started.iter_mut().enumerate() {
            let t = c as Ps * spec.stagger_ps;
            if t == 0 {
                run.wake.push(c as u32);
            } else {
                *s = false;
                timers.push(Reverse((t, hosts + c as u32)));
            }
        }
    }
    let mut series: Vec<TsRow> = Vec::new();
    let mut next_sample: Ps = if spec.sample_ps > 0 { 0 } else { Ps::MAX };
    let mut wake: Vec<u32> = Vec::with_capacity(nconn);
    let mut now: Ps = 0;
    let mut timer_events: u64 = 0;
    // A PFC frame goes back over the link it pauses: one hop, or the span of a DC interconnect
    // (its own queue, so each queue's pushes stay in time order).
    let pfc_route = |l: u32| {
        let back = rail.lat_out(l);
        (if back == lat { pfc_q } else { pfc_q + 1 }, back)
    };
    let ser_ps =
        |link: u32, len: u32| (f64::from(len) * rail.ps_per_byte[link as usize]).ceil() as Ps;
    loop {
        // Re-hashed stragglers: new QPNs, new path, back into the engine.
        run.rehash_pending(rail, &mut paths, qps);
        std::mem::swap(&mut wake, &mut run.wake);
        for &c in &wake {
            let c = c as usize;
            if !started[c] {
                continue;
            }
            run.try_post(c, now);
            while let Some(t) = run.transmit(c, now) {
                let conn = &run.conns[c];
                let g = c * qps + t.qp;
                let q = &mut nics.qps[g];
                let npkts = t.len.div_ceil(mtu).max(1);
                let id = segs.insert(PSeg {
                    conn: c as u32,
                    qp: t.qp as u16,
                    imm: t.imm,
                    len: t.len,
                    npkts,
                    delivered: 0,
                    hops: paths[g].hops,
                    first_psn: q.next_psn,
                });
                q.next_psn += npkts;
                q.segs.push_back(id);
                // Not at `q.next_ok`: a QP idle since a cut holds an opening its old rate set;
                // the transmitter's pick brings it to the current rate (nic.rs).
                let at = now.max(nics.free_at[conn.src as usize]);
                if nics.want_wake(conn.src, at) {
                    timers.push(Reverse((at, conn.src)));
                }
            }
        }
        wake.clear();
        if run.done() {
            break;
        }
        let tc = core.peek_time();
        let tt = timers.peek().map(|r| r.0 .0);
        let t = match (tc, tt) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        while next_sample <= t {
            sample(
                next_sample,
                rail,
                phase_index,
                run,
                qps,
                &mut nics,
                &core,
                &pkts.items,
                &sq,
                &pfc.pauses,
                &bufs.drops,
                &out.link_bytes,
                &mut series,
            );
            next_sample += spec.sample_ps;
        }
        if tt == Some(t) {
            let Some(Reverse((t, id))) = timers.pop() else {
                break;
            };
            now = t;
            timer_events += 1;
            if id >= qp_timer {
                // A QP's local ACK timer: resend from the first PSN its receiver lacks when
                // nothing was acknowledged for the timeout.
                let g = (id - qp_timer) as usize;
                let q = &mut nics.qps[g];
                match in_flight(q) {
                    false => q.timer_armed = false,
                    true if q.progress_at + rto > now => {
                        timers.push(Reverse((q.progress_at + rto, id)));
                    }
                    true => {
                        rec.timeouts += 1;
                        let psn = q.expect_psn;
                        q.progress_at = now;
                        timers.push(Reverse((now + rto, id)));
                        go_back(
                            &mut nics,
                            &mut timers,
                            owner[g],
                            g,
                            psn,
                            mtu,
                            &segs.items,
                            now,
                        );
                    }
                }
                continue;
            }
            if id >= hosts {
                let c = (id - hosts) as usize;
                started[c] = true;
                run.wake.push(c as u32);
                continue;
            }
            let h = id;
            if nics.wake_at[h as usize] != t {
                continue; // superseded by an earlier wake
            }
            nics.wake_at[h as usize] = TIMER_NONE;
            if pfc.is_paused(rail.host_up(h as usize)) {
                continue; // the resume wakes it
            }
            if nics.free_at[h as usize] > now {
                let f = nics.free_at[h as usize];
                if nics.want_wake(h, f) {
                    timers.push(Reverse((f, h)));
                }
                continue;
            }
            match nics.pick(h, now) {
                Pick::Idle => {}
                Pick::Wait(w) => {
                    if nics.want_wake(h, w) {
                        timers.push(Reverse((w, h)));
                    }
                }
                Pick::Send(g) => {
                    let q = &mut nics.qps[g as usize];
                    let Some(&sid) = q.segs.front() else { continue };
                    let s = segs.items[sid as usize];
                    let len = (s.len - q.off).min(mtu);
                    let psn = s.first_psn + q.off / mtu;
                    if lossy {
                        // The ACK timer counts from the oldest packet in flight.
                        if !in_flight(q) {
                            q.progress_at = now;
                        }
                        if !q.timer_armed {
                            q.timer_armed = true;
                            timers.push(Reverse((now + rto, qp_timer + g)));
                        }
                    }
                    q.off += len;
                    if q.off >= s.len {
                        q.segs.pop_front();
                        q.off = 0;
                        if lossy {
                            q.wire.push_back(sid);
                        }
                    }
                    q.sent(now, len);
                    rec.sent += 1;
                    if psn < q.high_psn {
                        rec.resent += 1;
                        q.resent += 1;
                    } else {
                        q.high_psn = psn + 1;
                    }
                    let c = s.conn as usize;
                    let path = if spray {
                        let conn = &run.conns[c];
                        let n = rail.spines_between(conn.src as usize, conn.dst as usize);
                        let k = if n > 1 {
                            sets.pick(g as usize, n, rng)
                        } else {
                            0
                        };
                        rail.path_via(conn.src as usize, conn.dst as usize, k)
                    } else {
                        paths[g as usize]
                    };
                    let up = path.links[0];
                    let end = now + ser_ps(up, len);
                    out.link_bytes[up as usize] += u64::from(len);
                    nics.free_at[h as usize] = end;
                    let next = path.links[1];
                    let admitted = !lossy
                        || bufs.admit(
                            next,
                            now + lat,
                            len,
                            sq.cum[next as usize],
                            ser_ps(next, len),
                            end + rail.lat_out(up),
                        );
                    if admitted {
                        let cum = sq.enqueue(next, len);
                        if pfc.add(up, len) {
                            core.push(pfc_q, now + lat, up << 1);
                        }
                        let pid = pkts.insert(Pkt {
                            seg: sid,
                            qp: g,
                            len,
                            hop: 1,
                            ecn: false,
                            psn,
                            tail: end,
                            cum,
                            path,
                        });
                        core.push(next, now + lat, pid);
                    } else {
                        nics.qps[g as usize].drops += 1;
                    }
                    if nics.want_wake(h, end) {
                        timers.push(Reverse((end, h)));
                    }
                }
            }
            continue;
        }
        let Some((t, q, id)) = core.pop() else { break };
        now = t;
        if q < nl {
            // A switch egress serves its head packet (unless PFC paused it).
            if pfc.is_paused(q) {
                core.hold(q, id);
                pfc.held[q as usize] = true;
                continue;
            }
            let p = pkts.items[id as usize];
            let from = p.path.links[p.hop as usize - 1];
            if pfc.forwarded(from, p.len) {
                let (fq, back) = pfc_route(from);
                core.push(fq, now + back, (from << 1) | 1);
            }
            let last = core.last_due(q, now).map(|j| pkts.items[j as usize].cum);
            let b = backlog(p.cum, p.len, last);
            let qi = q as usize;
            sq.max_bytes[qi] = sq.max_bytes[qi].max(b);
            sq.packets[qi] += 1;
            let mut ecn = p.ecn;
            if !ecn && spec.ecn.mark(b, rng) {
                ecn = true;
                sq.marks[qi] += 1;
            }
            let end = (now + ser_ps(q, p.len)).max(p.tail + rail.lat_out(from));
            core.set_not_before(q, end);
            out.link_bytes[qi] += u64::from(p.len);
            out.max_queue = out.max_queue.max(core.len(q) + 1);
            let hop = p.hop + 1;
            if hop < p.path.hops {
                let next = p.path.links[hop as usize];
                let at = now + rail.lat_out(q);
                if lossy
                    && !bufs.admit(
                        next,
                        at,
                        p.len,
                        sq.cum[next as usize],
                        ser_ps(next, p.len),
                        end + rail.lat_out(q),
                    )
                {
                    nics.qps[p.qp as usize].drops += 1;
                    pkts.free.push(id);
                    continue;
                }
                let pm = &mut pkts.items[id as usize];
                pm.ecn = ecn;
                pm.tail = end;
                pm.hop = hop;
                pm.cum = sq.enqueue(next, p.len);
                core.push(next, at, id);
                if pfc.add(q, p.len) {
                    let (fq, back) = pfc_route(q);
                    core.push(fq, now + back, q << 1);
                }
            } else {
                let pm = &mut pkts.items[id as usize];
                pm.ecn = ecn;
                pm.tail = end;
                pm.hop = hop;
                // The receiver from the QP, not the segment: a resent copy may outlive it.
                core.push(arr_q + run.conns[p.qp as usize / qps].dst, end + lat, id);
            }
        } else if q < ack_q {
            // The packet reached its receiver NIC.
            let p = pkts.items[id as usize];
            pkts.free.push(id);
            let back = rail.one_way_ps(p.path.hops);
            let class = u32::from(p.path.hops / 2 - 1);
            if p.ecn {
                let qp = &mut nics.qps[p.qp as usize];
                qp.marked += 1;
                if qp
                    .np_last_cnp
                    .is_none_or(|l| now >= l + spec.cnp_interval_ps)
                {
                    qp.np_last_cnp = Some(now);
                    core.push(cnp_q + class, now + back, p.qp);
                }
            }
            if lossy {
                // Go-back-N: only the next expected PSN is taken; the first packet past a gap
                // returns one NAK, the rest (and copies already received) are discarded.
                let qp = &mut nics.qps[p.qp as usize];
                if p.psn != qp.expect_psn {
                    rec.discarded += 1;
                    if p.psn > qp.expect_psn && !qp.nak_sent {
                        qp.nak_sent = true;
                        rec.naks += 1;
                        let n = naks.insert((p.qp, qp.expect_psn));
                        core.push(nak_q + class, now + back, n);
                    }
                    continue;
                }
                qp.expect_psn += 1;
                qp.nak_sent = false;
                // Its acknowledgement reaches the sender one return trip later.
                qp.progress_at = qp.progress_at.max(now + back);
            }
            let s = &mut segs.items[p.seg as usize];
            s.delivered += 1;
            if s.delivered == s.npkts {
                let s = *s;
                run.on_arrival(s.conn as usize, s.imm, s.len, now);
                core.push(ack_q + u32::from(s.hops / 2 - 1), now + back, p.seg);
            }
        } else if q < cnp_q {
            let s = segs.items[id as usize];
            segs.free.push(id);
            if lossy {
                let qp = &mut nics.qps[s.conn as usize * qps + s.qp as usize];
                qp.progress_at = now;
                acked(qp, id);
            }
            run.on_ack(s.conn as usize, s.qp as usize, now);
        } else if q >= nak_q {
            // A NAK reached the sender: go back to the PSN it names.
            let (g, psn) = naks.items[id as usize];
            naks.free.push(id);
            let g = g as usize;
            nics.qps[g].progress_at = now;
            go_back(
                &mut nics,
                &mut timers,
                owner[g],
                g,
                psn,
                mtu,
                &segs.items,
                now,
            );
        } else if q == pfc_q || q == pfc_q + 1 {
            // A pause or resume frame reached the sender of link `l`.
            let (l, resume) = (id >> 1, id & 1 == 1);
            let li = l as usize;
            if !resume {
                pfc.paused[li] = true;
                pfc.pauses[li] += 1;
            } else {
                pfc.paused[li] = false;
                if rail.kind(l) == LinkKind::HostUp {
                    let h = l; // host h's up link has id h
                    let at = now.max(nics.free_at[h as usize]);
                    if nics.want_wake(h, at) {
                        timers.push(Reverse((at, h)));
                    }
                } else if pfc.held[li] {
                    pfc.held[li] = false;
                    core.release(l, now);
                }
            }
        } else {
            let g = id as usize;
            nics.qps[g].cnp(now);
            let h = owner[g];
            // The pick decides when to send (at the opening or at the next increase timer).
            let at = now.max(nics.free_at[h as usize]);
            if !nics.qps[g].segs.is_empty() && nics.want_wake(h, at) {
                timers.push(Reverse((at, h)));
            }
        }
    }
    if spec.sample_ps > 0 {
        sample(
            now,
            rail,
            phase_index,
            run,
            qps,
            &mut nics,
            &core,
            &pkts.items,
            &sq,
            &pfc.pauses,
            &bufs.drops,
            &out.link_bytes,
            &mut series,
        );
    }
    out.time_ps = now;
    out.events = core.events + timer_events;
    let mut sum = PacketSummary {
        packets: sq.packets.iter().sum::<u64>(),
        ecn_marks: sq.marks.iter().sum(),
        max_queue_bytes: sq.max_bytes.iter().copied().max().unwrap_or(0),
        pfc_pauses: pfc.pauses.iter().sum(),
        max_ingress_bytes: pfc.max_ingress,
        sent_packets: rec.sent,
        drops: bufs.drops.iter().sum(),
        resent_packets: rec.resent,
        naks: rec.naks,
        ack_timeouts: rec.timeouts,
        discarded: rec.discarded,
        timeseries: series,
        ..PacketSummary::default()
    };
    for q in &nics.qps {
        let (cuts, ignored) = q.rp.cnp_counts();
        sum.cnps += q.cnps;
        sum.rate_cuts += cuts;
        sum.cnps_ignored += ignored;
    }
    Ok((out, sum))
}

/// Go-back-N at the sender (a NAK or an ACK timeout): QP `g` of host `h` resends from `psn`,
/// and the host's transmitter wakes for it.
#[allow(clippy::too_many_arguments)]
fn go_back(
    nics: &mut Nics,
    timers: &mut BinaryHeap<Reverse<(Ps, u32)>>,
    h: u32,
    g: usize,
    psn: u32,
    mtu: u32,
    segs: &[PSeg],
    now: Ps,
) {
    let q = &mut nics.qps[g];
    rewind(q, psn, mtu, |s| {
        let x = &segs[s as usize];
        (x.first_psn, x.npkts)
    });
    let at = now.max(nics.free_at[h as usize]);
    if nics.want_wake(h, at) {
        timers.push(Reverse((at, h)));
    }
}

/// One time-series sample at `t`: every data QP, and every switch egress that carried bytes.
#[allow(clippy::too_many_arguments)]
fn sample(
    t: Ps,
    rail: &Rail,
    phase: usize,
    run: &PhaseRun,
    qps: usize,
    nics: &mut Nics,
    core: &Core<u32>,
    pkts: &[Pkt],
    sq: &SwitchQueues,
    pauses: &[u64],
    drops: &[u64],
    link_bytes: &[u64],
    rows: &mut Vec<TsRow>,
) {
    let base = TsRow::blank(t, rail.index as u32, phase as u32);
    for (g, q) in nics.qps.iter_mut().enumerate() {
        // Applying the timers due by t now is what the next send would do first anyway.
        q.rp.advance_to(t / 1000);
        let (c, k) = (g / qps, g % qps);
        rows.push(TsRow {
            id: c as u32,
            qp: k as u32,
            rate_gbps: q.rp.rate_mbps() / 1000.0,
            outstanding: run.conns[c].sender.qp_stats()[k].outstanding,
            bytes: q.bytes,
            ecn_marks: q.marked,
            cnps: q.cnps,
            drops: q.drops,
            resent: q.resent,
            ..base
        });
    }
    for (l, &b) in link_bytes.iter().enumerate() {
        let kind = rail.kind(l as u32);
        // NIC up links have no queue: listed only under PFC (their pauses), once they sent.
        let listed = if kind == LinkKind::HostUp {
            !pauses.is_empty() && b > 0
        } else {
            sq.cum[l] > 0
        };
        if !listed {
            continue;
        }
        let q = l as u32;
        let depth = match core.front(q) {
            Some((ft, head)) if ft <= t => {
                let last = core.last_due(q, t).map(|j| pkts[j as usize].cum);
                let h = &pkts[head as usize];
                backlog(h.cum, h.len, last)
            }
            _ => 0,
        };
        rows.push(TsRow {
            kind: TsKind::Link(kind),
            id: q,
            bytes: b,
            queue_bytes: depth,
            ecn_marks: sq.marks[l],
            pfc_pauses: pauses.get(l).copied().unwrap_or(0),
            drops: drops.get(l).copied().unwrap_or(0),
            ..base
        });
    }
}
