//! The receiver's half of every transport: its engine built from the connection parameters and
//! one request per grouped receive, whose buffers are engine messages completed in posting order.

use std::fmt::Display;

use dqplb_engine::Receiver;

use crate::common::RequestTable;
use crate::slots::{RecvSizes, Slots, Sticky, MAX_RECVS};
use crate::tcp::ConnParams;
use crate::{NetError, NetResult};

/// A grouped receive in flight (one request): its buffer count and how many are incomplete.
#[derive(Clone, Copy)]
pub(crate) struct Grp {
    pub(crate) n: u8,
    pub(crate) left: u8,
}

/// A receive comm's engine and requests: buffer k of request slot s is engine token
/// s * MAX_RECVS + k.
pub(crate) struct RecvCore {
    pub(crate) engine: Receiver,
    pub(crate) slots: Slots<Grp>,
    /// Received size of each buffer, indexed by engine token.
    sizes: Vec<usize>,
    pub(crate) failed: Sticky,
    pub(crate) params: ConnParams,
}

impl RequestTable for RecvCore {
    type Active = Grp;
    const SIDE: &'static str = "receive";

    fn slots(&mut self) -> &mut Slots<Grp> {
        &mut self.slots
    }

    fn sticky(&mut self) -> &mut Sticky {
        &mut self.failed
    }
}

impl RecvCore {
    /// The receiver's engine for `params` as the peer sent them (an error is the peer's);
    /// `peer` names the connection in errors, `who` the comm in its failure's log line.
    pub(crate) fn new(params: ConnParams, peer: &dyn Display, who: String) -> NetResult<Self> {
        let n = params.max_messages as usize;
        let window = params.qps as u32 * params.outstanding;
        // Every buffer of every group is one engine message, completed in posting order.
        let engine = Receiver::new(window, n * MAX_RECVS)
            .map_err(|e| NetError::remote(format!("connection parameters from {peer}: {e}")))?;
        Ok(RecvCore {
            engine,
            slots: Slots::new(n),
            sizes: vec![0; n * MAX_RECVS],
            failed: Sticky::new(who),
            params,
        })
    }

    /// Bytes of state beside the struct itself: the engine, the request table, the sizes.
    pub(crate) fn footprint_bytes(&self) -> usize {
        self.engine.footprint_bytes()
            + self.slots.footprint_bytes()
            + self.sizes.capacity() * std::mem::size_of::<usize>()
    }

    /// A grouped receive holds 1..=MAX_RECVS buffers.
    pub(crate) fn check_count(n: usize) -> NetResult<()> {
        if n == 0 || n > MAX_RECVS {
            return Err(NetError::invalid_argument(format!(
                "irecv of {n} buffers: accepted 1..={MAX_RECVS} (maxRecvs)"
            )));
        }
        Ok(())
    }

    /// Posts buffer `token` of `capacity` bytes to the engine; a refusal fails the comm.
    pub(crate) fn post(&mut self, token: u32, capacity: u64, peer: &dyn Display) -> NetResult<()> {
        if let Err(e) = self.engine.post(token, capacity) {
            let e = NetError::internal(format!("engine refused a receive from {peer}: {e}"));
            return Err(self.failed.fail(e));
        }
        Ok(())
    }

    /// The request buffer `token` belongs to, while it is in flight.
    pub(crate) fn group(&self, token: u32) -> Option<Grp> {
        self.slots.active(token / MAX_RECVS as u32)
    }

    /// Buffer `token` arrived with `size` bytes; its request is done when it was the last one.
    /// False when no request in flight holds it.
    pub(crate) fn complete(&mut self, token: u32, size: u64) -> bool {
        let slot = token / MAX_RECVS as u32;
        let Some(g) = self.slots.active_mut(slot) else {
            return false;
        };
        g.left = g.left.saturating_sub(1);
        let done = (g.left == 0).then_some(usize::from(g.n));
        if let Some(s) = self.sizes.get_mut(token as usize) {
            *s = size as usize;
        }
        if let Some(n) = done {
            self.slots.finish(slot, n);
        }
        true
    }

    /// The received size of each of the `n` buffers of request `slot`, in posting order.
    pub(crate) fn sizes(&self, slot: u32, n: usize) -> RecvSizes {
        let first = slot as usize * MAX_RECVS;
        self.sizes[first..first + n].iter().copied().collect()
    }
}
