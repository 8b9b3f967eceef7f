//! A shared receive queue (`ibv_srq`) of zero-length receives that a receive comm's data QPs all
//! draw from, refilled in chained batches (one `post_srq_recv` call per batch, no allocation).

use super::error::{Result, VerbsError};
use super::resources::ProtectionDomain;
use super::sys as ib;
use std::ptr::NonNull;
use std::sync::Arc;

/// Most receives one `post_srq_recv` call chains (a stack array of this many work requests).
pub(crate) const SRQ_POST_BATCH: usize = 32;

/// A shared receive queue; the QPs attached to it keep it alive (each holds an Arc).
pub struct SharedReceiveQueue {
    raw: NonNull<ib::ibv_srq>,
    pd: Arc<ProtectionDomain>,
    depth: u32,
    /// `context->ops.post_srq_recv`, read once at creation (verbs.h's inline call).
    post_fn: ib::PostSrqRecvFn,
}

// SAFETY: posting to an SRQ is thread-safe in libibverbs (providers lock it); the Rust side holds
// only immutable data.
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue {}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedReceiveQueue({} depth {})",
            self.device(),
            self.depth
        )
    }
}

impl SharedReceiveQueue {
    /// Creates an SRQ for `depth` receives of one SGE each, or the device's `max_srq_wr` when
    /// that is smaller (`depth()` says which).
    pub fn new(pd: &Arc<ProtectionDomain>, depth: u32) -> Result<Arc<Self>> {
        let dev = pd.context().name();
        let max = u32::try_from(pd.context().query_device()?.max_srq_wr).unwrap_or(0);
        let depth = depth.min(max);
        if depth == 0 {
            return Err(VerbsError::invalid(format!(
                "{dev}: SRQ of 0 receives (device max_srq_wr {max})"
            )));
        }
        let mut init = ib::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ib::ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        let v = pd.context().verbs();
        // SAFETY: live PD; `init` is fully initialised.
        let raw = unsafe { (v.create_srq)(pd.as_ptr(), &mut init) };
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::last_os("ibv_create_srq", dev))?;
        // SAFETY: a created SRQ points at its live context, whose ops table the provider filled in.
        let post_fn = unsafe { (*(*raw.as_ptr()).context).ops.post_srq_recv };
        let Some(post_fn) = post_fn else {
            // SAFETY: created above, destroyed exactly once.
            unsafe { (v.destroy_srq)(raw.as_ptr()) };
            return Err(VerbsError::invalid(format!(
                "{dev}: provider has no post_srq_recv in ibv_context.ops"
            )));
        };
        Ok(Arc::new(SharedReceiveQueue {
            raw,
            pd: Arc::clone(pd),
            depth,
            post_fn,
        }))
    }

    /// Receives this SRQ was sized for (what its owner keeps posted).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    pub fn device(&self) -> &str {
        self.pd.context().name()
    }

    pub(crate) fn as_ptr(&self) -> *mut ib::ibv_srq {
        self.raw.as_ptr()
    }

    /// Posts `n` zero-length receives (each consumed by one incoming WRITE_WITH_IMM), chained
    /// SRQ_POST_BATCH to a call. Never blocks or allocates; fails when the SRQ is full.
    pub fn post_zero_len(&self, n: u32) -> Result<()> {
        // SAFETY: plain old data, zero is valid for every field.
        let mut wrs: [ib::ibv_recv_wr; SRQ_POST_BATCH] = unsafe { std::mem::zeroed() };
        let mut left = n as usize;
        while left > 0 {
            let k = left.min(SRQ_POST_BATCH);
            let base = wrs.as_mut_ptr();
            for i in 0..k {
                // SAFETY: i and i + 1 are within the array (i + 1 < k <= SRQ_POST_BATCH).
                unsafe {
                    let wr = &mut *base.add(i);
                    wr.wr_id = 0;
                    wr.sg_list = std::ptr::null_mut();
                    wr.num_sge = 0;
                    wr.next = if i + 1 < k {
                        base.add(i + 1)
                    } else {
                        std::ptr::null_mut()
                    };
                }
            }
            let mut bad: *mut ib::ibv_recv_wr = std::ptr::null_mut();
            // SAFETY: live SRQ; the chain lives across the call and has no SGEs; the ops entry is
            // the one verbs.h's inline ibv_post_srq_recv calls.
            let rc = unsafe { (self.post_fn)(self.as_ptr(), base, &mut bad) };
            if rc != 0 {
                return Err(VerbsError::Call {
                    op: "ibv_post_srq_recv",
                    device: self.device().to_string(),
                    errno: rc.abs(),
                });
            }
            left -= k;
        }
        Ok(())
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: QPs hold an Arc to this SRQ, so none is attached any more; destroyed once.
        unsafe {
            (self.pd.context().verbs().destroy_srq)(self.raw.as_ptr());
        }
    }
}
