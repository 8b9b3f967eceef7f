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

pub struct TcpRecvComm {
    ctrl: TcpStream,
    ctrl_name: StreamName,
    ctrl_out: Vec<u8>,
    ctrl_pos: usize,
    data: Vec<DataRx>,
    engine: Receiver,
    slots: Slots<UserBuf>,
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
        let Some(slot) = self.slots.alloc(buf) else {
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
                    let fits = self
                        .slots
                        .active(seg.slot)
                        .is_some_and(|b| b.slice(seg.offset as usize, seg.len as usize).is_some());
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
                        let Some(buf) = self.slots.active(seg.slot) else {
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
