//! Sender side of a TCP connection: matches isends to the receiver's announcements, feeds the engine,
//! writes its segments (header + payload straight from the user buffer) and turns acks into CQEs.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::TcpStream;
use std::time::Instant;

use super::io::{fill, read_some, write_some, StreamName};
use super::wire::{
    decode_ack, Announce, ConnParams, SegHeader, ACK_BYTES, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use crate::engine::{EngineParams, QpStats, Sender};
use crate::transport::slots::{Slots, Sticky};
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
    announces: VecDeque<Announce>,
    data: Vec<DataTx>,
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
        let data = data
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
            })
            .collect();
        let n = params.max_messages as usize;
        Ok(TcpSendComm {
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_in: [0; ANNOUNCE_BYTES],
            ctrl_got: 0,
            announces: VecDeque::with_capacity(n),
            data,
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
            return Ok(None);
        };
        if buf.len() as u64 > ann.capacity {
            return Err(NetError::invalid_usage(format!(
                "isend of {} bytes to {} exceeds the receive buffer of {} bytes the peer posted (tag {}): NCCL requires receive >= send",
                buf.len(),
                self.ctrl_name.peer,
                ann.capacity,
                ann.tag
            )));
        }
        if ann.tag != tag {
            return Err(NetError::invalid_usage(format!(
                "isend tag {tag} to {} does not match the tag {} of the receive the peer posted next",
                self.ctrl_name.peer, ann.tag
            )));
        }
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
            let who = self.who();
            return Err(self.failed.fail(&who, e));
        }
        self.progress()?;
        Ok(Some(slot))
    }

    /// Completion of request `slot`: Some(size) once every segment was acknowledged.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.progress()?;
        self.slots.test(slot, "send")
    }

    fn who(&self) -> String {
        format!("send comm to {}", self.ctrl_name.peer)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Moves everything that can move without blocking.
    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        self.step().map_err(|e| {
            let who = format!("send comm to {}", self.ctrl_name.peer);
            self.failed.fail(&who, e)
        })
    }

    fn step(&mut self) -> NetResult<()> {
        self.read_announces()?;
        for _round in 0..4 {
            let acked = self.read_acks()?;
            let queued = self.schedule()?;
            let wrote = self.write_segments()?;
            while let Some(token) = self.engine.poll_done() {
                if let Some(a) = self.slots.active(token) {
                    self.slots.finish(token, a.buf.len());
                }
            }
            if !acked && !queued && !wrote {
                break;
            }
        }
        Ok(())
    }

    fn read_announces(&mut self) -> NetResult<()> {
        loop {
            if !fill(
                &mut self.ctrl,
                &mut self.ctrl_in,
                &mut self.ctrl_got,
                &self.ctrl_name,
            )? {
                return Ok(());
            }
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

    /// Turns acknowledgements into engine completions. An ack must name the oldest segment this
    /// stream finished writing; anything else (or bytes while none is unacknowledged) is an error.
    fn read_acks(&mut self) -> NetResult<bool> {
        let mut any = false;
        let now = self.now();
        for qp in 0..self.data.len() {
            let d = &mut self.data[qp];
            while let Some(&want) = d.unacked.front() {
                if !fill(&mut d.sock, &mut d.ack, &mut d.ack_got, &d.name)? {
                    break;
                }
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
                any = true;
            }
            if d.unacked.is_empty() {
                // No ack is due: anything arriving is a protocol error, or EOF. Look for it.
                let mut probe = [0u8; 1];
                if read_some(&mut d.sock, &mut probe, &d.name)? != 0 {
                    return Err(NetError::remote(format!(
                        "{}: bytes arrived while no written segment awaits an acknowledgement",
                        d.name
                    )));
                }
            }
        }
        Ok(any)
    }

    fn schedule(&mut self) -> NetResult<bool> {
        let mut any = false;
        let now = self.now();
        while let Some(t) = self.engine.poll_transmit(now) {
            let Some(Active { buf, remote_slot }) = self.slots.active(t.token) else {
                return Err(NetError::internal(format!(
                    "engine scheduled a segment of unknown request {}",
                    t.token
                )));
            };
            let hdr = SegHeader {
                imm: t.imm,
                slot: remote_slot,
                offset: t.offset,
                len: t.len,
            }
            .encode();
            let d = &mut self.data[t.qp];
            d.queue.push_back(TxSeg {
                imm: t.imm,
                hdr,
                buf,
                off: t.offset as usize,
                len: t.len as usize,
                written: 0,
            });
            any = true;
        }
        Ok(any)
    }

    fn write_segments(&mut self) -> NetResult<bool> {
        let mut any = false;
        for d in &mut self.data {
            while let Some(seg) = d.queue.front_mut() {
                let total = SEG_HEADER_BYTES + seg.len;
                let payload = seg.buf.slice(seg.off, seg.len).ok_or_else(|| {
                    NetError::internal(format!("{}: segment outside its send buffer", d.name))
                })?;
                let n = if seg.written < SEG_HEADER_BYTES {
                    let bufs = [IoSlice::new(&seg.hdr[seg.written..]), IoSlice::new(payload)];
                    write_some(&mut d.sock, &bufs, &d.name)?
                } else {
                    let done = seg.written - SEG_HEADER_BYTES;
                    write_some(&mut d.sock, &[IoSlice::new(&payload[done..])], &d.name)?
                };
                if n == 0 {
                    break;
                }
                any = true;
                seg.written += n;
                if seg.written == total {
                    d.unacked.push_back(seg.imm);
                    d.queue.pop_front();
                }
            }
        }
        Ok(any)
    }
}
