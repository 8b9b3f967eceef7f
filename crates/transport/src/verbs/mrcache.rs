//! The verbs side of the registration cache: registers page ranges of host, GPU (peer memory) or
//! dma-buf memory on a domain's PD at regMr time, and hands out handles released on drop.

use super::domain::VerbsDomain;
use super::error::{Result, VerbsError};
use super::resources::{MemoryRegion, ProtectionDomain};
use super::sys as ib;
use crate::regcache::{Lookup, PageRange, Release};
use std::ptr::NonNull;
use std::sync::Arc;

impl From<String> for VerbsError {
    fn from(what: String) -> Self {
        VerbsError::invalid(what)
    }
}

/// Where the memory of a registration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemSource {
    /// A virtual address (host memory, or GPU memory through a peer-memory client).
    Pointer,
    /// A dma-buf: `fd` and the offset of the range within it.
    DmaBuf { fd: i32, offset: u64 },
}

/// One user's reference to a cached registration; the reference is released on drop, and the
/// region is deregistered when no user and no cache entry holds it any more.
pub struct CachedMr {
    mr: Arc<MemoryRegion>,
    domain: Arc<VerbsDomain>,
    lookup: Lookup,
}

impl std::fmt::Debug for CachedMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CachedMr({:?}, {:?})", self.mr, self.lookup)
    }
}

impl CachedMr {
    pub fn mr(&self) -> &MemoryRegion {
        &self.mr
    }

    pub fn domain(&self) -> &Arc<VerbsDomain> {
        &self.domain
    }

    /// Whether this handle was served from the cache or registered the pages.
    pub fn lookup(&self) -> Lookup {
        self.lookup
    }
}

impl Drop for CachedMr {
    fn drop(&mut self) {
        match self.domain.reg_cache().release(&self.mr) {
            Ok(Release::Removed) => {
                tracing::trace!(target: "dqplb::net", "{}: deregistering {:?}", self.domain.name(), self.mr)
            }
            Ok(Release::Kept(_)) => {}
            Err(e) => {
                tracing::warn!(target: "dqplb::net", "{}: deregMr of {:?}: {e}", self.domain.name(), self.mr)
            }
        }
    }
}

/// (soft, hard) RLIMIT_MEMLOCK of this process.
pub(crate) fn memlock_limit() -> Option<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out pointer.
    (unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0)
        .then_some((r.rlim_cur, r.rlim_max))
}

/// The registration error for `errno`, with RLIMIT_MEMLOCK when the errno points at it (the
/// kernel's pinned-page accounting fails ENOMEM, some drivers EPERM).
pub(crate) fn register_error(
    op: &'static str,
    device: &str,
    what: String,
    errno: i32,
) -> VerbsError {
    let memlock = if errno == libc::ENOMEM || errno == libc::EPERM {
        memlock_limit()
    } else {
        None
    };
    VerbsError::Register {
        op,
        device: device.to_string(),
        what,
        errno,
        memlock,
    }
}

/// Registers the pages `r` on `pd` with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ, plus
/// RELAXED_ORDERING when the PD asks for it (through ibv_reg_mr_iova2), as net_ib's
/// ncclIbRegMrDmaBufInternal does (NCCL 2.28.3 src/transport/net_ib.cc; 2.30.7
/// src/transport/net_ib/reg.cc): dma-bufs with iova = the page-aligned address and the length of
/// the whole pages.
///
/// # Safety
/// For `Pointer`, the pages must be mapped memory of this process (or device memory a peer-memory
/// client resolves) that stays so until the region is dropped.
unsafe fn register_pages(
    pd: &Arc<ProtectionDomain>,
    r: PageRange,
    src: MemSource,
) -> Result<MemoryRegion> {
    let v = pd.context().verbs();
    let relaxed = pd.relaxed_ordering();
    let mut access =
        ib::IBV_ACCESS_LOCAL_WRITE | ib::IBV_ACCESS_REMOTE_WRITE | ib::IBV_ACCESS_REMOTE_READ;
    if relaxed {
        access |= ib::IBV_ACCESS_RELAXED_ORDERING;
    }
    let (bytes, start) = (r.bytes(), r.start);
    let (op, raw) = match src {
        MemSource::Pointer => match (relaxed, v.reg_mr_iova2) {
            // SAFETY: live PD; the caller guarantees the pages.
            (true, Some(iova2)) => ("ibv_reg_mr_iova2", unsafe {
                iova2(pd.as_ptr(), start as *mut _, bytes, start as u64, access)
            }),
            // SAFETY: as above.
            _ => ("ibv_reg_mr", unsafe {
                (v.reg_mr)(pd.as_ptr(), start as *mut _, bytes, access as i32)
            }),
        },
        MemSource::DmaBuf { fd, offset } => {
            let Some(reg) = ib::gdr_verbs().and_then(|g| g.reg_dmabuf_mr) else {
                return Err(VerbsError::invalid(format!(
                    "regMrDmaBuf on {}: libibverbs has no ibv_reg_dmabuf_mr@IBVERBS_1.12",
                    pd.context().name()
                )));
            };
            // SAFETY: live PD; the kernel resolves fd and checks offset/length against it.
            ("ibv_reg_dmabuf_mr", unsafe {
                reg(pd.as_ptr(), offset, bytes, start as u64, fd, access as i32)
            })
        }
    };
    let Some(raw) = NonNull::new(raw) else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let what = match src {
            MemSource::Pointer => format!("{bytes} bytes at {start:#x}"),
            MemSource::DmaBuf { fd, offset } => {
                format!("{bytes} bytes of dma-buf fd {fd} from offset {offset} (iova {start:#x})")
            }
        };
        return Err(register_error(op, pd.context().name(), what, errno));
    };
    // SAFETY: just registered on `pd`, owned by nothing else; it describes exactly these pages.
    Ok(unsafe { MemoryRegion::adopt(pd, raw, start as u64, bytes) })
}

/// Registers `[addr, addr+len)` on `domain` through its cache: a range inside a live cached one
/// is a hit (no verbs call), anything else registers its pages.
///
/// # Safety
/// As `register_pages`: the memory stays valid until the returned handle (and every request using
/// it) is gone.
pub unsafe fn register(
    domain: &Arc<VerbsDomain>,
    addr: usize,
    len: usize,
    src: MemSource,
) -> Result<CachedMr> {
    let (mr, lookup) = domain.reg_cache().acquire(addr, len, |pages| {
        // SAFETY: forwarded contract.
        unsafe { register_pages(domain.pd(), pages, src) }
    })?;
    Ok(CachedMr {
        mr,
        domain: Arc::clone(domain),
        lookup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_memory_failures_name_rlimit_memlock() {
        let e = VerbsError::Register {
            op: "ibv_reg_mr",
            device: "mlx5_0".to_string(),
            what: "8192 bytes at 0x10000".to_string(),
            errno: libc::ENOMEM,
            memlock: Some((65536, 65536)),
        };
        assert_eq!(
            e.to_string(),
            "ibv_reg_mr of 8192 bytes at 0x10000 failed on RDMA device mlx5_0: Cannot allocate memory (os error 12) (errno 12); \
             pinned memory is capped by RLIMIT_MEMLOCK = 65536 bytes (hard 65536 bytes): raise it (ulimit -l unlimited, or \
             LimitMEMLOCK=infinity / docker --ulimit memlock=-1)"
        );
        // ENOMEM and EPERM carry the limit, other errnos do not
        let with = |errno| match register_error("ibv_reg_mr", "d", "x".into(), errno) {
            VerbsError::Register { memlock, .. } => memlock,
            other => panic!("{other:?}"),
        };
        let limit = memlock_limit().expect("getrlimit");
        assert_eq!(with(libc::ENOMEM), Some(limit));
        assert_eq!(with(libc::EPERM), Some(limit));
        assert_eq!(with(libc::EFAULT), None);
        let e = register_error("ibv_reg_mr", "d", "x".into(), libc::EFAULT);
        assert_eq!(
            e.to_string(),
            "ibv_reg_mr of x failed on RDMA device d: Bad address (os error 14) (errno 14)"
        );
        let unlimited = VerbsError::Register {
            op: "ibv_reg_mr",
            device: "d".into(),
            what: "x".into(),
            errno: libc::EPERM,
            memlock: Some((libc::RLIM_INFINITY, libc::RLIM_INFINITY)),
        };
        assert!(unlimited
            .to_string()
            .ends_with("RLIMIT_MEMLOCK = unlimited (hard unlimited): raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity / docker --ulimit memlock=-1)"));
    }
}
