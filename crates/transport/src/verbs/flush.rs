//! iflush for GPUDirect receives: one RDMA READ from the last non-empty received buffer into a
//! small host buffer over a QP connected to itself, completed through test() (net_ib's gpuFlush).

use super::completion::{WorkCompletion, POLL_BATCH};
use super::domain::VerbsDomain;
use super::error::{Result, VerbsError};
use super::qp::{QpCaps, QpEndpoint, RcQp};
use super::resources::{CompletionQueue, RegisteredBuffer, RemoteSlice};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    Posted,
    Done,
}

/// Reads posted and completed by one flusher (plain counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushCounters {
    pub reads_posted: u64,
    pub reads_completed: u64,
    pub polls: u64,
}

/// The flush QP of one receive comm, its own CQ and its host landing byte. net_ib creates the same
/// in ncclIbAccept when flushEnabled (NCCL 2.28.3 src/transport/net_ib.cc: gpuFlush.hostMr of
/// sizeof(int), a QP with LOCAL_WRITE | REMOTE_READ moved to RTR with its own QPN and GID).
pub struct Flusher {
    // the QP goes before the CQ and the buffer it uses
    qp: RcQp,
    cq: Arc<CompletionQueue>,
    host: RegisteredBuffer,
    slots: Box<[Slot]>,
    wcs: [WorkCompletion; POLL_BATCH],
    counters: FlushCounters,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Flusher({:?}, {} slots)", self.qp, self.slots.len())
    }
}

impl Flusher {
    /// A flusher with room for `slots` flushes in flight (one per receive request at most).
    pub fn new(domain: &VerbsDomain, slots: usize) -> Result<Flusher> {
        let depth = u32::try_from(slots.max(1))
            .map_err(|_| VerbsError::invalid(format!("{slots} flush slots")))?;
        let pd = domain.pd();
        let cq = CompletionQueue::new(pd.context(), depth)?;
        let caps = QpCaps {
            max_send_wr: depth,
            max_recv_wr: 1,
        };
        let port = domain.port();
        let qp = RcQp::new(pd, &cq, &cq, None, port.port, caps)?;
        let (sgid, gid) = match port.gid {
            Some(g) => (g.index, g.gid),
            None => (0, [0u8; 16]),
        };
        let me = QpEndpoint {
            qpn: qp.qpn(),
            psn: qp.qpn() & 0xff_ffff,
            gid,
            lid: port.lid,
            mtu: port.active_mtu,
        };
        qp.connect(&me, sgid, &me, domain.tuning())?;
        let host = RegisteredBuffer::new(pd, 64)?;
        Ok(Flusher {
            qp,
            cq,
            host,
            slots: vec![Slot::Free; slots.max(1)].into_boxed_slice(),
            wcs: [WorkCompletion::default(); POLL_BATCH],
            counters: FlushCounters::default(),
        })
    }

    pub fn counters(&self) -> &FlushCounters {
        &self.counters
    }

    /// The byte the latest completed READ fetched (tests: it must equal the first byte of the
    /// flushed buffer).
    pub fn landed_byte(&self) -> Result<u8> {
        let mut b = [0u8; 1];
        self.host.read(0, &mut b)?;
        Ok(b[0])
    }

    /// Flushes in flight or completed and not yet tested.
    pub fn in_use(&self) -> usize {
        self.slots.iter().filter(|s| **s != Slot::Free).count()
    }

    /// Posts the READ of one byte at `remote` (net_ib: sge length 1 into the host int) and returns
    /// the slot test() completes.
    pub fn post(&mut self, remote: RemoteSlice) -> Result<u32> {
        let Some(i) = self.slots.iter().position(|s| *s == Slot::Free) else {
            return Err(VerbsError::invalid(format!(
                "iflush on {}: all {} flush slots in use (more flushes than receive requests)",
                self.qp.device(),
                self.slots.len()
            )));
        };
        let local = self.host.mr().local(0, 1)?;
        self.qp.post_read(i as u64, local, remote)?;
        self.slots[i] = Slot::Posted;
        self.counters.reads_posted += 1;
        Ok(i as u32)
    }

    /// True once the READ of `slot` completed (the slot is then free again); an error completion
    /// fails with the device, QP and status named.
    pub fn test(&mut self, slot: u32) -> Result<bool> {
        let i = slot as usize;
        match self.slots.get(i) {
            Some(Slot::Free) | None => {
                return Err(VerbsError::invalid(format!(
                    "test of flush request {slot} on {}: not in flight",
                    self.qp.device()
                )))
            }
            Some(Slot::Done) => {
                self.slots[i] = Slot::Free;
                return Ok(true);
            }
            Some(Slot::Posted) => {}
        }
        let n = self.cq.poll(&mut self.wcs)?;
        self.counters.polls += 1;
        for k in 0..n {
            let wc = self.wcs[k];
            self.cq.check(&wc)?;
            let j = wc.wr_id as usize;
            if self.slots.get(j) != Some(&Slot::Posted) {
                return Err(VerbsError::invalid(format!(
                    "flush completion for slot {j} on {} that was not posted",
                    self.qp.device()
                )));
            }
            self.slots[j] = Slot::Done;
            self.counters.reads_completed += 1;
        }
        if self.slots[i] == Slot::Done {
            self.slots[i] = Slot::Free;
            return Ok(true);
        }
        Ok(false)
    }
}
