//! Receiver side of a TCP connection: announces posted buffers on the control stream, reads each
//! segment's payload straight into its buffer at its offset, acks it, and lets the engine order them.

use std::net::TcpStream;

use super::io::{drain, read_some, Read, Readiness, StreamName};
use super::wire::{
    encode_ack, Announce, ConnParams, SegHeader, ACK_BYTES, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use crate::engine::Receiver;
use crate::transport::slots::{Slots, Sticky};
use crate::transport::{NetError, NetResult, UserBuf};

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
    /// The sender closed the stream at a segment boundary.
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
    acks: Vec<u8>,
    acks_pos: usize,
}

/// A posted receive and what the sender's segments placed into it so far.
#[derive(Clone, Copy)]
struct Posted {
    buf: UserBuf,
    /// Payload bytes placed by segments naming this slot.
    placed: u64,
    /// Highest end offset of those segments.
    end: u64,
}

pub struct TcpRecvComm {
    ctrl: TcpStream,
    ctrl_name: StreamName,
    ctrl_out: Vec<u8>,
    ctrl_pos: usize,
    ctrl_closed: bool,
    data: Vec<DataRx>,
    ready: Readiness,
    engine: Receiver,
    slots: Slots<Posted>,
    failed: Sticky,
    params: ConnParams,
}

impl TcpRecvComm {
    pub(super) fn new(
        ctrl: TcpStream,
        data: Vec<TcpStream>,
        params: ConnParams,
    ) -> NetResult<TcpRecvComm> {
        let peer = ctrl
            .peer_addr()
            .map_err(|e| NetError::io("accepted control stream has no peer address", &e))?;
        let window = params.qps as u32 * params.outstanding;
        let n = params.max_messages as usize;
        let engine = Receiver::new(window, n)
            .map_err(|e| NetError::remote(format!("connection parameters from {peer}: {e}")))?;
        let cap = params.outstanding as usize * ACK_BYTES;
        let data: Vec<DataRx> = data
            .into_iter()
            .enumerate()
            .map(|(i, sock)| DataRx {
                sock,
                name: StreamName {
                    peer,
                    index: i as u16 + 1,
                },
                stage: Box::new([0; STAGE_BYTES]),
                start: 0,
                end: 0,
                state: RxState::Header,
                acks: Vec::with_capacity(cap),
                acks_pos: 0,
            })
            .collect();
        let ready = Readiness::new(std::iter::once(&ctrl).chain(data.iter().map(|d| &d.sock)));
        Ok(TcpRecvComm {
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_out: Vec::with_capacity(n * ANNOUNCE_BYTES),
            ctrl_pos: 0,
            ctrl_closed: false,
            data,
            ready,
            engine,
            slots: Slots::new(n),
            failed: Sticky::default(),
            params,
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.params
    }

    pub fn max_requests(&self) -> usize {
        self.slots.len()
    }

    /// Posts one receive buffer and announces it to the sender; None when all slots are busy.
    pub fn irecv(&mut self, buf: UserBuf, tag: i32) -> NetResult<Option<u32>> {
        self.progress()?;
        if self.ctrl_closed {
            return Err(NetError::remote(format!(
                "{}: the sender closed the connection; nothing more will arrive",
                self.ctrl_name
            )));
        }
        let Some(slot) = self.slots.alloc(Posted {
            buf,
            placed: 0,
            end: 0,
        }) else {
            return Ok(None);
        };
        if let Err(e) = self.engine.post(slot, buf.len() as u64) {
            self.slots.cancel(slot);
            let e = NetError::internal(format!(
                "engine refused a receive from {}: {e}",
                self.ctrl_name.peer
            ));
            return Err(self.fail(e));
        }
        let a = Announce {
            slot,
            tag,
            capacity: buf.len() as u64,
        };
        self.ctrl_out.extend_from_slice(&a.encode());
        self.progress()?;
        Ok(Some(slot))
    }

    /// Some(received size) once the message for `slot` arrived completely and in order. A
    /// receive that already completed is reported even if the peer has closed since.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        if let Some(n) = self.slots.take_done(slot) {
            return Ok(Some(n));
        }
        self.progress()?;
        self.slots.test(slot, "receive")
    }

    fn fail(&mut self, e: NetError) -> NetError {
        let who = format!("receive comm from {}", self.ctrl_name.peer);
        self.failed.fail(&who, e)
    }

    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        self.step().map_err(|e| self.fail(e))
    }

    fn step(&mut self) -> NetResult<()> {
        self.ready.poll()?;
        drain(
            &self.ctrl,
            &mut self.ctrl_out,
            &mut self.ctrl_pos,
            &self.ctrl_name,
        )?;
        if self.ready.readable(0) && !self.ctrl_closed {
            // The sender never writes on the control stream: only EOF (it closed) may show up.
            let mut probe = [0u8; 1];
            match read_some(&mut self.ctrl, &mut probe, &self.ctrl_name)? {
                Read::WouldBlock => {}
                Read::Eof => self.ctrl_closed = true,
                Read::Data(_) => {
                    return Err(NetError::remote(format!(
                        "{}: unexpected bytes from the sender",
                        self.ctrl_name
                    )))
                }
            }
        }
        for qp in 0..self.data.len() {
            if self.ready.readable(qp + 1) {
                self.read_stream(qp)?;
            }
            let d = &mut self.data[qp];
            if !d.acks.is_empty() {
                if matches!(d.state, RxState::Closed) {
                    // Nobody is left to read them: the sender closed after its last completion.
                    d.acks.clear();
                    d.acks_pos = 0;
                } else {
                    drain(&d.sock, &mut d.acks, &mut d.acks_pos, &d.name)?;
                }
            }
        }
        while let Some((token, size)) = self.engine.poll_done() {
            // The engine counts a message's bytes by sequence number; the segments must also have
            // named this receive and tiled [0, size) of it, or the sender is out of step.
            if let Some(d) = self
                .data
                .iter()
                .find(|d| matches!(d.state, RxState::Payload { seg, .. } if seg.slot == token))
            {
                return Err(NetError::remote(format!(
                    "{}: receive slot {token} completed by sequence number while a segment for it is still arriving: sender out of step",
                    d.name
                )));
            }
            if let Some(p) = self.slots.active(token) {
                if p.placed != size || p.end != size {
                    return Err(NetError::remote(format!(
                        "{}: receive slot {token} completed with {size} bytes by sequence number, but the segments naming it placed {} bytes ending at offset {}: sender wrote to the wrong slot or offset",
                        self.ctrl_name, p.placed, p.end
                    )));
                }
            }
            self.slots.finish(token, size as usize);
        }
        if self.engine.pending() > 0 && self.data.iter().all(|d| matches!(d.state, RxState::Closed))
        {
            return Err(NetError::remote(format!(
                "{}: the sender closed every stream with {} receive(s) incomplete",
                self.ctrl_name,
                self.engine.pending()
            )));
        }
        Ok(())
    }

    /// Reads every segment available on one data stream (at most `outstanding` can be in flight).
    fn read_stream(&mut self, qp: usize) -> NetResult<()> {
        loop {
            let d = &mut self.data[qp];
            match d.state {
                RxState::Closed => return Ok(()),
                RxState::Header => {
                    if d.end - d.start < SEG_HEADER_BYTES {
                        d.stage.copy_within(d.start..d.end, 0);
                        d.end -= d.start;
                        d.start = 0;
                        match read_some(&mut d.sock, &mut d.stage[d.end..], &d.name)? {
                            Read::Data(n) => d.end += n,
                            Read::WouldBlock => return Ok(()),
                            Read::Eof if d.end == 0 => {
                                d.state = RxState::Closed;
                                return Ok(());
                            }
                            Read::Eof => {
                                return Err(NetError::remote(format!(
                                    "{}: peer closed in the middle of a segment header",
                                    d.name
                                )))
                            }
                        }
                        continue;
                    }
                    let mut hdr = [0u8; SEG_HEADER_BYTES];
                    hdr.copy_from_slice(&d.stage[d.start..d.start + SEG_HEADER_BYTES]);
                    d.start += SEG_HEADER_BYTES;
                    let seg = SegHeader::decode(&hdr)
                        .map_err(|e| NetError::remote(format!("{}: {}", d.name, e.msg)))?;
                    let fits = self.slots.active(seg.slot).is_some_and(|p| {
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
                    if got < len {
                        let Some(Posted { buf, .. }) = self.slots.active(seg.slot) else {
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
                            // Large remainders go straight into place; small ones through the
                            // stage so the next header comes with them.
                            let direct = dst.len() >= STAGE_BYTES / 2;
                            if !direct {
                                d.start = 0;
                                d.end = 0;
                            }
                            let into: &mut [u8] = if direct { dst } else { &mut d.stage[..] };
                            match read_some(&mut d.sock, into, &d.name)? {
                                Read::Data(n) if direct => got += n,
                                Read::Data(n) => d.end = n,
                                Read::WouldBlock => return Ok(()),
                                Read::Eof => {
                                    return Err(NetError::remote(format!(
                                        "{}: peer closed {got} bytes into a {len}-byte segment",
                                        d.name
                                    )))
                                }
                            }
                        }
                        d.state = RxState::Payload { seg, got };
                        if got < len {
                            continue;
                        }
                    }
                    if let Some(p) = self.slots.active_mut(seg.slot) {
                        p.placed += u64::from(seg.len);
                        p.end = p.end.max(seg.offset + u64::from(seg.len));
                    }
                    self.engine.arrived(seg.imm, seg.len).map_err(|e| {
                        NetError::remote(format!("{}: protocol error: {e}", d.name))
                    })?;
                    d.acks.extend_from_slice(&encode_ack(seg.imm));
                    d.state = RxState::Header;
                }
            }
        }
    }
}
