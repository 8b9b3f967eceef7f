//! Receiver side of a verbs connection: announces each posted buffer by RDMA-writing a FIFO entry
//! into the sender's FIFO (control QP, WRITE_WITH_IMM carrying the FIFO index), feeds data-QP
//! receive CQEs to the engine, replenishes zero-length receives, completes messages in order.

use std::collections::VecDeque;
use std::io::Read;
use std::net::TcpStream;

use super::completion::{WorkCompletion, POLL_BATCH};
use super::fifo::{FifoEntry, FIFO_ENTRY_BYTES};
use super::peer::PeerWatch;
use super::qpset::{QpRole, QpSet};
use super::resources::{MemoryRegion, RegisteredBuffer, RemoteSlice};
use super::send::verr;
use crate::engine::Receiver;
use crate::transport::slots::{Slots, Sticky};
use crate::transport::tcp::ConnParams;
use crate::transport::{NetError, NetResult, UserBuf};

/// Byte the sender writes on the bootstrap socket once its QPs can receive announcements.
pub(super) const READY: u8 = 0x52;

pub struct VerbsRecvComm {
    qps: QpSet,
    /// Bootstrap socket: until the sender's READY byte arrives, announcements wait.
    boot: Option<TcpStream>,
    /// The same socket after READY, watched for the sender's exit.
    watch: Option<PeerWatch>,
    staging: RegisteredBuffer,
    fifo: RemoteSlice,
    fifo_len: u32,
    announced: u32,
    waiting: VecDeque<u32>,
    engine: Receiver,
    slots: Slots<()>,
    wcs: [WorkCompletion; POLL_BATCH],
    failed: Sticky,
    params: ConnParams,
    peer: String,
}

impl VerbsRecvComm {
    /// Takes a connected QP set whose data QPs have receives posted; `fifo` is the sender's FIFO.
    pub(super) fn new(
        qps: QpSet,
        boot: TcpStream,
        fifo: RemoteSlice,
        params: ConnParams,
        peer: String,
    ) -> NetResult<Self> {
        let n = params.max_messages as usize;
        let window = params.qps as u32 * params.outstanding;
        let engine = Receiver::new(window, n)
            .map_err(|e| NetError::remote(format!("connection parameters from {peer}: {e}")))?;
        let staging = RegisteredBuffer::new(qps.pd(), n * FIFO_ENTRY_BYTES).map_err(verr)?;
        Ok(VerbsRecvComm {
            qps,
            boot: Some(boot),
            watch: None,
            staging,
            fifo,
            fifo_len: n as u32,
            announced: 0,
            waiting: VecDeque::with_capacity(n),
            engine,
            slots: Slots::new(n),
            wcs: [WorkCompletion::default(); POLL_BATCH],
            failed: Sticky::default(),
            params,
            peer,
        })
    }

    pub fn params(&self) -> &ConnParams {
        &self.params
    }

    pub fn max_requests(&self) -> usize {
        self.slots.len()
    }

    pub fn qp_set(&self) -> &QpSet {
        &self.qps
    }

    /// One-line state summary for logs and stall diagnostics.
    pub fn debug_state(&self) -> String {
        format!(
            "recv from {}: expected seq {}, {} posted, {} pending, {} announced, {} waiting, ready {}, failed: {:?}",
            self.peer,
            self.engine.expected_seq(),
            self.engine.posted(),
            self.engine.pending(),
            self.announced,
            self.waiting.len(),
            self.boot.is_none(),
            self.failed.check().err().map(|e| e.msg)
        )
    }

    /// Posts one receive buffer (registered in `mr`) and announces it; None when all slots are
    /// busy.
    pub fn irecv(
        &mut self,
        buf: UserBuf,
        tag: i32,
        mr: Option<&MemoryRegion>,
    ) -> NetResult<Option<u32>> {
        super::send::covers(mr, &buf, "irecv")?;
        let rkey = mr.map(MemoryRegion::rkey).unwrap_or(0);
        self.progress()?;
        let Some(slot) = self.slots.alloc(()) else {
            return Ok(None);
        };
        if let Err(e) = self.engine.post(slot, buf.len() as u64) {
            self.slots.cancel(slot);
            return Err(self.fail(NetError::internal(format!(
                "engine refused a receive from {}: {e}",
                self.peer
            ))));
        }
        let entry = FifoEntry {
            addr: buf.addr() as u64,
            rkey,
            slot,
            capacity: buf.len() as u64,
            tag,
            seq: 0, // set when announced
        };
        let off = slot as usize * FIFO_ENTRY_BYTES;
        self.staging.write(off, &entry.encode()).map_err(verr)?;
        self.waiting.push_back(slot);
        self.progress()?;
        Ok(Some(slot))
    }

    /// Some(received size) once the message for `slot` arrived completely and in order.
    pub fn test(&mut self, slot: u32) -> NetResult<Option<usize>> {
        // A request that already completed is reported even if the peer has gone since.
        if let Some(n) = self.slots.take_done(slot) {
            return Ok(Some(n));
        }
        self.progress()?;
        let done = self.slots.test(slot, "receive")?;
        if done.is_none() {
            if let Some(w) = self.watch.as_mut() {
                if w.gone() {
                    let e = NetError::remote(format!(
                        "{} {} while receive {slot} was still pending",
                        self.peer,
                        w.why()
                    ));
                    return Err(self.fail(e));
                }
            }
        }
        Ok(done)
    }

    fn fail(&mut self, e: NetError) -> NetError {
        let who = format!("verbs receive comm from {}", self.peer);
        self.failed.fail(&who, e)
    }

    /// Moves everything that can move without blocking (never sleeps).
    pub fn progress(&mut self) -> NetResult<()> {
        self.failed.check()?;
        match self.step() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn step(&mut self) -> NetResult<()> {
        self.check_ready()?;
        self.announce()?;
        self.reap_control()?;
        self.reap_data()?;
        while let Some((token, size)) = self.engine.poll_done() {
            self.slots.finish(token, size as usize);
        }
        Ok(())
    }

    /// Reads the sender's READY byte; the bootstrap socket is dropped after it.
    fn check_ready(&mut self) -> NetResult<()> {
        let Some(sock) = self.boot.as_mut() else {
            return Ok(());
        };
        let mut b = [0u8; 1];
        match sock.read(&mut b) {
            Ok(1) if b[0] == READY => {
                self.watch = self.boot.take().map(PeerWatch::new);
                Ok(())
            }
            Ok(0) => Err(NetError::remote(format!(
                "{}: bootstrap socket closed before the sender was ready",
                self.peer
            ))),
            Ok(_) => Err(NetError::remote(format!(
                "{}: bootstrap byte {:#x}, expected READY",
                self.peer, b[0]
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(NetError::io(&format!("{}: bootstrap read", self.peer), &e)),
        }
    }

    fn announce(&mut self) -> NetResult<()> {
        if self.boot.is_some() {
            return Ok(());
        }
        while let Some(slot) = self.waiting.pop_front() {
            let off = slot as usize * FIFO_ENTRY_BYTES;
            let seq = self.announced;
            self.staging
                .write(off + 28, &seq.to_le_bytes())
                .map_err(verr)?;
            let idx = seq % self.fifo_len;
            let local = self
                .staging
                .mr()
                .local(off, FIFO_ENTRY_BYTES)
                .map_err(verr)?;
            let remote = RemoteSlice {
                addr: self.fifo.addr + u64::from(idx) * FIFO_ENTRY_BYTES as u64,
                rkey: self.fifo.rkey,
            };
            self.qps
                .control()
                .post_write(u64::from(slot), local, remote, Some(idx), true)
                .map_err(verr)?;
            self.announced = self.announced.wrapping_add(1);
        }
        Ok(())
    }

    fn reap_control(&mut self) -> NetResult<()> {
        loop {
            let n = self.qps.poll_send(&mut self.wcs).map_err(verr)?;
            for i in 0..n {
                let wc = self.wcs[i];
                self.qps.check(&wc).map_err(|e| {
                    NetError::remote(format!("{}: announcement failed: {e}", self.peer))
                })?;
            }
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }

    fn reap_data(&mut self) -> NetResult<()> {
        loop {
            let n = self.qps.poll_recv(&mut self.wcs).map_err(verr)?;
            for i in 0..n {
                let wc = self.wcs[i];
                self.qps
                    .check(&wc)
                    .map_err(|e| NetError::remote(format!("{}: {e}", self.peer)))?;
                let Some(QpRole::Data(q)) = self.qps.role_of(wc.qp_num) else {
                    return Err(NetError::remote(format!(
                        "{}: receive completion on non-data QP {}",
                        self.peer, wc.qp_num
                    )));
                };
                let imm = wc.imm.ok_or_else(|| {
                    NetError::remote(format!("{}: data segment without immediate", self.peer))
                })?;
                self.engine
                    .arrived(imm, wc.byte_len)
                    .map_err(|e| NetError::remote(format!("{}: protocol error: {e}", self.peer)))?;
                self.qps
                    .data(q)
                    .and_then(|qp| qp.post_recv(wc.wr_id))
                    .map_err(verr)?;
            }
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }
}
