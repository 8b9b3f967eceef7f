//! Sender side of a TCP connection: matches isends to the receiver's announcements, feeds the engine,
//! writes its segments (header + payload straight from the user buffer) and turns acks into CQEs.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use super::io::{data_streams, read_some, write_some, Read, Readiness, StreamName};
use super::repath::{Repath, StreamSetup, Why};
use super::wire::{
    Acks, Announce, ConnParams, Control, SegHeader, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use super::workers::{hand_off_min, Pool, ThreadPlan};
use crate::common::{Outgoing, Requests, SendCore};
use crate::events::EventDescr;
use crate::slots::{Match, Target, MAX_RECVS};
use crate::{ErrorCode, NetError, NetResult, UserBuf};
use dqplb_engine::{EngineError, PathEvent, PolicyKind, QpStats, RehashRule};

/// One segment on its way out of a data stream.
struct TxSeg {
    imm: u32,
    hdr: [u8; SEG_HEADER_BYTES],
    buf: UserBuf,
    off: usize,
    len: usize,
    written: usize,
    /// Profiler event of this segment (0: none).
    ev: usize,
}

struct DataTx {
    sock: TcpStream,
    name: StreamName,
    queue: VecDeque<TxSeg>,
    /// This stream's socket number (0, then each replacement's; the receiver's acks name it).
    gen: u16,
    /// Immediates (and profiler events) of segments fully written and not yet acknowledged,
    /// oldest first.
    unacked: VecDeque<(u32, usize)>,
    /// The receiver closed this stream. Acks of what it read may still be on their way on the
    /// control stream; segments still unacknowledged once that closes too are a failure.
    closed: bool,
    /// The stream failed (reset, error, or closed with segments due): the engine resends what
    /// was in flight on it over the other streams and gives it nothing new.
    dead: bool,
    /// Segments at the front of `queue` handed to a helper thread (written by it, in order).
    handed: usize,
}

/// An in-flight send: its buffer and the receive buffer id the peer announced for it.
#[derive(Clone, Copy)]
pub(crate) struct Active {
    buf: UserBuf,
    remote_slot: u32,
    /// NCCL's profiler handle of the isend (0: none).
    parent: usize,
}

impl Outgoing for Active {
    fn bytes(&self) -> usize {
        self.buf.len()
    }
}

pub struct TcpSendComm {
    /// Engine, requests and the matching of isends to the receiver's announced groups.
    tx: SendCore<Active, u32>,
    ctrl: TcpStream,
    ctrl_name: StreamName,
    /// Control frames read ahead: valid bytes are `ctrl_in[ctrl_start..ctrl_end]` (one read takes
    /// every frame waiting, up to CTRL_STAGE bytes).
    ctrl_in: [u8; CTRL_STAGE],
    ctrl_start: usize,
    ctrl_end: usize,
    /// The receiver closed its control stream: no announcement will come any more.
    ctrl_closed: bool,
    /// The group whose announcement frames are still arriving: its slot, count, and buffers.
    partial: [Target<u32>; MAX_RECVS],
    partial_n: usize,
    partial_of: (u32, u8),
    data: Vec<DataTx>,
    ready: Readiness,
    /// The first data-stream failure (named when the last stream fails too).
    first_failure: Option<NetError>,
    /// How replacement streams are opened and greeted.
    setup: StreamSetup,
    /// The receiver's re-path listener (from its first control frame); None: never replace.
    repath_to: Option<SocketAddr>,
    /// Per data stream: a replacement in progress.
    repaths: Vec<Option<Repath>>,
    /// Per data stream: replacements after failures (bounded: a peer that is gone stays gone).
    failure_repaths: Vec<u32>,
    /// Per data stream: the socket number of its latest replacement attempt.
    last_gen: Vec<u16>,
    /// Data streams replaced so far.
    repaths_done: u64,
    /// A stream with a segment unacknowledged this long (ns) has failed; 0: never.
    stall_timeout: u64,
    next_stall_check: u64,
    /// The receiver sent its first control frame (its answer to the hello).
    answered: bool,
    /// The receiver refused the hello (sticky: every later call reports it).
    refused: Option<super::wire::Refusal>,
    /// Without that answer this long (ns after the comm was made), the comm fails; 0: never.
    handshake_timeout: u64,
    owner: super::Owner,
    /// Helper threads for large segments (started with the first one); see `workers`.
    plan: ThreadPlan,
    helpers: Option<Pool>,
    /// Helpers could not be started: the calling thread writes everything.
    helpers_failed: bool,
}

/// Bytes of control frames one read takes at most (32 announcements or ack frames).
const CTRL_STAGE: usize = 32 * ANNOUNCE_BYTES;

/// Replacements of one data stream after failures before it is left dead.
const MAX_FAILURE_REPATHS: u32 = 3;

impl TcpSendComm {
    /// Bytes a send comm with `params` holds, all allocated when it is made: the struct, its
    /// engine, request table and group matcher (built here as `new` builds them), and per data
    /// stream the segment queues.
    pub fn state_bytes(params: ConnParams) -> NetResult<usize> {
        use std::mem::size_of;
        let tx: SendCore<Active, u32> = SendCore::new(params, &"footprint", String::new())?;
        let cap = params.outstanding as usize;
        let per_stream = size_of::<DataTx>()
            + cap * (size_of::<TxSeg>() + size_of::<(u32, usize)>())
            + size_of::<Option<Repath>>()
            + size_of::<u32>()
            + size_of::<u16>();
        Ok(size_of::<TcpSendComm>() + tx.footprint_bytes() + params.qps as usize * per_stream)
    }

    pub(super) fn new(
        ctrl: TcpStream,
        data: Vec<TcpStream>,
        setup: StreamSetup,
    ) -> NetResult<TcpSendComm> {
        let params = setup.params;
        let peer = ctrl
            .peer_addr()
            .map_err(|e| NetError::io("connected control stream has no peer address", &e))?;
        let tx = SendCore::new(params, &peer, format!("send comm to {peer}"))?;
        let ctrl_local_ip = ctrl.local_addr().ok().map(|a| a.ip());
        let cap = params.outstanding as usize;
        let data: Vec<DataTx> = data_streams(peer, data, |sock, name| DataTx {
            sock,
            name,
            queue: VecDeque::with_capacity(cap),
            gen: 0,
            unacked: VecDeque::with_capacity(cap),
            closed: false,
            dead: false,
            handed: 0,
        });
        let ready = Readiness::new(std::iter::once(&ctrl).chain(data.iter().map(|d| &d.sock)));
        Ok(TcpSendComm {
            tx,
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_in: [0; CTRL_STAGE],
            ctrl_start: 0,
            ctrl_end: 0,
            ctrl_closed: false,
            partial: [Target::default(); MAX_RECVS],
            partial_n: 0,
            partial_of: (0, 0),
            data,
            ready,
            first_failure: None,
            repaths: (0..params.qps).map(|_| None).collect(),
            failure_repaths: vec![0; params.qps as usize],
            last_gen: vec![0; params.qps as usize],
            repaths_done: 0,
            stall_timeout: 0,
            next_stall_check: 0,
            repath_to: None,
            setup,
            answered: false,
            refused: None,
            owner: super::Owner::this_process(),
            handshake_timeout: super::connect::HANDSHAKE_TIMEOUT.as_nanos() as u64,
            plan: ThreadPlan::from_env(ctrl_local_ip),
            helpers: None,
            helpers_failed: false,
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.tx.params
    }

    pub fn max_requests(&self) -> usize {
        self.tx.slots.len()
    }

    /// Adds an engine route (`policy` over the first `qps` data QPs, 0 = all) for `set_route`.
    pub fn add_route(&mut self, policy: PolicyKind, qps: usize) -> NetResult<u8> {
        self.tx.add_route(policy, qps)
    }

    /// How long the receiver may take to answer the hello (its first control frame) before the
    /// comm fails; 0: wait for ever. Default [`super::connect::HANDSHAKE_TIMEOUT`].
    pub fn set_handshake_timeout_ms(&mut self, ms: u64) {
        self.handshake_timeout = ms.saturating_mul(1_000_000);
    }

    /// Helper threads for this comm's data streams (before its first large segment; the default
    /// comes from NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD, see `workers::ThreadPlan`).
    pub fn set_thread_plan(&mut self, plan: ThreadPlan) {
        self.plan = plan;
    }

    #[cfg(test)]
    /// Test hook: the helpers publish finished segments `us` microseconds late.
    pub(crate) fn debug_helper_delay(&mut self, us: u64) {
        if self.helpers.is_none() {
            self.start_helpers();
        }
        if let Some(p) = &self.helpers {
            p.debug_delay_done(us);
        }
    }

    /// Helper threads running for this comm (0 until its first large segment).
    pub fn helper_threads(&self) -> usize {
        self.helpers.as_ref().map_or(0, Pool::threads)
    }

    /// NCCL's profiler handle of the next isend (0: none); its segments' events hang under it.
    pub fn set_event_parent(&mut self, parent: usize) {
        self.tx.events.next_parent = parent;
    }

    /// Messages matched from now on are cut by engine route `route` (from `add_route`).
    pub fn set_route(&mut self, route: u8) {
        self.tx.route = route;
    }

    pub fn qp_stats(&self) -> &[QpStats] {
        self.tx.qp_stats()
    }

    /// Local/peer addresses of the data streams (for path shaping and logs).
    pub fn data_stream_addrs(&self) -> Vec<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.data
            .iter()
            .filter_map(|d| Some((d.sock.local_addr().ok()?, d.sock.peer_addr().ok()?)))
            .collect()
    }

    /// Matches `buf` to a buffer of the first grouped receive the peer announced and not yet
    /// matched completely (by tag; a send larger than the buffer is cut to it, as net_ib's);
    /// None means "try again", also when that group has no free buffer with this tag. The group goes to the engine, in
    /// buffer order, once every buffer has its send. A send whose receive was announced is
    /// accepted even after the peer closed: test() then reports the close (ncclRemoteError).
    pub fn isend(&mut self, buf: UserBuf, tag: i32) -> NetResult<Option<u32>> {
        let gone = match self.progress() {
            Ok(()) => None,
            Err(e) if e.code == ErrorCode::RemoteError => {
                // Announcements the peer wrote before it left are still in our socket buffer.
                let now = self.now();
                let _ = self.read_control(now);
                Some(e)
            }
            Err(e) => return Err(e),
        };
        let peer = self.ctrl_name.peer;
        let (i, buf) = match self.tx.matcher.find(buf.len(), tag) {
            Match::Buffer(i, len) => (i, buf.prefix(len)),
            Match::NoGroup | Match::Busy => {
                if let Some(e) = gone {
                    return Err(e);
                }
                // No later group can come once the receiver closed its control stream.
                if self.ctrl_closed && !self.answered {
                    return Err(NetError::remote(format!(
                        "{}: the receiver closed the connection without answering its hello: not a DQPLB receiver of this protocol version, or it refused the connection",
                        self.ctrl_name
                    )));
                }
                if self.ctrl_closed && self.partial_n == 0 && self.tx.matcher.len() <= 1 {
                    return Err(NetError::remote(format!(
                        "{}: the receiver closed the connection; no receive will be posted for this send",
                        self.ctrl_name
                    )));
                }
                return Ok(None);
            }
        };
        let active = |remote_slot, parent| Active {
            buf,
            remote_slot,
            parent,
        };
        let Some((slot, posted)) = self.tx.claim(i, active, gone.is_some(), &peer)? else {
            return Ok(None);
        };
        // Put the first segments on the wire now rather than at the next test(). The pass above
        // just polled and read what was there: this one only writes (no poll(2)).
        if posted {
            self.ready.skip_next();
            if let Err(e) = self.progress() {
                if e.code != ErrorCode::RemoteError {
                    return Err(e);
                }
            }
        }
        Ok(Some(slot))
    }

    /// Completion of request `slot`: Some(size) once every segment was acknowledged. A request
    /// that already completed is reported even if the peer has closed since.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.test_request(slot)
    }

    fn now(&self) -> u64 {
        self.tx.now()
    }

    /// Moves everything that can move without blocking.
    pub fn progress(&mut self) -> NetResult<()> {
        self.advance()
    }
}

impl Requests for TcpSendComm {
    type Core = SendCore<Active, u32>;

    fn core(&mut self) -> &mut SendCore<Active, u32> {
        &mut self.tx
    }

    fn step(&mut self) -> NetResult<()> {
        if let Some(why) = self.refused {
            return Err(self.refusal(why));
        }
        self.ready.poll()?;
        // One clock read per pass: completion times, the stall check and post times share it.
        let now = self.now();
        // Frames left staged (an ack waiting for a helper's write completion) are taken even when
        // the socket has nothing new.
        if self.ready.readable(0) || self.ctrl_end - self.ctrl_start >= ANNOUNCE_BYTES {
            self.read_control(now)?;
        }
        if !self.answered && self.handshake_timeout > 0 && now > self.handshake_timeout {
            return Err(NetError::remote(format!(
                "{}: the receiver accepted the connection but sent nothing in {} ms (no answer to the hello): not a DQPLB receiver, or its process is stuck",
                self.ctrl_name,
                self.handshake_timeout / 1_000_000
            )));
        }
        self.check_streams(now)?;
        if self.repaths.iter().any(Option::is_some) {
            self.advance_repaths(now)?;
        }
        while let Some(PathEvent::Replace { qp }) = self.tx.engine.poll_path_event() {
            self.begin_repath(qp, Why::Straggler)?;
        }
        if self.stall_timeout > 0 {
            self.check_stalls(now)?;
        }
        self.schedule(now)?;
        self.write_segments()?;
        self.tx.finish_done();
        Ok(())
    }
}

impl TcpSendComm {
    fn refusal(&self, why: super::wire::Refusal) -> NetError {
        NetError::remote(format!(
            "{}: the receiver refused the hello: {}",
            self.ctrl_name,
            why.describe()
        ))
    }

    /// Reads the control frames waiting on the control stream and takes each whole one. A read
    /// that returned less than it asked for emptied the socket, so the pass ends there instead of
    /// with a read that only says EAGAIN. An ack naming a segment a helper thread has not yet
    /// reported written stays staged, with the frames behind it, for the next pass.
    fn read_control(&mut self, now: u64) -> NetResult<()> {
        let mut drained = false;
        loop {
            while self.ctrl_end - self.ctrl_start >= ANNOUNCE_BYTES {
                let mut f = [0u8; ANNOUNCE_BYTES];
                f.copy_from_slice(&self.ctrl_in[self.ctrl_start..self.ctrl_start + ANNOUNCE_BYTES]);
                let frame = Control::decode(&f)
                    .map_err(|e| NetError::remote(format!("{}: {}", self.ctrl_name, e.msg)))?;
                self.answered = true;
                match frame {
                    Control::Refused(why) => {
                        self.refused = Some(why);
                        return Err(self.refusal(why));
                    }
                    Control::Announce(a) => self.take_announce(a)?,
                    Control::Repath { port } => {
                        self.repath_to = Some(SocketAddr::new(self.ctrl_name.peer.ip(), port));
                    }
                    Control::Acks(a) => {
                        if !self.take_acks(a, now)? {
                            return Ok(());
                        }
                    }
                }
                self.ctrl_start += ANNOUNCE_BYTES;
            }
            if self.ctrl_closed {
                return Ok(());
            }
            if drained {
                return Ok(());
            }
            self.ctrl_in.copy_within(self.ctrl_start..self.ctrl_end, 0);
            self.ctrl_end -= self.ctrl_start;
            self.ctrl_start = 0;
            let ask = CTRL_STAGE - self.ctrl_end;
            match read_some(
                &mut self.ctrl,
                &mut self.ctrl_in[self.ctrl_end..],
                &self.ctrl_name,
            )? {
                Read::Data(n) => {
                    drained = n < ask;
                    self.ctrl_end += n;
                }
                Read::WouldBlock => return Ok(()),
                Read::Eof if self.ctrl_end == 0 && self.partial_n == 0 => {
                    self.ctrl_closed = true;
                    return Ok(());
                }
                Read::Eof if self.ctrl_end == 0 => {
                    self.ctrl_closed = true;
                    return Err(NetError::remote(format!(
                        "{}: peer closed after announcing {} of the {} buffers of receive group {}",
                        self.ctrl_name, self.partial_n, self.partial_of.1, self.partial_of.0
                    )));
                }
                Read::Eof => {
                    return Err(NetError::remote(format!(
                        "{}: peer closed in the middle of an announcement",
                        self.ctrl_name
                    )))
                }
            }
        }
    }

    /// Adds one announcement frame to the group being announced; a complete group joins the
    /// matching queue. Frames of a group come in order with one slot and count.
    fn take_announce(&mut self, a: Announce) -> NetResult<()> {
        let bad = |what: String| {
            Err(NetError::remote(format!(
                "{}: {what}: announcements out of order",
                self.ctrl_name
            )))
        };
        if self.partial_n == 0 {
            if a.index != 0 {
                return bad(format!(
                    "buffer {} of receive group {} announced first",
                    a.index, a.slot
                ));
            }
            self.partial_of = (a.slot, a.count);
        } else if (a.slot, a.count) != self.partial_of || usize::from(a.index) != self.partial_n {
            return bad(format!(
                "buffer {} of a {}-buffer receive group {} announced while buffer {} of the {}-buffer group {} was due",
                a.index, a.count, a.slot, self.partial_n, self.partial_of.1, self.partial_of.0
            ));
        }
        self.partial[self.partial_n] = Target {
            tag: a.tag,
            capacity: a.capacity,
            remote: a.buffer_id(),
        };
        self.partial_n += 1;
        if self.partial_n == usize::from(a.count) {
            self.partial_n = 0;
            self.tx
                .matcher
                .push(&self.ctrl_name, &self.partial[..usize::from(a.count)])?;
        }
        Ok(())
    }

    /// Turns an ack frame into engine completions: it must acknowledge the oldest segments its
    /// stream finished writing, ending with the one it names. Frames naming a failed or replaced
    /// socket of the stream are stale (what it carried went out again) and dropped. Ok(false): the
    /// frame names segments a helper thread has not yet reported written; it is taken later.
    fn take_acks(&mut self, a: Acks, now: u64) -> NetResult<bool> {
        let qp = usize::from(a.stream);
        let Some(d) = self.data.get_mut(qp) else {
            return Err(NetError::remote(format!(
                "{}: acknowledgement for data stream {qp} of a {}-stream connection",
                self.ctrl_name,
                self.data.len()
            )));
        };
        if d.dead || a.gen != d.gen {
            return Ok(true);
        }
        let count = usize::from(a.count);
        if d.unacked.len() < count && d.handed > 0 {
            if let Err(e) = harvest(d, &mut self.helpers, qp) {
                self.stream_failed(qp, e)?;
                return Ok(true);
            }
            if d.unacked.len() < count && d.handed > 0 {
                return Ok(false);
            }
        }
        let Some(&(want, _)) = d.unacked.get(count - 1) else {
            return Err(NetError::remote(format!(
                "{}: acknowledgement of {count} segment(s) while {} written segment(s) await one",
                d.name,
                d.unacked.len()
            )));
        };
        if want != a.last {
            return Err(NetError::remote(format!(
                "{}: acknowledgement of {count} segment(s) ending at immediate {:#x}, expected {want:#x} (the oldest unacknowledged segments)",
                d.name, a.last
            )));
        }
        for _ in 0..count {
            if let Some((_, ev)) = d.unacked.pop_front() {
                self.tx.events.stop(ev);
            }
            self.tx.engine.completed(qp, now).map_err(|e| {
                NetError::remote(format!(
                    "{}: acknowledgement without a segment in flight: {e}",
                    d.name
                ))
            })?;
        }
        Ok(true)
    }

    /// Looks at the data streams the last poll found readable: the receiver writes nothing on
    /// them, so only EOF (it closed the stream) or an error shows up there. A stream closed with
    /// segments unacknowledged fails once the control stream has closed too (no ack can come any
    /// more); with segments not yet written it fails at once.
    fn check_streams(&mut self, now: u64) -> NetResult<()> {
        for qp in 0..self.data.len() {
            let d = &mut self.data[qp];
            if d.dead || !self.ready.readable(qp + 1) {
                continue;
            }
            let mut probe = [0u8; 64];
            let failed = match read_some(&mut d.sock, &mut probe, &d.name) {
                Err(e) => Some(e),
                Ok(Read::WouldBlock) => None,
                Ok(Read::Data(_)) => {
                    return Err(NetError::remote(format!(
                        "{}: bytes from the receiver on a data stream (acks come on the control stream)",
                        d.name
                    )))
                }
                Ok(Read::Eof) => {
                    d.closed = true;
                    self.ready.ignore(qp + 1);
                    close_stream(d)
                }
            };
            if let Some(e) = failed {
                self.stream_failed(qp, e)?;
            }
        }
        if self
            .data
            .iter()
            .any(|d| d.closed && !d.dead && !d.unacked.is_empty())
        {
            // Acks the receiver sent before it closed are read before anything is declared lost.
            if self.ready.readable(0) && !self.ctrl_closed {
                self.read_control(now)?;
            }
            if self.ctrl_closed {
                for qp in 0..self.data.len() {
                    let d = &self.data[qp];
                    if d.closed && !d.dead && !d.unacked.is_empty() {
                        let e = NetError::remote(format!(
                            "{}: peer closed the connection with {} segment(s) unacknowledged",
                            d.name,
                            d.unacked.len()
                        ));
                        self.stream_failed(qp, e)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Starts replacing data stream `qp` (drained, or failed) by a new connection from a new
    /// source port; without a re-path listener a straggler keeps its stream.
    fn begin_repath(&mut self, qp: usize, why: Why) -> NetResult<()> {
        let Some(to) = self.repath_to else {
            if why == Why::Straggler {
                tracing::info!(target: "dqplb::net", "{}: straggler kept: the receiver has no re-path listener", self.data[qp].name);
                self.tx
                    .engine
                    .path_replaced(qp)
                    .map_err(|e| NetError::internal(e.to_string()))?;
            }
            return Ok(());
        };
        let now = self.now();
        let gen = self.last_gen[qp].wrapping_add(1);
        self.last_gen[qp] = gen;
        match Repath::start(qp, gen, to, why, &self.setup, now) {
            Ok(r) => self.repaths[qp] = Some(r),
            Err(e) => self.repath_failed(qp, why, e)?,
        }
        Ok(())
    }

    /// A replacement could not be made: a straggler goes on with its old stream, a failed
    /// stream tries again from another port while its re-creation budget lasts, then stays dead.
    fn repath_failed(&mut self, qp: usize, why: Why, e: NetError) -> NetResult<()> {
        tracing::info!(target: "dqplb::net", "{}: no replacement stream ({}): {e}", self.data[qp].name, why.as_str());
        self.repaths[qp] = None;
        match why {
            Why::Straggler => self
                .tx
                .engine
                .path_replaced(qp)
                .map_err(|e| NetError::internal(e.to_string()))?,
            Why::Failure if self.failure_repaths[qp] < MAX_FAILURE_REPATHS => {
                self.failure_repaths[qp] += 1;
                self.begin_repath(qp, why)?;
            }
            Why::Failure => {}
        }
        Ok(())
    }

    /// Advances replacements in progress; a greeted one takes the old stream's place.
    #[cold]
    fn advance_repaths(&mut self, now: u64) -> NetResult<()> {
        for qp in 0..self.repaths.len() {
            let Some(r) = &mut self.repaths[qp] else {
                continue;
            };
            let why = r.why;
            let gen = r.gen;
            let sock = match r.progress(&self.data[qp].name, now) {
                Ok(Some(sock)) => sock,
                Ok(None) => continue,
                Err(e) => {
                    self.repath_failed(qp, why, e)?;
                    continue;
                }
            };
            self.repaths[qp] = None;
            let d = &mut self.data[qp];
            let old = d.sock.local_addr().ok();
            let new = sock.local_addr().ok();
            d.sock = sock;
            if let Some(p) = &mut self.helpers {
                p.cancel(qp, d.sock.as_raw_fd());
            }
            d.handed = 0;
            d.queue.clear();
            d.unacked.clear();
            d.gen = gen;
            d.closed = false;
            d.dead = false;
            self.ready.replace(qp + 1, &d.sock);
            self.tx
                .engine
                .path_replaced(qp)
                .map_err(|e| NetError::internal(format!("{}: {e}", d.name)))?;
            self.repaths_done += 1;
            tracing::info!(target: "dqplb::net", "{}: replaced ({}): source {} -> {}", d.name, why.as_str(),
                old.map_or("?".to_string(), |a| a.to_string()), new.map_or("?".to_string(), |a| a.to_string()));
        }
        Ok(())
    }

    /// A stream with a segment unacknowledged for `ms` milliseconds is a failed path (0: off).
    pub fn set_stall_timeout_ms(&mut self, ms: u64) {
        self.stall_timeout = ms.saturating_mul(1_000_000);
    }

    /// Fails the first stream whose oldest segment waited past the stall timeout, at most every
    /// quarter of the timeout.
    fn check_stalls(&mut self, now: u64) -> NetResult<()> {
        if now < self.next_stall_check {
            return Ok(());
        }
        self.next_stall_check = now + (self.stall_timeout / 4).max(1);
        if let Some(qp) = self.tx.engine.stalled(now, self.stall_timeout) {
            let e = NetError::remote(format!(
                "{}: a segment unacknowledged for {} ms: path stalled",
                self.data[qp].name,
                self.stall_timeout / 1_000_000
            ));
            self.stream_failed(qp, e)?;
        }
        Ok(())
    }

    /// Installs the engine's straggler re-hash rule (per connection class, from the site config).
    pub fn set_rehash_rule(&mut self, rule: RehashRule) -> NetResult<()> {
        self.tx.set_rehash_rule(rule)
    }

    /// Data streams replaced so far (stragglers and failures).
    pub fn repaths(&self) -> u64 {
        self.repaths_done
    }

    /// Data stream `qp` failed with `why`: the engine sends what was in flight on it again over
    /// the other streams (the receiver counts each sequence number once and never places a
    /// second copy) and gives it nothing new; the comm fails only when every stream has.
    fn stream_failed(&mut self, qp: usize, why: NetError) -> NetResult<()> {
        let d = &mut self.data[qp];
        if d.dead {
            return Ok(());
        }
        d.dead = true;
        d.closed = true;
        if d.handed > 0 {
            // The helper lets go of the stream and of the send buffers before the engine resends.
            if let Some(p) = &mut self.helpers {
                p.cancel(qp, d.sock.as_raw_fd());
            }
            d.handed = 0;
        }
        for seg in d.queue.drain(..) {
            self.tx.events.stop(seg.ev);
        }
        for (_, ev) in d.unacked.drain(..) {
            self.tx.events.stop(ev);
        }
        self.ready.ignore(qp + 1);
        let first = self.first_failure.get_or_insert_with(|| why.clone());
        match self.tx.engine.path_failed(qp) {
            Ok(moved) => {
                tracing::info!(target: "dqplb::net", "{}: data stream failed ({why}); {moved} segment(s) in flight on it go out again on the other streams", d.name);
                self.repaths[qp] = None;
                if self.repath_to.is_some() && self.failure_repaths[qp] < MAX_FAILURE_REPATHS {
                    self.failure_repaths[qp] += 1;
                    self.begin_repath(qp, Why::Failure)?;
                }
                Ok(())
            }
            // The first failure is the cause worth naming (often the peer going away).
            Err(EngineError::AllPathsFailed { qps }) => Err(NetError::new(
                first.code,
                format!(
                    "{}; every one of the {qps} data streams to {} has failed",
                    first.msg, self.ctrl_name.peer
                ),
            )),
            Err(e) => Err(NetError::internal(format!("{}: {e}", d.name))),
        }
    }

    fn schedule(&mut self, now: u64) -> NetResult<()> {
        while let Some(t) = self.tx.engine.poll_transmit(now) {
            let Active {
                buf,
                remote_slot,
                parent,
            } = self.tx.scheduled(t.token)?;
            let d = &mut self.data[t.qp];
            if d.closed {
                // Closed by the receiver while the engine still used it: a failed path (the
                // segment just taken goes out again elsewhere).
                let e = NetError::remote(format!("{}: the receiver closed this stream", d.name));
                self.stream_failed(t.qp, e)?;
                continue;
            }
            let hdr = SegHeader {
                imm: t.imm,
                slot: remote_slot,
                offset: t.offset,
                len: t.len,
            }
            .encode();
            let ev = if self.tx.events.enabled() {
                self.tx.events.start(
                    parent,
                    EventDescr::Socket {
                        fd: d.sock.as_raw_fd(),
                        op: 0,
                        length: t.len as usize,
                    },
                )
            } else {
                0
            };
            d.queue.push_back(TxSeg {
                imm: t.imm,
                hdr,
                buf,
                off: t.offset as usize,
                len: t.len as usize,
                written: 0,
                ev,
            });
        }
        Ok(())
    }

    fn write_segments(&mut self) -> NetResult<()> {
        for qp in 0..self.data.len() {
            if let Some(e) = self.write_stream(qp)? {
                self.stream_failed(qp, e)?;
            }
        }
        Ok(())
    }

    /// Starts the helper threads (once, with the comm's first large segment).
    #[cold]
    fn start_helpers(&mut self) {
        let n = if super::workers::side_enabled(true) {
            self.plan.for_streams(self.data.len())
        } else {
            0
        };
        if n == 0 {
            self.helpers_failed = true;
            return;
        }
        let fds: Vec<_> = self.data.iter().map(|d| d.sock.as_raw_fd()).collect();
        let depth = self.tx.params.outstanding as usize;
        match Pool::start(&fds, true, n, depth, "tx") {
            Ok(p) => {
                tracing::info!(target: "dqplb::net", "{}: {} helper thread(s) for {} data streams", self.ctrl_name, p.threads(), fds.len());
                self.helpers = Some(p);
            }
            Err(e) => {
                tracing::warn!(target: "dqplb::net", "{}: no helper threads ({e}): the calling thread writes every stream", self.ctrl_name);
                self.helpers_failed = true;
            }
        }
    }

    /// Writes what data stream `qp` takes now: segments of at least MIN_CHUNK_BYTES go to a helper
    /// thread, smaller ones are written here once no helper task is ahead of them on the stream.
    /// Ok(Some(e)): the stream failed.
    fn write_stream(&mut self, qp: usize) -> NetResult<Option<NetError>> {
        if self.data[qp].dead {
            return Ok(None);
        }
        if self.helpers.is_none()
            && !self.helpers_failed
            && self.data[qp].queue.iter().any(|s| s.len >= hand_off_min())
        {
            self.start_helpers();
        }
        if let Err(e) = harvest(&mut self.data[qp], &mut self.helpers, qp) {
            return Ok(Some(e));
        }
        let d = &mut self.data[qp];
        while let Some(seg) = d.queue.get_mut(d.handed) {
            if seg.written == 0 && seg.len >= hand_off_min() {
                if let Some(p) = &mut self.helpers {
                    let payload = seg.buf.slice(seg.off, seg.len).ok_or_else(|| {
                        NetError::internal(format!("{}: segment outside its send buffer", d.name))
                    })?;
                    // SAFETY: the send buffer stays valid until its request completes (after
                    // every segment's ack), or the lane is cancelled first (stream_failed, drop).
                    if !unsafe { p.post(qp, &seg.hdr, payload.as_ptr() as *mut u8, payload.len()) }
                    {
                        break;
                    }
                    d.handed += 1;
                    continue;
                }
            }
            if d.handed > 0 {
                // A helper writes the segments ahead of this one: the stream's bytes stay in order.
                break;
            }
            let total = SEG_HEADER_BYTES + seg.len;
            let payload = seg.buf.slice(seg.off, seg.len).ok_or_else(|| {
                NetError::internal(format!("{}: segment outside its send buffer", d.name))
            })?;
            let r = if seg.written < SEG_HEADER_BYTES {
                let bufs = [IoSlice::new(&seg.hdr[seg.written..]), IoSlice::new(payload)];
                write_some(&d.sock, &bufs, &d.name)
            } else {
                let done = seg.written - SEG_HEADER_BYTES;
                write_some(&d.sock, &[IoSlice::new(&payload[done..])], &d.name)
            };
            let n = match r {
                Ok(n) => n,
                Err(e) => return Ok(Some(e)),
            };
            if n == 0 {
                break;
            }
            seg.written += n;
            if seg.written == total {
                d.unacked.push_back((seg.imm, seg.ev));
                d.queue.pop_front();
            }
        }
        Ok(None)
    }
}

/// Moves the segments a helper finished writing on stream `qp` from `queue` to `unacked`.
/// Err: the helper's write failed (the stream failed).
fn harvest(d: &mut DataTx, helpers: &mut Option<Pool>, qp: usize) -> Result<(), NetError> {
    if d.handed == 0 {
        return Ok(());
    }
    let Some(p) = helpers else { return Ok(()) };
    match p.completed(qp) {
        Ok(n) => {
            for _ in 0..n {
                if let Some(seg) = d.queue.pop_front() {
                    d.unacked.push_back((seg.imm, seg.ev));
                }
            }
            d.handed -= n;
            Ok(())
        }
        Err(e) => Err(NetError::io(&format!("{}: write", d.name), &e.to_io())),
    }
}

/// The receiver closed data stream `d`: Some(failure) when segments of ours were still to be
/// written on it (those written wait for their acks on the control stream).
fn close_stream(d: &DataTx) -> Option<NetError> {
    (!d.queue.is_empty()).then(|| {
        NetError::remote(format!(
            "{}: peer closed the connection with {} segment(s) unacknowledged",
            d.name,
            d.unacked.len() + d.queue.len()
        ))
    })
}

impl Drop for TcpSendComm {
    /// Every stream is shut down before it closes (the receiver learns of the close at once,
    /// forked children or not); segments still queued or unacknowledged end their profiler
    /// events with the comm.
    fn drop(&mut self) {
        // Helpers stop and are joined before the streams close and the buffers go back.
        self.helpers = None;
        self.owner.shutdown(&self.ctrl);
        for d in &self.data {
            self.owner.shutdown(&d.sock);
        }
        if !self.tx.events.enabled() {
            return;
        }
        for d in &self.data {
            for seg in &d.queue {
                self.tx.events.stop(seg.ev);
            }
            for &(_, ev) in &d.unacked {
                self.tx.events.stop(ev);
            }
        }
    }
}
