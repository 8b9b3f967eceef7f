//! Sender side of a TCP connection: matches isends to the receiver's announcements, feeds the engine,
//! writes its segments (header + payload straight from the user buffer) and turns acks into CQEs.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::TcpStream;
use std::time::Instant;

use super::io::{fill, read_some, write_some, Fill, Read, Readiness, StreamName};
use super::wire::{
    decode_ack, Announce, ConnParams, SegHeader, ACK_BYTES, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use crate::engine::{EngineParams, QpStats, Sender};
use crate::transport::slots::{check_send_matches, Slots, Sticky};
use crate::transport::{NetError, NetResult, UserBuf};

/// One segment on its way out of a data stream.
struct TxSeg {
    imm: u32,
    hdr: [u8; SEG_HEADER_BYTES],
    buf: UserBuf,
    off: usize,
    len: usize,
    written: usize,
}

struct DataTx {
    sock: TcpStream,
    name: StreamName,
    queue: VecDeque<TxSeg>,
    ack: [u8; ACK_BYTES],
    ack_got: usize,
    /// Immediates of segments fully written and not yet acknowledged, oldest first.
    unacked: VecDeque<u32>,
    /// The receiver closed this stream (orderly, with nothing of ours left unacknowledged).
    closed: bool,
}

/// An in-flight send: its buffer and the receive slot the peer announced for it.
#[derive(Clone, Copy)]
struct Active {
    buf: UserBuf,
    remote_slot: u32,
}

pub struct TcpSendComm {
    ctrl: TcpStream,
    ctrl_name: StreamName,
    ctrl_in: [u8; ANNOUNCE_BYTES],
    ctrl_got: usize,
    /// The receiver closed its control stream: no announcement will come any more.
    ctrl_closed: bool,
    announces: VecDeque<Announce>,
    data: Vec<DataTx>,
    ready: Readiness,
    engine: Sender,
    slots: Slots<Active>,
    failed: Sticky,
    epoch: Instant,
    params: ConnParams,
}

impl TcpSendComm {
    pub(super) fn new(
        ctrl: TcpStream,
        data: Vec<TcpStream>,
        params: ConnParams,
    ) -> NetResult<TcpSendComm> {
        let peer = ctrl
            .peer_addr()
            .map_err(|e| NetError::io("connected control stream has no peer address", &e))?;
        let engine = Sender::new(&EngineParams {
            qps: params.qps as usize,
            max_outstanding: params.outstanding,
            segment_bytes: params.segment_bytes,
            max_messages: params.max_messages as usize,
            policy: params.policy,
        })
        .map_err(|e| NetError::invalid_argument(format!("engine parameters for {peer}: {e}")))?;
        let cap = params.outstanding as usize;
        let data: Vec<DataTx> = data
            .into_iter()
            .enumerate()
            .map(|(i, sock)| DataTx {
                sock,
                name: StreamName {
                    peer,
                    index: i as u16 + 1,
                },
                queue: VecDeque::with_capacity(cap),
                ack: [0; ACK_BYTES],
                ack_got: 0,
                unacked: VecDeque::with_capacity(cap),
                closed: false,
            })
            .collect();
        let ready = Readiness::new(std::iter::once(&ctrl).chain(data.iter().map(|d| &d.sock)));
        let n = params.max_messages as usize;
        Ok(TcpSendComm {
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_in: [0; ANNOUNCE_BYTES],
            ctrl_got: 0,
            ctrl_closed: false,
            announces: VecDeque::with_capacity(n),
            data,
            ready,
            engine,
            slots: Slots::new(n),
            failed: Sticky::default(),
            epoch: Instant::now(),
            params,
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.params
    }

    pub fn max_requests(&self) -> usize {
        self.slots.len()
    }

    pub fn qp_stats(&self) -> &[QpStats] {
        self.engine.qp_stats()
    }

    /// Local/peer addresses of the data streams (for path shaping and logs).
    pub fn data_stream_addrs(&self) -> Vec<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.data
            .iter()
            .filter_map(|d| Some((d.sock.local_addr().ok()?, d.sock.peer_addr().ok()?)))
            .collect()
    }

    /// Starts sending `buf` once the receiver has announced a buffer; None means "try again".
    pub fn isend(&mut self, buf: UserBuf, tag: i32) -> NetResult<Option<u32>> {
        self.progress()?;
        let Some(&ann) = self.announces.front() else {
            if self.ctrl_closed {
                return Err(NetError::remote(format!(
                    "{}: the receiver closed the connection; no receive will be posted for this send",
                    self.ctrl_name
                )));
            }
            return Ok(None);
        };
        check_send_matches(&self.ctrl_name.peer, buf.len(), tag, ann.capacity, ann.tag)?;
        let Some(slot) = self.slots.alloc(Active {
            buf,
            remote_slot: ann.slot,
        }) else {
            return Ok(None);
        };
        self.announces.pop_front();
        if let Err(e) = self.engine.post(slot, buf.len() as u64) {
            let e = NetError::internal(format!(
                "engine refused a send to {}: {e}",
                self.ctrl_name.peer
            ));
            return Err(self.fail(e));
        }
        // Put the first segments on the wire now rather than at the next test().
        self.progress()?;
        Ok(Some(slot))
    }

    /// Completion of request `slot`: Some(size) once every segment was acknowledged. A request
    /// that already completed is reported even if the peer has closed since.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        if let Some(n) = self.slots.take_done(slot) {
            return Ok(Some(n));
        }
        self.progress()?;
        self.slots.test(slot, "send")
    }

    fn fail(&mut self, e: NetError) -> NetError {
        let who = format!("send comm to {}", self.ctrl_name.peer);
        self.failed.fail(&who, e)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Moves everything that can move without blocking.
    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        self.step().map_err(|e| self.fail(e))
    }

    fn step(&mut self) -> NetResult<()> {
        self.ready.poll()?;
        if self.ready.readable(0) {
            self.read_announces()?;
        }
        self.read_acks()?;
        self.schedule()?;
        self.write_segments()?;
        while let Some(token) = self.engine.poll_done() {
            if let Some(a) = self.slots.active(token) {
                self.slots.finish(token, a.buf.len());
            }
        }
        Ok(())
    }

    fn read_announces(&mut self) -> NetResult<()> {
        while !self.ctrl_closed {
            match fill(
                &mut self.ctrl,
                &mut self.ctrl_in,
                &mut self.ctrl_got,
                &self.ctrl_name,
            )? {
                Fill::Partial => return Ok(()),
                Fill::Eof if self.ctrl_got == 0 => self.ctrl_closed = true,
                Fill::Eof => {
                    return Err(NetError::remote(format!(
                        "{}: peer closed in the middle of an announcement",
                        self.ctrl_name
                    )))
                }
                Fill::Full => {
                    self.ctrl_got = 0;
                    let a = Announce::decode(&self.ctrl_in)
                        .map_err(|e| NetError::remote(format!("{}: {}", self.ctrl_name, e.msg)))?;
                    if self.announces.len() >= self.slots.len() {
                        return Err(NetError::remote(format!(
                            "{}: peer announced more than {} receive buffers",
                            self.ctrl_name,
                            self.slots.len()
                        )));
                    }
                    self.announces.push_back(a);
                }
            }
        }
        Ok(())
    }

    /// Turns acknowledgements into engine completions. An ack must name the oldest segment its
    /// stream finished writing; anything else (or bytes while none is unacknowledged) is an error.
    fn read_acks(&mut self) -> NetResult<()> {
        let now = self.now();
        for qp in 0..self.data.len() {
            if !self.ready.readable(qp + 1) {
                continue;
            }
            let d = &mut self.data[qp];
            while !d.closed {
                let Some(&want) = d.unacked.front() else {
                    // No ack is due: only EOF may arrive; anything else is a protocol error.
                    let mut probe = [0u8; 1];
                    match read_some(&mut d.sock, &mut probe, &d.name)? {
                        Read::WouldBlock => break,
                        Read::Eof => close_stream(d)?,
                        Read::Data(_) => {
                            return Err(NetError::remote(format!(
                            "{}: bytes arrived while no written segment awaits an acknowledgement",
                            d.name
                        )))
                        }
                    }
                    continue;
                };
                match fill(&mut d.sock, &mut d.ack, &mut d.ack_got, &d.name)? {
                    Fill::Partial => break,
                    Fill::Eof => close_stream(d)?,
                    Fill::Full => {
                        d.ack_got = 0;
                        let imm = decode_ack(&d.ack)
                            .map_err(|e| NetError::remote(format!("{}: {}", d.name, e.msg)))?;
                        if imm != want {
                            return Err(NetError::remote(format!(
                                "{}: acknowledgement for immediate {imm:#x}, expected {want:#x} (the oldest unacknowledged segment)",
                                d.name
                            )));
                        }
                        d.unacked.pop_front();
                        self.engine.completed(qp, now).map_err(|e| {
                            NetError::remote(format!(
                                "{}: acknowledgement without a segment in flight: {e}",
                                d.name
                            ))
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    fn schedule(&mut self) -> NetResult<()> {
        let now = self.now();
        while let Some(t) = self.engine.poll_transmit(now) {
            let Some(Active { buf, remote_slot }) = self.slots.active(t.token) else {
                return Err(NetError::internal(format!(
                    "engine scheduled a segment of unknown request {}",
                    t.token
                )));
            };
            let d = &mut self.data[t.qp];
            if d.closed {
                return Err(NetError::remote(format!(
                    "{}: the receiver closed this stream",
                    d.name
                )));
            }
            let hdr = SegHeader {
                imm: t.imm,
                slot: remote_slot,
                offset: t.offset,
                len: t.len,
            }
            .encode();
            d.queue.push_back(TxSeg {
                imm: t.imm,
                hdr,
                buf,
                off: t.offset as usize,
                len: t.len as usize,
                written: 0,
            });
        }
        Ok(())
    }

    fn write_segments(&mut self) -> NetResult<()> {
        for d in &mut self.data {
            while let Some(seg) = d.queue.front_mut() {
                let total = SEG_HEADER_BYTES + seg.len;
                let payload = seg.buf.slice(seg.off, seg.len).ok_or_else(|| {
                    NetError::internal(format!("{}: segment outside its send buffer", d.name))
                })?;
                let n = if seg.written < SEG_HEADER_BYTES {
                    let bufs = [IoSlice::new(&seg.hdr[seg.written..]), IoSlice::new(payload)];
                    write_some(&d.sock, &bufs, &d.name)?
                } else {
                    let done = seg.written - SEG_HEADER_BYTES;
                    write_some(&d.sock, &[IoSlice::new(&payload[done..])], &d.name)?
                };
                if n == 0 {
                    break;
                }
                seg.written += n;
                if seg.written == total {
                    d.unacked.push_back(seg.imm);
                    d.queue.pop_front();
                }
            }
        }
        Ok(())
    }
}

/// The receiver closed a data stream: fine when nothing of ours is still due on it.
fn close_stream(d: &mut DataTx) -> NetResult<()> {
    if !d.unacked.is_empty() || !d.queue.is_empty() || d.ack_got != 0 {
        return Err(NetError::remote(format!(
            "{}: peer closed the connection with {} segment(s) unacknowledged",
            d.name,
            d.unacked.len() + d.queue.len()
        )));
    }
    d.closed = true;
    Ok(())
}
