//! Receiver side of a TCP connection: announces posted buffers on the control stream, reads each
//! segment's payload straight into its buffer at its offset, acks it, and lets the engine order them.

use std::net::TcpStream;

use super::io::{drain, fill, read_some, StreamName};
use super::wire::{
    encode_ack, Announce, ConnParams, SegHeader, ACK_BYTES, ANNOUNCE_BYTES, SEG_HEADER_BYTES,
};
use crate::engine::Receiver;
use crate::transport::slots::{Slots, Sticky};
use crate::transport::{NetError, NetResult, UserBuf};

/// Where a data stream is in its byte sequence.
#[derive(Clone, Copy)]
enum RxState {
    Header { got: usize },
    Payload { seg: SegHeader, got: usize },
}

struct DataRx {
    sock: TcpStream,
    name: StreamName,
    hdr: [u8; SEG_HEADER_BYTES],
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
    data: Vec<DataRx>,
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
        let data = data
            .into_iter()
            .enumerate()
            .map(|(i, sock)| DataRx {
                sock,
                name: StreamName {
                    peer,
                    index: i as u16 + 1,
                },
                hdr: [0; SEG_HEADER_BYTES],
                state: RxState::Header { got: 0 },
                acks: Vec::with_capacity(cap),
                acks_pos: 0,
            })
            .collect();
        Ok(TcpRecvComm {
            ctrl,
            ctrl_name: StreamName { peer, index: 0 },
            ctrl_out: Vec::with_capacity(n * ANNOUNCE_BYTES),
            ctrl_pos: 0,
            data,
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
            let who = self.who();
            return Err(self.failed.fail(&who, e));
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

    /// Some(received size) once the message for `slot` arrived completely and in order.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        self.progress()?;
        self.slots.test(slot, "receive")
    }

    fn who(&self) -> String {
        format!("receive comm from {}", self.ctrl_name.peer)
    }

    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        self.step().map_err(|e| {
            let who = format!("receive comm from {}", self.ctrl_name.peer);
            self.failed.fail(&who, e)
        })
    }

    fn step(&mut self) -> NetResult<()> {
        drain(
            &mut self.ctrl,
            &mut self.ctrl_out,
            &mut self.ctrl_pos,
            &self.ctrl_name,
        )?;
        if self.ctrl_out.is_empty() {
            // The sender never writes on the control stream: only EOF or garbage can show up.
            let mut probe = [0u8; 1];
            if read_some(&mut self.ctrl, &mut probe, &self.ctrl_name)? != 0 {
                return Err(NetError::remote(format!(
                    "{}: unexpected bytes from the sender",
                    self.ctrl_name
                )));
            }
        }
        for qp in 0..self.data.len() {
            self.read_stream(qp)?;
            let d = &mut self.data[qp];
            drain(&mut d.sock, &mut d.acks, &mut d.acks_pos, &d.name)?;
        }
        while let Some((token, size)) = self.engine.poll_done() {
            // The engine counts a message's bytes by sequence number; the segments must also have
            // named this receive and tiled [0, size) of it, or the sender is out of step.
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
        Ok(())
    }

    /// Reads up to a bounded number of segments from one data stream (fairness across streams).
    fn read_stream(&mut self, qp: usize) -> NetResult<()> {
        for _ in 0..8 {
            let d = &mut self.data[qp];
            match d.state {
                RxState::Header { mut got } => {
                    let full = fill(&mut d.sock, &mut d.hdr, &mut got, &d.name)?;
                    d.state = RxState::Header { got };
                    if !full {
                        return Ok(());
                    }
                    let seg = SegHeader::decode(&d.hdr)
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
                    if got < seg.len as usize {
                        let Some(Posted { buf, .. }) = self.slots.active(seg.slot) else {
                            return Err(NetError::internal(format!(
                                "{}: receive slot {} vanished",
                                d.name, seg.slot
                            )));
                        };
                        let dst = buf
                            .slice_mut(seg.offset as usize + got, seg.len as usize - got)
                            .ok_or_else(|| {
                                NetError::internal(format!(
                                    "{}: payload outside its buffer",
                                    d.name
                                ))
                            })?;
                        let n = read_some(&mut d.sock, dst, &d.name)?;
                        got += n;
                        d.state = RxState::Payload { seg, got };
                        if n == 0 {
                            return Ok(());
                        }
                        if got < seg.len as usize {
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
                    d.state = RxState::Header { got: 0 };
                }
            }
        }
        Ok(())
    }
}
