//! One phase's connections, each a real engine `Sender`/`Receiver` pair, and the traffic rules
//! that feed them: ring and tree dependencies, NCCL's receive slots, exactly-once in-order checks.

use dqplb_engine::{
    DepthRule, EngineParams, PathEvent, PolicyKind, Receiver, RehashRule, RepinPath, RepinRule,
    Sender, Transmit,
};

use super::error::SimError;
use super::latency::LatencyHist;
use super::pin::{self, QpEnd};
use super::topology::{Path, Rail};
use super::traffic::Phase;

/// How a connection's segments find their path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPolicy {
    /// An engine policy; each QP keeps the path its 5-tuple hashes to.
    Engine(PolicyKind),
    /// Per-packet spraying, a NIC mode: the engine runs dqplb over the QPs, and every segment
    /// (B mode) or every byte (F mode) is spread over all spines of the ECMP group.
    Spray,
    /// DQPLB with the engine's straggler re-hash rule: a drained straggler QP is replaced by a
    /// QP with new QPNs, hence a new source port and a new ECMP path.
    DqplbRehash,
    /// dqplb-led (least expected delay) with the same re-hash rule.
    DqplbLedRehash,
    /// An oracle, not a policy a NIC can run: each connection splits its bytes over its q
    /// hashed paths as the split bound's greedy does (bound.rs), knowing every connection's
    /// paths. The engine runs a static split over [`LP_SLICES`] sub-QPs, slice r of each message
    /// on sub-QP r, which takes the path the bound gave slice r. Shows whether the bound can be
    /// reached under the mode's dynamics.
    LpSplit,
    /// Stock NCCL's net_ib on the same fabric: each channel's connection has
    /// NCCL_IB_QPS_PER_CONNECTION QPs (`--nccl-qps`, NCCL's default 1) and puts a whole message
    /// on one QP, rotating per message (NCCL_IB_SPLIT_DATA_ON_QPS=0, NCCL's default), or splits
    /// each message evenly over them (`split`, NCCL_IB_SPLIT_DATA_ON_QPS=1); every message
    /// (NCCL step) is one RDMA write of up to NCCL_STEPS in flight. Run it with `--channels`
    /// (the command line's default for it: 2, NCCL's duplicated ring channels).
    Nccl { split: bool },
}

/// Sub-QPs of an `lp-split` connection: one per slice of the bound's greedy split.
pub(crate) const LP_SLICES: usize = super::bound::ROUNDS;

impl SimPolicy {
    pub fn parse(s: &str) -> Result<SimPolicy, String> {
        if s.trim().eq_ignore_ascii_case("spray") {
            return Ok(SimPolicy::Spray);
        }
        if s.trim().eq_ignore_ascii_case("dqplb-rehash") {
            return Ok(SimPolicy::DqplbRehash);
        }
        if s.trim().eq_ignore_ascii_case("dqplb-led-rehash") {
            return Ok(SimPolicy::DqplbLedRehash);
        }
        if s.trim().eq_ignore_ascii_case("lp-split") {
            return Ok(SimPolicy::LpSplit);
        }
        if s.trim().eq_ignore_ascii_case("nccl") {
            return Ok(SimPolicy::Nccl { split: false });
        }
        if s.trim().eq_ignore_ascii_case("nccl-split") {
            return Ok(SimPolicy::Nccl { split: true });
        }
        s.parse::<PolicyKind>().map(SimPolicy::Engine).map_err(|e| {
            format!("{e}, spray, dqplb-rehash, dqplb-led-rehash, lp-split, nccl, nccl-split")
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Engine(k) => k.name(),
            SimPolicy::Spray => "spray",
            SimPolicy::DqplbRehash => "dqplb-rehash",
            SimPolicy::DqplbLedRehash => "dqplb-led-rehash",
            SimPolicy::LpSplit => "lp-split",
            SimPolicy::Nccl { split: false } => "nccl",
            SimPolicy::Nccl { split: true } => "nccl-split",
        }
    }

    pub(crate) fn engine_policy(self) -> PolicyKind {
        match self {
            SimPolicy::Engine(k) => k,
            SimPolicy::Spray | SimPolicy::DqplbRehash => PolicyKind::Dqplb,
            SimPolicy::DqplbLedRehash => PolicyKind::DqplbLed,
            SimPolicy::LpSplit => PolicyKind::StaticSplit,
            SimPolicy::Nccl { split: false } => PolicyKind::RoundRobinMessage,
            SimPolicy::Nccl { split: true } => PolicyKind::StaticSplit,
        }
    }

    /// The engine's straggler re-hash rule is installed.
    pub fn rehashes(self) -> bool {
        matches!(self, SimPolicy::DqplbRehash | SimPolicy::DqplbLedRehash)
    }
}

/// Engine shape of every connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnShape {
    pub policy: SimPolicy,
    pub qps: usize,
    pub outstanding: u32,
    pub segment_bytes: u32,
    /// Installed under [`SimPolicy::DqplbRehash`] and [`SimPolicy::DqplbLedRehash`] (times in
    /// picoseconds).
    pub rehash: RehashRule,
    /// The engine's depth rule (`--depth-ratio`, `--depth-raised`, `--depth-hold`), on every
    /// engine policy when set.
    pub depth: Option<DepthRule>,
    /// The depth rule's trial re-pins (`--repin-ratio`, `--repin-persist`, `--repin-settle`,
    /// `--repin-budget`), where the depth rule is installed.
    pub repin: Option<RepinRule>,
}

impl ConnShape {
    /// Data QPs of each connection's engine: `qps`, or [`LP_SLICES`] sub-QPs under `lp-split`
    /// (which still hashes `qps` QPs, with the QPNs any q-QP policy has).
    pub(crate) fn engine_qps(&self) -> usize {
        if self.policy == SimPolicy::LpSplit {
            LP_SLICES
        } else {
            self.qps
        }
    }
}

/// The simulator's default re-hash rule: 2x the median for 16 completions, 50 us apart, at most
/// 4 per millisecond per connection (the plugin's defaults are sized for seconds-long jobs).
pub const SIM_REHASH: RehashRule = RehashRule {
    ratio: 2.0,
    window: 16,
    cooldown: 50_000_000,
    budget: 4,
    budget_period: 1_000_000_000,
};

/// The depth rule `--depth-ratio`, `--depth-raised` or `--depth-hold` start from: 1.5x the
/// median, 3 segments per QP, back after 4 calm checks.
pub const SIM_DEPTH: DepthRule = DepthRule {
    ratio: 1.5,
    raised: 3,
    hold: 4,
};

/// The re-pin rule any `--repin-*` option starts from: the same QP the slowest at 1.3 x the
/// median for 6 checks, judged after 16 completions on its new path, 16 moves per connection.
pub const SIM_REPIN: RepinRule = RepinRule {
    ratio: 1.3,
    persist: 6,
    settle: 16,
    budget: 16,
};

/// Counts of things that must stay zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Errors {
    /// `EngineError` from post/completed (misuse: a simulator bug).
    pub engine: u64,
    /// `ProtocolError` from `Receiver::arrived`.
    pub protocol: u64,
    /// A token released out of order, twice, or with the wrong size.
    pub order: u64,
}

impl Errors {
    pub fn add(&mut self, o: &Errors) {
        self.engine += o.engine;
        self.protocol += o.protocol;
        self.order += o.order;
    }

    pub fn total(&self) -> u64 {
        self.engine + self.protocol + self.order
    }
}

/// One connection: `src` -> `dst` on the rail, with its engine pair and traffic counters.
#[derive(Debug)]
pub struct Conn {
    pub src: u32,
    pub dst: u32,
    pub sender: Sender,
    pub receiver: Receiver,
    /// Messages posted (to both sides), received in order, slots freed, released by the sender.
    pub posted: u32,
    pub received: u32,
    pub freed: u32,
    pub sent_done: u32,
    /// First QPN of this connection's data QPs on the sender and on the receiver NIC.
    pub lqpn: u32,
    pub rqpn: u32,
    /// NCCL channel of the connection (0 ..= `--channels` - 1).
    pub channel: u32,
}

/// A phase in progress: its connections and the rules between them.
#[derive(Debug)]
pub struct PhaseRun<'a> {
    pub phase: &'a Phase,
    pub conns: Vec<Conn>,
    pub errors: Errors,
    /// Connections whose every message was received and released by the sender.
    pub finished: u32,
    /// Conns to look at after the current event (post what the rules allow, transmit).
    pub wake: Vec<u32>,
    max_messages: usize,
    messages: u32,
    /// Connections of the collective; those after them are the background job's.
    fg: usize,
    pub delivered_messages: u64,
    /// The rail's QPN allocators (re-hashed QPs take new QPNs).
    qpn_next: &'a mut [u32],
    /// Drained stragglers waiting for a new path: (connection, QP).
    pub replace: Vec<(u32, u16)>,
    pub rehashes: u64,
    /// Post time of each message held, `conn * max_messages + message % max_messages`.
    posted_at: Vec<u64>,
    /// Post-to-release latency of every message.
    pub latency: LatencyHist,
    /// Every hashed QP's (source port, destination QPN), `c * qps + k` (pin.rs; set with the
    /// paths, updated by a re-pin).
    pub ends: Vec<QpEnd>,
    /// Ends of QPs the re-pin rule moved, before their latest move (`c * qps + k`).
    pub before_move: std::collections::HashMap<usize, QpEnd>,
}

impl<'a> PhaseRun<'a> {
    /// Connections for `phase`; `qpn_next[h]` is host h's QPN allocator on this rail (1 control
    /// and `qps` data QPs per connection end, consecutive, as a fresh NIC hands them out).
    pub fn new(
        phase: &'a Phase,
        shape: &ConnShape,
        qpn_next: &'a mut [u32],
    ) -> Result<PhaseRun<'a>, SimError> {
        // A ring rank holds a step's messages until it reduced them into its next step, which
        // needs a slot of its own: one slot cannot do both.
        let least = if phase.ring && phase.steps > 1 { 2 } else { 1 };
        if phase.slots < least {
            return Err(SimError::Config(format!(
                "--slots {}: at least {least} for this traffic",
                phase.slots
            )));
        }
        if shape.repin.is_some() && shape.depth.is_none() {
            return Err(SimError::Config(
                "--repin-*: the re-pin rule runs on the depth rule (--depth-ratio, \
                 --depth-raised or --depth-hold)"
                    .into(),
            ));
        }
        let max_messages = 2 * phase.slots as usize + 8;
        // NCCL keeps up to NCCL_STEPS messages in flight per connection whatever its QPs: the
        // slots bind, not a per-QP depth.
        let outstanding = match shape.policy {
            SimPolicy::Nccl { .. } => shape.outstanding.max(phase.slots),
            _ => shape.outstanding,
        };
        let params = EngineParams {
            qps: shape.engine_qps(),
            max_outstanding: outstanding,
            segment_bytes: shape.segment_bytes,
            max_messages,
            policy: shape.policy.engine_policy(),
        };
        params.validate()?;
        // lp-split's engine runs sub-QPs, but the q QPs it hashes (and splits over, by index in
        // a byte) must be a count the engine accepts too.
        EngineParams {
            qps: shape.qps,
            ..params
        }
        .validate()?;
        let window = params.window() as u32;
        let mut conns = Vec::with_capacity(phase.pairs.len());
        let step = shape.qps as u32 + 1;
        for (i, &(src, dst)) in phase.pairs.iter().chain(&phase.bg_pairs).enumerate() {
            let lqpn = qpn_next[src as usize] + 1;
            qpn_next[src as usize] = (qpn_next[src as usize] + step) & 0xFF_FFFF;
            let rqpn = qpn_next[dst as usize] + 1;
            qpn_next[dst as usize] = (qpn_next[dst as usize] + step) & 0xFF_FFFF;
            let mut sender = Sender::new(&params)?;
            if shape.policy.rehashes() {
                sender.set_rehash_rule(shape.rehash)?;
            }
            if let (
                Some(rule),
                SimPolicy::Engine(_) | SimPolicy::DqplbRehash | SimPolicy::DqplbLedRehash,
            ) = (shape.depth, shape.policy)
            {
                sender.set_depth_rule(rule)?;
                if let Some(repin) = shape.repin {
                    sender.set_repin_rule(repin)?;
                }
            }
            conns.push(Conn {
                src,
                dst,
                sender,
                receiver: Receiver::new(window, max_messages)?,
                posted: 0,
                received: 0,
                freed: 0,
                sent_done: 0,
                lqpn,
                rqpn,
                channel: phase.channel_of(i),
            });
        }
        let n = conns.len();
        Ok(PhaseRun {
            phase,
            conns,
            errors: Errors::default(),
            finished: 0,
            wake: (0..n as u32).collect(),
            max_messages,
            messages: phase.messages(),
            fg: phase.pairs.len(),
            delivered_messages: 0,
            qpn_next,
            replace: Vec::new(),
            rehashes: 0,
            posted_at: vec![0; n * max_messages],
            latency: LatencyHist::default(),
            ends: Vec::new(),
            before_move: std::collections::HashMap::new(),
        })
    }

    /// Every connection of the collective finished (the background job never does).
    pub fn done(&self) -> bool {
        self.finished as usize == self.fg
    }

    /// The ring's upstream connection of `c`, within its channel.
    fn up(&self, c: usize) -> usize {
        let l = self.phase.per_channel();
        c / l * l + (c % l + l - 1) % l
    }

    /// The ring's downstream connection of `c`, within its channel.
    fn down(&self, c: usize) -> usize {
        let l = self.phase.per_channel();
        c / l * l + (c % l + 1) % l
    }

    /// Messages connection `c` sends: the phase's, or without end for the background job.
    fn messages_of(&self, c: usize) -> u32 {
        if c < self.fg {
            self.messages
        } else {
            self.phase.bg_messages
        }
    }

    fn len_of(&self, c: usize, j: u32) -> u64 {
        if c < self.fg {
            self.phase.message_len(j)
        } else {
            self.phase.step_bytes
        }
    }

    /// Posts every message connection `c` may post now (ring or tree dependency, free slot,
    /// engine room).
    pub(crate) fn try_post(&mut self, c: usize, now: u64) {
        let phase: &'a Phase = self.phase;
        let ring = phase.ring && c < self.fg;
        let deps = if c < self.fg {
            phase.deps.as_ref()
        } else {
            None
        };
        let messages = self.messages_of(c);
        loop {
            let j = self.conns[c].posted;
            if j >= messages {
                return;
            }
            // Message j of step k >= 1 reduces message j - width of step k - 1 from upstream.
            let (step, _, width) = if ring { phase.place(j) } else { (0, 0, 0) };
            if step >= 1 && self.conns[self.up(c)].received < j - width + 1 {
                return;
            }
            // A tree edge's chunk j reduces (or forwards) chunk j of each of its inputs.
            if let Some(d) = deps {
                if d.inputs(c)
                    .iter()
                    .any(|&u| self.conns[u as usize].received <= j)
                {
                    return;
                }
            }
            let len = self.len_of(c, j);
            let conn = &mut self.conns[c];
            if j >= conn.freed + phase.slots
                || conn.sender.messages() >= self.max_messages
                || conn.receiver.posted() >= self.max_messages
            {
                return;
            }
            if conn.receiver.post(j, len).is_err() || conn.sender.post(j, len).is_err() {
                self.errors.engine += 1;
                return;
            }
            conn.posted += 1;
            self.posted_at[c * self.max_messages + j as usize % self.max_messages] = now;
            if step >= 1 {
                // Reducing into message j consumed message j - width of the upstream link.
                let u = self.up(c);
                self.conns[u].freed += 1;
                self.wake.push(u as u32);
            }
            if let Some(d) = deps {
                // An input's chunk is consumed once every edge that reads it has posted it.
                for &u in d.inputs(c) {
                    let u = u as usize;
                    let done = d
                        .consumers(u)
                        .iter()
                        .map(|&k| self.conns[k as usize].posted)
                        .min()
                        .unwrap_or(0);
                    if done > self.conns[u].freed {
                        self.conns[u].freed = done;
                        self.wake.push(u as u32);
                    }
                }
            }
        }
    }

    /// A segment of connection `c` landed at its receiver at `now`.
    pub(crate) fn on_arrival(&mut self, c: usize, imm: u32, len: u32, now: u64) {
        if self.conns[c].receiver.arrived(imm, len).is_err() {
            self.errors.protocol += 1;
        }
        let fg = c < self.fg;
        let phase: &'a Phase = self.phase;
        let ring = phase.ring && fg;
        let users = match (&phase.deps, fg) {
            (Some(d), true) => d.consumers(c),
            _ => &[],
        };
        let messages = self.messages_of(c);
        let last_step = phase.steps - 1;
        while let Some((tok, size)) = self.conns[c].receiver.poll_done() {
            let want = self.len_of(c, tok);
            let conn = &mut self.conns[c];
            if tok != conn.received || size != want {
                self.errors.order += 1;
            }
            conn.received += 1;
            // Freed on arrival unless a later post reads it (the ring's next step, a tree
            // node's send up or down).
            if (!ring || phase.place(tok).0 == last_step) && users.is_empty() {
                conn.freed += 1;
                self.wake.push(c as u32);
            }
            if !fg {
                continue;
            }
            if conn.received == messages && conn.sent_done == messages {
                self.finished += 1;
            }
            self.delivered_messages += 1;
            let at = self.posted_at[c * self.max_messages + tok as usize % self.max_messages];
            self.latency.add(now.saturating_sub(at));
            if ring {
                self.wake.push(self.down(c) as u32);
            }
            self.wake.extend(users.iter().copied());
        }
    }

    /// The sender of connection `c` got the completion of QP `qp`'s oldest segment.
    pub(crate) fn on_ack(&mut self, c: usize, qp: usize, now: u64) {
        let messages = self.messages_of(c);
        let fg = c < self.fg;
        let conn = &mut self.conns[c];
        if conn.sender.completed(qp, now).is_err() {
            self.errors.engine += 1;
        }
        while let Some(tok) = conn.sender.poll_done() {
            if tok != conn.sent_done {
                self.errors.order += 1;
            }
            conn.sent_done += 1;
            if fg && conn.received == messages && conn.sent_done == messages {
                self.finished += 1;
            }
        }
        while let Some(PathEvent::Replace { qp }) = conn.sender.poll_path_event() {
            self.replace.push((c as u32, qp as u16));
        }
        self.wake.push(c as u32);
    }

    /// A new QP pair for a re-hashed QP of connection `c`: fresh QPNs on both NICs.
    pub(crate) fn new_qpns(&mut self, c: usize) -> (u32, u32) {
        let (src, dst) = (self.conns[c].src as usize, self.conns[c].dst as usize);
        let l = self.qpn_next[src];
        self.qpn_next[src] = (l + 1) & 0xFF_FFFF;
        let r = self.qpn_next[dst];
        self.qpn_next[dst] = (r + 1) & 0xFF_FFFF;
        (l, r)
    }

    /// Every re-hashed straggler waiting in `replace`: new QPNs on both NICs, the path they hash
    /// to on `rail` (kept in `paths`, `qps` per connection), and back into its engine.
    pub(crate) fn rehash_pending(&mut self, rail: &Rail, paths: &mut [Path], qps: usize) {
        while let Some((c, qp)) = self.replace.pop() {
            let (c, qp) = (c as usize, qp as usize);
            if let Some(p) = self.rehashed_path(rail, c, qp, qps) {
                paths[c * qps + qp] = p;
            }
            self.replaced(c, qp);
        }
    }

    /// New QPNs for QP `qp` of connection `c`, its new source port (pin.rs: from the QPNs, or
    /// re-pinned) and the path the switches give it.
    pub(crate) fn rehashed_path(
        &mut self,
        rail: &Rail,
        c: usize,
        qp: usize,
        qps: usize,
    ) -> Option<Path> {
        let (l, r) = self.new_qpns(c);
        let (src, dst) = (self.conns[c].src as usize, self.conns[c].dst as usize);
        let i = c * qps + qp;
        let old = self.ends.get(i).copied().unwrap_or((0, r));
        // The re-pin rule's moves take the source port of another QP of the connection (the same
        // path whatever the group) or the one the QP had before.
        let end = match self.conns[c].sender.repin_path(qp) {
            Some(RepinPath::Onto { qp: f }) => {
                self.before_move.insert(i, old);
                (self.ends.get(c * qps + f).map_or(old.0, |e| e.0), r)
            }
            Some(RepinPath::Back) => (self.before_move.get(&i).map_or(old.0, |e| e.0), r),
            None => pin::repin(rail, src, dst, old, l, r),
        };
        if let Some(e) = self.ends.get_mut(i) {
            *e = end;
        }
        rail.ecmp_path_port(src, dst, end.0, end.1)
    }

    /// QP `qp` of connection `c` has its new path: the engine schedules on it again.
    pub fn replaced(&mut self, c: usize, qp: usize) {
        if self.conns[c].sender.path_replaced(qp).is_err() {
            self.errors.engine += 1;
        }
        self.rehashes += 1;
        self.wake.push(c as u32);
    }

    /// The next segment connection `c` puts on the wire, if any.
    #[inline]
    pub fn transmit(&mut self, c: usize, now: u64) -> Option<Transmit> {
        self.conns[c].sender.poll_transmit(now)
    }

    /// Messages of the collective that should have been released on each side but were not (0
    /// after a clean run).
    pub fn missing(&self) -> u64 {
        self.conns[..self.fg]
            .iter()
            .map(|c| {
                u64::from(self.messages - c.received.min(self.messages))
                    + u64::from(self.messages - c.sent_done.min(self.messages))
            })
            .sum()
    }
}
