//! Receiver side of a TCP connection: reads each segment's payload straight into its buffer at its
//! offset, lets the engine order them, and sends announcements and acks on the control stream.

use std::io::IoSliceMut;
use std::net::{TcpListener, TcpStream};

use super::handle::PROTOCOL_VERSION;
use super::hello::PendingHello;
use super::io::{data_streams, drain, read_some, read_some_vectored, Read, Readiness, StreamName};
use super::wire::{
    buffer_id, encode_repath, Acks, Announce, ConnParams, Hello, SegHeader, ANNOUNCE_BYTES,
    SEG_HEADER_BYTES,
};
use super::workers::{hand_off_min, Pool, ThreadPlan};
use super::TcpOptions;
use crate::common::{Grp, RecvCore, Requests};
use crate::slots::{RecvSizes, MAX_RECVS};
use crate::{NetError, NetResult, UserBuf};

/// Bytes of small frames read per syscall: a header and a small payload (or several small
/// segments) arrive in one read; payloads of at least half of this are read straight into place.
const STAGE_BYTES: usize = 4096;

/// Where a data stream is in its byte sequence.
#[derive(Clone, Copy)]
enum RxState {
    Header,
    Payload {
        seg: SegHeader,
        got: usize,
    },
    /// A second copy of a segment that already arrived (resent after a path failure): its
    /// payload is read and dropped, never placed, and it is acknowledged like any other.
    Discard {
        seg: SegHeader,
        got: usize,
    },
    /// The sender closed the stream at a segment boundary, or the stream failed.
    Closed,
}

struct DataRx {
    sock: TcpStream,
    name: StreamName,
    /// Read-ahead for headers and small payloads: valid bytes are `stage[start..end]`.
    stage: Box<[u8; STAGE_BYTES]>,
    start: usize,
    end: usize,
    state: RxState,
    /// The socket number the sender's hello gave this stream (acks name it).
    gen: u16,
    /// Segments of this stream that arrived in this progress pass, not yet acknowledged, and
    /// the immediate of the last of them: one ack frame at the end of the pass covers them.
    ack_count: u16,
    ack_last: u32,
    /// Test hook: this stream is not read any more (a blackholed path).
    blackholed: bool,
    /// Test hook: blackhole the stream as soon as it is part-way through a segment's payload.
    blackhole_mid_segment: bool,
    /// Test hook: the stream is read only every `slow_every`-th pass (0: every pass).
    slow_every: u32,
    /// The rest of the current segment's payload is being read by a helper thread.
    handed: bool,
}

impl DataRx {
    /// The ack frame for this stream's segments of this pass (and none pending after it).
    fn take_acks(&mut self, qp: usize) -> Acks {
        let a = Acks {
            stream: qp as u16,
            gen: self.gen,
            count: self.ack_count,
            last: self.ack_last,
        };
        self.ack_count = 0;
        a
    }

    /// Whether a test hook watches this stream's reads (those stay on the calling thread).
    fn hooked(&self) -> bool {
        self.blackholed || self.blackhole_mid_segment || self.slow_every > 0
    }
}

/// One buffer of a posted receive and what the sender's segments placed into it so far.
#[derive(Clone, Copy)]
struct Posted {
    buf: UserBuf,
    /// Payload bytes placed by segments naming this buffer.
    placed: u64,
    /// Highest end offset of those segments.
    end: u64,
    /// The engine completed this buffer (or it is not posted).
    done: bool,
}

const NOT_POSTED: Posted = Posted {
    buf: UserBuf::empty(),
    placed: 0,
    end: 0,
    done: true,
};

/// The buffer a segment names (`slot * MAX_RECVS + index`), if it is posted and incomplete.
fn posted(rx: &RecvCore, bufs: &[Posted], id: u32) -> Option<Posted> {
    let g = rx.group(id)?;
    if id % MAX_RECVS as u32 >= u32::from(g.n) {
        return None;
    }
    bufs.get(id as usize).copied().filter(|p| !p.done)
}

/// Control frames the receiver may hold unsent at once: every buffer's announcement, the re-path
/// frame, and an ack frame per segment the sender can have in flight (each frame acks at least
/// one, and the sender writes no more until it reads them).
fn ctrl_frames(params: ConnParams) -> usize {
    params.max_messages as usize * MAX_RECVS + 1 + params.qps as usize * params.outstanding as usize
}

/// Segment `imm` of data stream `qp` landed: it joins the stream's ack of this pass (a full one
/// goes out to `ctrl_out` first; only a sender that ignores its window gets that far).
fn note_ack(d: &mut DataRx, qp: usize, imm: u32, ctrl_out: &mut Vec<u8>) {
    if d.ack_count == u16::MAX {
        ctrl_out.extend_from_slice(&d.take_acks(qp).encode());
    }
    d.ack_count += 1;
    d.ack_last = imm;
}

/// What a replacement data stream's hello must carry: the connection it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Auth {
    pub conn_id: u64,
    pub secret: [u8; 16],
}

pub struct TcpRecvComm {
    /// Engine and requests: one per grouped receive, whose buffers are
    /// `bufs[slot * MAX_RECVS..][..n]`.
    rx: RecvCore,
    ctrl: TcpStream,
    ctrl_name: StreamName,
    ctrl_out: Vec<u8>,
    ctrl_pos: usize,
    ctrl_closed: bool,
    data: Vec<DataRx>,
    ready: Readiness,
    bufs: Vec<Posted>,
    duplicates: u64,
    /// Where the sender opens replacement data streams (its port went out on the control
    /// stream first); None when it could not be bound (then streams are never replaced).
    repath: Option<TcpListener>,
    /// Replacement data streams accepted on the re-path listener, their hello still arriving.
    replacements: super::repath::Inbox,
    auth: Auth,
    opts: TcpOptions,
    /// Data streams replaced so far.
    repaths: u64,
    /// Test hook (`debug_hold_replacements`).
    hold_replacements: bool,
    /// Progress passes so far (the `debug_slow_stream` hook reads a slow stream every n-th).
    passes: u32,
    owner: super::Owner,
    /// Index of the re-path listener in `ready` (usize::MAX: none).
    repath_at: usize,
    /// Helper threads for large payloads (started with the first one); see `workers`.
    plan: ThreadPlan,
    helpers: Option<Pool>,
    /// Helpers could not be started: the calling thread reads everything.
    helpers_failed: bool,
    /// The last pass held its control frames back (see `step`).
    held: bool,
}

impl TcpRecvComm {
    /// Bytes a receive comm with `params` holds, all allocated when it is made: the struct, its
    /// engine, request table and sizes (built here as `new` builds them), the posted buffers, the
    /// control stream's output (announcements and acks), and per data stream the read-ahead stage.
    pub fn state_bytes(params: ConnParams) -> NetResult<usize> {
        use std::mem::size_of;
        let rx = RecvCore::new(params, &"footprint", String::new())?;
        let n = params.max_messages as usize;
        let per_stream = size_of::<DataRx>() + STAGE_BYTES;
        Ok(size_of::<TcpRecvComm>()
            + rx.footprint_bytes()
            + n * MAX_RECVS * size_of::<Posted>()
            + ctrl_frames(params) * ANNOUNCE_BYTES
            + params.qps as usize * per_stream)
    }

    pub(super) fn new(
        ctrl: TcpStream,
        data: Vec<TcpStream>,
        params: ConnParams,
        auth: Auth,
        opts: TcpOptions,
    ) -> NetResult<TcpRecvComm> {
        let peer = ctrl
            .peer_addr()
            .map_err(|e| NetError::io("accepted control stream has no peer address", &e))?;
        let rx = RecvCore::new(params, &peer, format!("receive comm from {peer}"))?;
        let ctrl_local_ip = ctrl.local_addr().ok().map(|a| a.ip());
        let n = params.max_messages as usize;
        let data: Vec<DataRx> = data_streams(peer, data, |sock, name| DataRx {
            sock,
            name,
            stage: Box::new([0; STAGE_BYTES]),
            start: 0,
            end: 0,
            state: RxState::Header,
            gen: 0,
            ack_count: 0,
            ack_last: 0,
            blackholed: false,
            blackhole_mid_segment: false,
            slow_every: 0,
            handed: false,
        });
        let mut ready = Readiness::new(std::iter::once(&ctrl).chain(data.iter().map(|d| &d.sock)));
        // The re-path listener on the address the sender reached us at; its port is the first
        // control frame (protocol 4).
        let repath = ctrl
            .local_addr()
            .and_then(|a| TcpListener::bind((a.ip(), 0)))
            .and_then(|l| l.set_nonblocking(true).map(|()| l));
        let mut ctrl_out = Vec::with_capacity(ctrl_frames(params) * ANNOUNCE_BYTES);
        let repath = match repath {
            Ok(l) => match l.local_addr() {
                Ok(a) => {
                    ctrl_out.extend_from_slice(&encode_repath(a.port()));
                    Some(l)
                }
                Err(_) => None,
            },
            Err(e) => {
                tracing::info!(target: "dqplb::net", "receive comm from {peer}: no re-path listener ({e}): failed data streams will not be replaced");
                None
            }
        };
        // The re-path listener is polled with the streams: accept(2) runs only when a replacement
        // waits, not once per progress pass.
        let repath_at = repath.as_ref().map_or(usize::MAX, |l| {
            use std::os::fd::AsRawFd;
            ready.watch(l.as_raw_fd())
        });
        Ok(TcpRecvComm {
            repath_at,
            rx,
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_out,
            ctrl_pos: 0,
            ctrl_closed: false,
            data,
            ready,
            bufs: vec![NOT_POSTED; n * MAX_RECVS],
            duplicates: 0,
            repath,
            replacements: super::repath::Inbox::new(),
            auth,
            opts,
            repaths: 0,
            hold_replacements: false,
            passes: 0,
            owner: super::Owner::this_process(),
            plan: ThreadPlan::from_env(ctrl_local_ip),
            helpers: None,
            helpers_failed: false,
            held: false,
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.rx.params
    }

    pub fn max_requests(&self) -> usize {
        self.rx.slots.len()
    }

    /// Helper threads for this comm's data streams (before its first large payload; the default
    /// comes from NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD, see `workers::ThreadPlan`).
    pub fn set_thread_plan(&mut self, plan: ThreadPlan) {
        self.plan = plan;
    }

    /// Helper threads running for this comm (0 until its first large payload).
    pub fn helper_threads(&self) -> usize {
        self.helpers.as_ref().map_or(0, Pool::threads)
    }

    /// Posts one receive buffer (a group of one); see [`TcpRecvComm::irecv_group`].
    pub fn irecv(&mut self, buf: UserBuf, tag: i32) -> NetResult<Option<u32>> {
        self.irecv_group(&[(buf, tag)])
    }

    /// Posts a grouped receive of 1..=MAX_RECVS (buffer, tag) pairs as one request and announces
    /// its buffers to the sender; None when all request slots are busy.
    pub fn irecv_group(&mut self, bufs: &[(UserBuf, i32)]) -> NetResult<Option<u32>> {
        let n = bufs.len();
        RecvCore::check_count(n)?;
        // Only the control stream is looked at before the receive is posted (whether the sender
        // closed); the pass after the announcement is queued reuses that poll, reads the data
        // streams and writes the announcement with the acks of what it read, in one write.
        self.check_ctrl()?;
        if self.ctrl_closed {
            return Err(NetError::remote(format!(
                "{}: the sender closed the connection; nothing more will arrive",
                self.ctrl_name
            )));
        }
        let Some(slot) = self.rx.slots.alloc(Grp {
            n: n as u8,
            left: n as u8,
        }) else {
            return Ok(None);
        };
        for (i, &(buf, tag)) in bufs.iter().enumerate() {
            let id = buffer_id(slot, i as u8);
            self.bufs[id as usize] = Posted {
                buf,
                placed: 0,
                end: 0,
                done: false,
            };
            self.rx.post(id, buf.len() as u64, &self.ctrl_name.peer)?;
            let a = Announce {
                slot,
                tag,
                index: i as u8,
                count: n as u8,
                capacity: buf.len() as u64,
            };
            self.ctrl_out.extend_from_slice(&a.encode());
        }
        self.ready.reuse_next();
        self.progress()?;
        Ok(Some(slot))
    }

    /// Some(total bytes received) once every buffer of request `slot` is complete.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        Ok(self.test_sizes(slot)?.map(|s| s.iter().sum()))
    }

    /// Some(received size of each buffer, in posting order) once every buffer of request `slot`
    /// arrived completely and in order. A receive that already completed is reported even if
    /// the peer has closed since.
    pub fn test_sizes(&mut self, slot: u32) -> NetResult<Option<RecvSizes>> {
        Ok(self.test_request(slot)?.map(|n| self.rx.sizes(slot, n)))
    }

    pub fn progress(&mut self) -> NetResult<()> {
        self.advance()
    }
}

impl Requests for TcpRecvComm {
    type Core = RecvCore;

    fn core(&mut self) -> &mut RecvCore {
        &mut self.rx
    }

    fn step(&mut self) -> NetResult<()> {
        self.passes = self.passes.wrapping_add(1);
        self.ready.poll()?;
        if self.repath.is_some()
            && !self.hold_replacements
            && (self.ready.readable(self.repath_at) || !self.replacements.is_empty())
        {
            self.accept_replacements();
        }
        self.probe_ctrl()?;
        for qp in 0..self.data.len() {
            let d = &self.data[qp];
            let skip =
                d.blackholed || (d.slow_every > 0 && !self.passes.is_multiple_of(d.slow_every));
            if (self.ready.readable(qp + 1) || d.handed) && !skip {
                if let Some(e) = self.read_stream(qp)? {
                    self.stream_failed(qp, e);
                }
            }
            let d = &mut self.data[qp];
            if d.ack_count > 0 {
                // A closed stream's sender closed after its last completion, and with a closed
                // control stream nobody is left to read acks.
                let a = d.take_acks(qp);
                if !matches!(d.state, RxState::Closed) && !self.ctrl_closed {
                    self.ctrl_out.extend_from_slice(&a.encode());
                }
            }
        }
        let mut completed = false;
        while let Some((token, size)) = self.rx.engine.poll_done() {
            completed = true;
            // The engine counts a message's bytes by sequence number; the segments must also have
            // named this receive and tiled [0, size) of it, or the sender is out of step.
            if let Some(d) = self
                .data
                .iter()
                .find(|d| matches!(d.state, RxState::Payload { seg, .. } if seg.slot == token && !self.rx.engine.is_duplicate(seg.imm)))
            {
                return Err(NetError::remote(format!(
                    "{}: receive slot {token} completed by sequence number while a segment for it is still arriving: sender out of step",
                    d.name
                )));
            }
            let Some(p) = posted(&self.rx, &self.bufs, token) else {
                return Err(NetError::internal(format!(
                    "{}: engine completed receive buffer {token} that is not posted",
                    self.ctrl_name
                )));
            };
            if p.placed != size || p.end != size {
                return Err(NetError::remote(format!(
                    "{}: receive buffer {token} completed with {size} bytes by sequence number, but the segments naming it placed {} bytes ending at offset {}: sender wrote to the wrong slot or offset",
                    self.ctrl_name, p.placed, p.end
                )));
            }
            // A helper still reading a second copy of a segment into this buffer lets go of it
            // before the receive goes back to NCCL; the rest of that copy is dropped.
            for qp in 0..self.data.len() {
                if let RxState::Payload { seg, .. } = self.data[qp].state {
                    if self.data[qp].handed && seg.slot == token {
                        self.cancel_handed(qp);
                    }
                }
            }
            self.bufs[token as usize].done = true;
            self.rx.complete(token, size);
        }
        // Announcements of this pass and the acks of every stream go out in one write. A pass
        // that completed a receive while others are still in flight holds them for one pass:
        // NCCL calls again for those (test(), or irecv() for its next step, whose announcement
        // then shares the write); the pass after always writes.
        let hold = completed && !self.held && self.rx.engine.pending() > 0;
        self.held = hold;
        if !hold {
            drain(
                &self.ctrl,
                &mut self.ctrl_out,
                &mut self.ctrl_pos,
                &self.ctrl_name,
            )?;
        }
        if self.rx.engine.pending() > 0
            && self.data.iter().all(|d| matches!(d.state, RxState::Closed))
        {
            return Err(NetError::remote(format!(
                "{}: the sender closed every stream with {} receive(s) incomplete",
                self.ctrl_name,
                self.rx.engine.pending()
            )));
        }
        Ok(())
    }
}

impl TcpRecvComm {
    /// Polls the comm's sockets and looks only at the control stream (whether the sender
    /// closed; `irecv_group`'s pass reuses the poll for the rest). An error fails the comm.
    fn check_ctrl(&mut self) -> NetResult<()> {
        self.rx.failed.check()?;
        let r = self.ready.poll().and_then(|()| self.probe_ctrl());
        if let Err(e) = r {
            return Err(self.fail(e));
        }
        Ok(())
    }

    /// Reads the control stream if the last poll found it readable: the sender never writes on
    /// it, so only EOF (it closed) may show up.
    fn probe_ctrl(&mut self) -> NetResult<()> {
        if !self.ready.readable(0) || self.ctrl_closed {
            return Ok(());
        }
        self.ready.consumed(0);
        let mut probe = [0u8; 1];
        match read_some(&mut self.ctrl, &mut probe, &self.ctrl_name)? {
            Read::WouldBlock => Ok(()),
            Read::Eof => {
                self.ctrl_closed = true;
                Ok(())
            }
            Read::Data(_) => Err(NetError::remote(format!(
                "{}: unexpected bytes from the sender",
                self.ctrl_name
            ))),
        }
    }

    /// Data stream `qp` failed (an I/O error, or EOF inside a segment): it is dropped, and the
    /// sender sends what it had in flight on it again over the other streams. Bytes a partial
    /// segment placed are rewritten by the second copy; the engine counted nothing of it.
    fn stream_failed(&mut self, qp: usize, why: NetError) {
        let d = &mut self.data[qp];
        if matches!(d.state, RxState::Closed) && d.ack_count == 0 {
            return;
        }
        tracing::info!(target: "dqplb::net", "{}: data stream failed ({why}); the sender resends its segments on the other streams", d.name);
        if d.handed {
            self.cancel_handed(qp);
        }
        let d = &mut self.data[qp];
        d.state = RxState::Closed;
        d.ack_count = 0;
        d.start = 0;
        d.end = 0;
        self.ready.ignore(qp + 1);
    }

    /// Takes the payload stream `qp` handed to a helper back (waiting only for the helper to
    /// let go, within one non-blocking read); what it placed counts, the rest is dropped.
    #[cold]
    fn cancel_handed(&mut self, qp: usize) {
        use std::os::fd::AsRawFd;
        let d = &mut self.data[qp];
        d.handed = false;
        let moved = match &mut self.helpers {
            Some(p) => p.cancel(qp, d.sock.as_raw_fd()),
            None => 0,
        };
        if let RxState::Payload { seg, got } = d.state {
            d.state = RxState::Discard {
                seg,
                got: got + moved,
            };
        }
    }

    /// Starts the helper threads (once, with the comm's first large payload).
    #[cold]
    fn start_helpers(&mut self) {
        use std::os::fd::AsRawFd;
        self.helpers_failed = true;
        let n = if super::workers::side_enabled(false) {
            self.plan.for_streams(self.data.len())
        } else {
            0
        };
        if n == 0 {
            return;
        }
        let fds: Vec<_> = self.data.iter().map(|d| d.sock.as_raw_fd()).collect();
        match Pool::start(&fds, false, n, 1, "rx") {
            Ok(p) => {
                tracing::info!(target: "dqplb::net", "{}: {} helper thread(s) for {} data streams", self.ctrl_name, p.threads(), fds.len());
                self.helpers = Some(p);
                self.helpers_failed = false;
            }
            Err(e) => {
                tracing::warn!(target: "dqplb::net", "{}: no helper threads ({e}): the calling thread reads every stream", self.ctrl_name)
            }
        }
    }

    /// Reads every segment available on one data stream (at most `outstanding` can be in
    /// flight). Ok(Some(e)): the stream failed; Err: a protocol violation.
    fn read_stream(&mut self, qp: usize) -> NetResult<Option<NetError>> {
        // A read that returned less than it asked for emptied the socket: the next read of this
        // pass would only say EAGAIN, so the pass ends there (the next poll says when more came).
        let mut drained = false;
        loop {
            let d = &mut self.data[qp];
            match d.state {
                RxState::Closed => return Ok(None),
                RxState::Header => {
                    if d.end - d.start < SEG_HEADER_BYTES {
                        d.stage.copy_within(d.start..d.end, 0);
                        d.end -= d.start;
                        d.start = 0;
                        if drained {
                            return Ok(None);
                        }
                        let ask = STAGE_BYTES - d.end;
                        match read_some(&mut d.sock, &mut d.stage[d.end..], &d.name) {
                            Err(e) => return Ok(Some(e)),
                            Ok(Read::Data(n)) => {
                                drained = n < ask;
                                d.end += n;
                            }
                            Ok(Read::WouldBlock) => return Ok(None),
                            Ok(Read::Eof) if d.end == 0 => {
                                d.state = RxState::Closed;
                                return Ok(None);
                            }
                            Ok(Read::Eof) => {
                                return Ok(Some(NetError::remote(format!(
                                    "{}: peer closed in the middle of a segment header",
                                    d.name
                                ))))
                            }
                        }
                        continue;
                    }
                    let mut hdr = [0u8; SEG_HEADER_BYTES];
                    hdr.copy_from_slice(&d.stage[d.start..d.start + SEG_HEADER_BYTES]);
                    d.start += SEG_HEADER_BYTES;
                    let seg = SegHeader::decode(&hdr)
                        .map_err(|e| NetError::remote(format!("{}: {}", d.name, e.msg)))?;
                    if self.rx.engine.is_duplicate(seg.imm) {
                        d.state = RxState::Discard { seg, got: 0 };
                        continue;
                    }
                    let fits = posted(&self.rx, &self.bufs, seg.slot).is_some_and(|p| {
                        p.buf.slice(seg.offset as usize, seg.len as usize).is_some()
                    });
                    if !fits {
                        return Err(NetError::remote(format!(
                            "{}: segment imm {:#x} for receive slot {} at offset {} length {} does not fit any posted buffer",
                            d.name, seg.imm, seg.slot, seg.offset, seg.len
                        )));
                    }
                    d.state = RxState::Payload { seg, got: 0 };
                }
                RxState::Payload { seg, mut got } => {
                    let len = seg.len as usize;
                    // A copy of this segment came in full on another stream while this one was
                    // still arriving (the sender gave this stream up as stalled and resent): the
                    // rest is dropped, its receive may already be back with NCCL.
                    if self.rx.engine.is_duplicate(seg.imm) {
                        if d.handed {
                            self.cancel_handed(qp);
                        } else {
                            d.state = RxState::Discard { seg, got };
                        }
                        continue;
                    }
                    if d.handed {
                        let Some(p) = &mut self.helpers else {
                            return Err(NetError::internal(format!(
                                "{}: payload handed to no helper",
                                d.name
                            )));
                        };
                        match p.completed(qp) {
                            Ok(0) => return Ok(None),
                            Ok(_) => {
                                d.handed = false;
                                got = len;
                                d.state = RxState::Payload { seg, got };
                            }
                            Err(e) => {
                                d.handed = false;
                                return Ok(Some(NetError::io(
                                    &format!("{}: read", d.name),
                                    &e.to_io(),
                                )));
                            }
                        }
                    }
                    if got < len && d.start == d.end && len - got >= hand_off_min() && !d.hooked() {
                        if self.helpers.is_none() && !self.helpers_failed {
                            self.start_helpers();
                        }
                        let d = &mut self.data[qp];
                        if let (Some(p), Some(Posted { buf, .. })) =
                            (&mut self.helpers, posted(&self.rx, &self.bufs, seg.slot))
                        {
                            let dst = buf
                                .slice_mut(seg.offset as usize + got, len - got)
                                .ok_or_else(|| {
                                    NetError::internal(format!(
                                        "{}: payload outside its buffer",
                                        d.name
                                    ))
                                })?;
                            // SAFETY: the receive buffer stays posted until this segment is placed
                            // (its receive cannot complete without it), or the lane is cancelled
                            // first (duplicate, completion by another copy, failure, drop).
                            if unsafe { p.post(qp, &[], dst.as_mut_ptr(), dst.len()) } {
                                d.handed = true;
                                return Ok(None);
                            }
                        }
                    }
                    let d = &mut self.data[qp];
                    if got < len {
                        let Some(Posted { buf, .. }) = posted(&self.rx, &self.bufs, seg.slot)
                        else {
                            return Err(NetError::remote(format!(
                                "{}: segment for receive slot {} whose receive already completed: sender out of step",
                                d.name, seg.slot
                            )));
                        };
                        let dst = buf
                            .slice_mut(seg.offset as usize + got, len - got)
                            .ok_or_else(|| {
                                NetError::internal(format!(
                                    "{}: payload outside its buffer",
                                    d.name
                                ))
                            })?;
                        let staged = (d.end - d.start).min(dst.len());
                        if staged > 0 {
                            dst[..staged].copy_from_slice(&d.stage[d.start..d.start + staged]);
                            d.start += staged;
                            got += staged;
                        } else {
                            // Large remainders go straight into place, with the stage behind
                            // them for what follows (the next header comes with the payload's
                            // end, and a short read says the socket is empty); small ones go
                            // through the stage alone.
                            d.start = 0;
                            d.end = 0;
                            if drained {
                                return Ok(None);
                            }
                            let direct = dst.len() >= STAGE_BYTES / 2;
                            let want = dst.len();
                            let r = if direct {
                                let mut bufs =
                                    [IoSliceMut::new(dst), IoSliceMut::new(&mut d.stage[..])];
                                read_some_vectored(&mut d.sock, &mut bufs, &d.name)
                            } else {
                                read_some(&mut d.sock, &mut d.stage[..], &d.name)
                            };
                            let ask = if direct {
                                want + STAGE_BYTES
                            } else {
                                STAGE_BYTES
                            };
                            match r {
                                Err(e) => return Ok(Some(e)),
                                Ok(Read::Data(n)) if direct => {
                                    drained = n < ask;
                                    got += n.min(want);
                                    d.end = n.saturating_sub(want);
                                }
                                Ok(Read::Data(n)) => {
                                    drained = n < ask;
                                    d.end = n;
                                }
                                Ok(Read::WouldBlock) => return Ok(None),
                                Ok(Read::Eof) => {
                                    return Ok(Some(NetError::remote(format!(
                                        "{}: peer closed {got} bytes into a {len}-byte segment",
                                        d.name
                                    ))))
                                }
                            }
                        }
                        d.state = RxState::Payload { seg, got };
                        if got < len {
                            if d.blackhole_mid_segment {
                                d.blackhole_mid_segment = false;
                                d.blackholed = true;
                                return Ok(None);
                            }
                            continue;
                        }
                    }
                    if posted(&self.rx, &self.bufs, seg.slot).is_some() {
                        let p = &mut self.bufs[seg.slot as usize];
                        p.placed += u64::from(seg.len);
                        p.end = p.end.max(seg.offset + u64::from(seg.len));
                    }
                    self.rx.engine.arrived(seg.imm, seg.len).map_err(|e| {
                        NetError::remote(format!("{}: protocol error: {e}", d.name))
                    })?;
                    note_ack(d, qp, seg.imm, &mut self.ctrl_out);
                    d.state = RxState::Header;
                }
                RxState::Discard { seg, mut got } => {
                    let len = seg.len as usize;
                    if got < len {
                        let staged = (d.end - d.start).min(len - got);
                        if staged > 0 {
                            d.start += staged;
                            got += staged;
                        } else {
                            d.start = 0;
                            d.end = 0;
                            if drained {
                                return Ok(None);
                            }
                            match read_some(&mut d.sock, &mut d.stage[..], &d.name) {
                                Err(e) => return Ok(Some(e)),
                                Ok(Read::Data(n)) => {
                                    drained = n < STAGE_BYTES;
                                    d.end = n;
                                }
                                Ok(Read::WouldBlock) => return Ok(None),
                                Ok(Read::Eof) => {
                                    return Ok(Some(NetError::remote(format!(
                                    "{}: peer closed {got} bytes into a resent {len}-byte segment",
                                    d.name
                                ))))
                                }
                            }
                        }
                        d.state = RxState::Discard { seg, got };
                        if got < len {
                            continue;
                        }
                    }
                    self.duplicates += 1;
                    note_ack(d, qp, seg.imm, &mut self.ctrl_out);
                    d.state = RxState::Header;
                }
            }
        }
    }

    /// Accepts replacement data streams and swaps each in once its hello names this connection
    /// and a data stream (the sender opens one after draining or losing the old stream, from a
    /// new source port: a new ECMP hash). Bad ones are dropped with a WARN (aggregated), never
    /// fatal; the work per pass is bounded (repath::Inbox).
    #[cold]
    fn accept_replacements(&mut self) {
        let Some(l) = &self.repath else { return };
        self.replacements
            .poll(l, &self.opts, self.passes, &self.ctrl_name);
        while let Some(r) = self.replacements.next_hello() {
            if let Err(e) = self.swap_in(r) {
                let who = self.ctrl_name.clone();
                self.replacements.warn(&who, || {
                    format!("dropped a replacement data stream: {}", e.msg)
                });
            }
        }
    }

    fn swap_in(&mut self, r: PendingHello) -> NetResult<()> {
        let h = Hello::decode(&r.buf)?;
        if h.version != PROTOCOL_VERSION
            || h.secret != self.auth.secret
            || h.conn_id != self.auth.conn_id
        {
            return Err(NetError::remote(format!(
                "from {}: not a stream of this connection (version {}, wrong secret or connection id)",
                r.peer, h.version
            )));
        }
        let q = usize::from(h.stream).wrapping_sub(1);
        if q >= self.data.len() {
            return Err(NetError::remote(format!(
                "from {}: data stream index {} of a {}-stream connection",
                r.peer,
                h.stream,
                self.data.len()
            )));
        }
        let d = &mut self.data[q];
        // The sender replaces a stream only once nothing is due on it (drained) or it failed: what
        // the old one still held is stale.
        if d.handed {
            self.cancel_handed(q);
        }
        let d = &mut self.data[q];
        d.sock = r.sock;
        if let Some(p) = &mut self.helpers {
            use std::os::fd::AsRawFd;
            p.cancel(q, d.sock.as_raw_fd());
        }
        d.state = RxState::Header;
        d.start = 0;
        d.end = 0;
        d.gen = h.gen;
        d.ack_count = 0;
        d.blackholed = false;
        d.slow_every = 0;
        self.ready.replace(q + 1, &d.sock);
        self.repaths += 1;
        tracing::info!(target: "dqplb::net", "{}: replacement stream from {} accepted", d.name, r.peer);
        Ok(())
    }

    #[cfg(test)]
    /// What the test hooks below set on data stream `q` (nothing when there is none).
    fn debug_stream(&mut self, q: usize, set: impl FnOnce(&mut DataRx)) {
        if let Some(d) = self.data.get_mut(q) {
            set(d);
        }
    }

    #[cfg(test)]
    /// Fault injection for tests: stream `q` is no longer read or acknowledged (its bytes pile
    /// up unread, as on a blackholed link) until the sender replaces it.
    #[doc(hidden)]
    pub(crate) fn debug_blackhole_stream(&mut self, q: usize) {
        self.debug_stream(q, |d| d.blackholed = true);
    }

    #[cfg(test)]
    /// Fault injection for tests: as `debug_blackhole_stream`, once stream `q` has placed part
    /// of a segment's payload (the rest of it stays in the socket).
    #[doc(hidden)]
    pub(crate) fn debug_blackhole_mid_segment(&mut self, q: usize) {
        self.debug_stream(q, |d| d.blackhole_mid_segment = true);
    }

    #[cfg(test)]
    /// Test hook: the receive slot of the segment a blackholed stream `q` stopped in.
    #[doc(hidden)]
    pub(crate) fn debug_stopped_in_slot(&self, q: usize) -> Option<u32> {
        match self.data.get(q)? {
            DataRx {
                blackholed: true,
                state: RxState::Payload { seg, .. },
                ..
            } => Some(seg.slot),
            _ => None,
        }
    }

    #[cfg(test)]
    /// Test hook: stream `q` is read only every `every`-th progress pass (a slow path) until it
    /// is replaced.
    #[doc(hidden)]
    pub(crate) fn debug_slow_stream(&mut self, q: usize, every: u32) {
        self.debug_stream(q, |d| d.slow_every = every);
    }

    #[cfg(test)]
    /// Test hook: a blackholed stream `q` is read again (what it still holds is stale).
    #[doc(hidden)]
    pub(crate) fn debug_reopen_stream(&mut self, q: usize) {
        self.debug_stream(q, |d| d.blackholed = false);
    }

    #[cfg(test)]
    /// Test hook: control frames the last pass held back (see `step`) go out now, for tests in
    /// which only the sender moves next.
    pub(crate) fn debug_flush_held(&mut self) {
        self.held = false;
        drain(
            &self.ctrl,
            &mut self.ctrl_out,
            &mut self.ctrl_pos,
            &self.ctrl_name,
        )
        .expect("control stream write");
    }

    #[cfg(test)]
    /// Test hook: replacement streams wait in the re-path listener's backlog while `hold`.
    #[doc(hidden)]
    pub(crate) fn debug_hold_replacements(&mut self, hold: bool) {
        self.hold_replacements = hold;
    }

    #[cfg(test)]
    /// Test hook: replacement streams accepted and still waiting for their hello.
    pub(crate) fn debug_replacements_waiting(&self) -> usize {
        self.replacements.waiting()
    }

    /// Port of the re-path listener replacement streams connect to (None: replacements off).
    pub fn repath_port(&self) -> Option<u16> {
        self.repath
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port())
    }

    /// Data streams replaced so far (tests, stats).
    pub fn repaths(&self) -> u64 {
        self.repaths
    }

    /// Second copies of segments dropped after a path failure (tests, stats).
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    #[cfg(test)]
    /// The raw descriptors of the data streams, in QP order (fault-injection tests).
    pub(crate) fn data_stream_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.data.iter().map(|d| d.sock.as_raw_fd()).collect()
    }
}

impl Drop for TcpRecvComm {
    /// Announcements still queued go out if the socket takes them now (never blocks): a sender
    /// may match sends to receives posted just before the close.
    fn drop(&mut self) {
        // Helpers stop and are joined before the streams close and the buffers go back.
        self.helpers = None;
        let _ = drain(
            &self.ctrl,
            &mut self.ctrl_out,
            &mut self.ctrl_pos,
            &self.ctrl_name,
        );
        // Then every socket is shut down before it closes: the sender learns of the close at
        // once even if a forked child still holds the descriptors.
        self.owner.shutdown(&self.ctrl);
        for d in &self.data {
            self.owner.shutdown(&d.sock);
        }
        if let Some(l) = &self.repath {
            self.owner.shutdown(l);
        }
    }
}
