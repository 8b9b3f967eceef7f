//! Fork safety of registered memory: asks libibverbs whether the kernel copies pinned pages on
//! fork (Linux 5.13+) and calls ibv_fork_init only when it does not, before any registration.

use super::sys as ib;
use std::sync::OnceLock;

/// How registered memory survives the application's fork().
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkSafety {
    /// ibv_is_fork_initialized = IBV_FORK_UNNEEDED: the kernel gives the child copies of pinned
    /// pages, the parent keeps the registered ones; nothing to do.
    KernelCopyOnFork,
    /// ibv_fork_init() ran (here, or earlier through RDMAV_FORK_SAFE / IBV_FORK_SAFE): registered
    /// ranges are madvise(MADV_DONTFORK), the child does not see them.
    ForkInit,
    /// ibv_fork_init() failed with this return code (registered pages may break on fork).
    ForkInitFailed(i32),
    /// libibverbs could not be opened, or has neither entry point.
    Unavailable,
}

impl ForkSafety {
    pub fn describe(&self) -> String {
        match self {
            ForkSafety::KernelCopyOnFork => "registered memory survives fork(): the kernel copies pinned pages for the child (ibv_is_fork_initialized = IBV_FORK_UNNEEDED), ibv_fork_init not needed".to_string(),
            ForkSafety::ForkInit => "registered memory survives fork(): ibv_fork_init is in effect (registered ranges are MADV_DONTFORK)".to_string(),
            ForkSafety::ForkInitFailed(rc) => format!("ibv_fork_init failed ({rc}): registered buffers can lose data if the application forks while they are in use"),
            ForkSafety::Unavailable => "fork support unknown: libibverbs has no ibv_fork_init".to_string(),
        }
    }
}

/// The decision from what libibverbs reports: `status` is ibv_is_fork_initialized's answer
/// (None: rdma-core < 35 lacks it), `fork_init` runs ibv_fork_init. rdma-core's man page
/// (ibv_fork_init(3)): not needed when the kernel supports copy-on-fork for pinned pages; NCCL's
/// net_ib calls it unconditionally at init (NCCL 2.28.3 src/transport/net_ib.cc ncclIbInit).
pub(crate) fn decide(status: Option<u32>, fork_init: Option<&dyn Fn() -> i32>) -> ForkSafety {
    match status {
        Some(ib::IBV_FORK_UNNEEDED) => return ForkSafety::KernelCopyOnFork,
        Some(ib::IBV_FORK_ENABLED) => return ForkSafety::ForkInit,
        _ => {}
    }
    match fork_init {
        Some(f) => match f() {
            0 => ForkSafety::ForkInit,
            rc => ForkSafety::ForkInitFailed(rc),
        },
        None => ForkSafety::Unavailable,
    }
}

/// Runs the decision once per process, before the first device is opened (ibv_fork_init must
/// precede every registration) and logs it at INFO.
pub fn prepare() -> ForkSafety {
    static ONCE: OnceLock<ForkSafety> = OnceLock::new();
    *ONCE.get_or_init(|| {
        let Some(g) = ib::gdr_verbs() else {
            return ForkSafety::Unavailable;
        };
        // SAFETY: no arguments; callable at any time.
        let status = g.is_fork_initialized.map(|f| unsafe { f() });
        let init = g.fork_init.map(|f| {
            // SAFETY: as above; called before this plugin registers any memory.
            move || unsafe { f() }
        });
        let s = decide(status, init.as_ref().map(|f| f as &dyn Fn() -> i32));
        tracing::info!(target: "dqplb::init", "{}", s.describe());
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn fork_init_only_when_the_kernel_does_not_copy_pinned_pages() {
        let calls = Cell::new(0);
        let ok = || {
            calls.set(calls.get() + 1);
            0
        };
        assert_eq!(
            decide(Some(ib::IBV_FORK_UNNEEDED), Some(&ok)),
            ForkSafety::KernelCopyOnFork
        );
        assert_eq!(
            decide(Some(ib::IBV_FORK_ENABLED), Some(&ok)),
            ForkSafety::ForkInit
        );
        assert_eq!(calls.get(), 0, "not called when unneeded or already on");
        assert_eq!(
            decide(Some(ib::IBV_FORK_DISABLED), Some(&ok)),
            ForkSafety::ForkInit
        );
        // rdma-core < 35: no way to ask, so call it (as NCCL does)
        assert_eq!(decide(None, Some(&ok)), ForkSafety::ForkInit);
        assert_eq!(calls.get(), 2);
        let fail = || libc::EINVAL;
        assert_eq!(
            decide(Some(ib::IBV_FORK_DISABLED), Some(&fail)),
            ForkSafety::ForkInitFailed(libc::EINVAL)
        );
        assert_eq!(decide(None, None), ForkSafety::Unavailable);
    }
}
