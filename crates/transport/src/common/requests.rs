//! NCCL's test() and progress() for every comm: a request that already completed is reported even
//! after the comm failed; otherwise one progress pass (whose first error sticks), then its state.

use crate::slots::{Slots, Sticky};
use crate::{NetError, NetResult};

/// A comm's request slots and sticky failure: the send or receive core.
pub(crate) trait RequestTable {
    /// What a request slot holds while in flight.
    type Active: Copy;
    /// "send" or "receive": names the request in the error for a test() of one not in flight.
    const SIDE: &'static str;

    fn slots(&mut self) -> &mut Slots<Self::Active>;

    fn sticky(&mut self) -> &mut Sticky;
}

/// What each transport's comm supplies: its core and one progress pass over its wire.
pub(crate) trait Requests {
    type Core: RequestTable;

    fn core(&mut self) -> &mut Self::Core;

    /// Moves everything that can move without blocking; an error fails the comm for good.
    fn step(&mut self) -> NetResult<()>;

    /// A request still in flight after a pass: Err when it can never complete (the transport saw
    /// the peer leave). Nothing by default.
    fn check_pending(&mut self, _slot: u32) -> NetResult<()> {
        Ok(())
    }

    /// Records the comm's fatal error `e` (every later call returns it) and hands it back.
    fn fail(&mut self, e: NetError) -> NetError {
        self.core().sticky().fail(e)
    }

    /// One progress pass: the comm's first error, or the pass's (which becomes the first).
    fn advance(&mut self) -> NetResult<()> {
        self.core().sticky().check()?;
        match self.step() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// NCCL's test() of request `slot`: Some(size) once done (the slot is free again), None
    /// while in flight. A request done before the comm failed is still reported.
    fn test_request(&mut self, slot: u32) -> NetResult<Option<usize>> {
        if let Some(n) = self.core().slots().take_done(slot) {
            return Ok(Some(n));
        }
        self.advance()?;
        let done = self.core().slots().test(slot, Self::Core::SIDE)?;
        if done.is_none() {
            self.check_pending(slot)?;
        }
        Ok(done)
    }
}
