//! GPUDirect capabilities of a device, decided as net_ib decides them: NCCL_PTR_CUDA when a GPU
//! peer-memory client is loaded, NCCL_PTR_DMABUF when the dma-buf probe passes; each "off" says why.

use super::error::{Result, VerbsError};
use super::resources::ProtectionDomain;
use super::sys as ib;
use std::path::{Path, PathBuf};

pub use crate::gdr::{switch_from, FORCE_GDR_ENV, PTR_CUDA, PTR_DMABUF, PTR_HOST};

/// Files whose existence means a GPU peer-memory client is loaded, below the sysfs root, in
/// net_ib's order (NCCL 2.24.3 src/transport/net_ib.cc ibGdrSupportInitOnce; 2.30.7
/// src/transport/net_ib/gdr.cc): the legacy nv_peer_mem module (nv_mem, nv_mem_nc) and
/// nvidia-peermem.
pub(crate) const PEER_MEM_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// Which peer-memory client (if any) the sysfs tree under a root shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PeerMem {
    /// The first of PEER_MEM_FILES that exists (net_ib's access(F_OK)).
    Loaded(PathBuf),
    /// None exists: every path looked at.
    Missing(Vec<PathBuf>),
}

/// Looks for a peer-memory client under `sys_root` (normally /sys).
pub(crate) fn peer_mem(sys_root: &Path) -> PeerMem {
    let paths: Vec<PathBuf> = PEER_MEM_FILES.iter().map(|f| sys_root.join(f)).collect();
    match paths.iter().find(|p| p.exists()) {
        Some(p) => PeerMem::Loaded(p.clone()),
        None => PeerMem::Missing(paths),
    }
}

/// What `ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd = -1, 0)` said (net_ib's ncclIbDmaBufSupport, NCCL
/// 2.24.3 src/transport/net_ib.cc ibDmaBufSupportInitOnce; 2.30.7 src/transport/net_ib/gdr.cc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaBufProbe {
    /// It failed on the bad fd (EBADF or anything but the two below): the kernel and the driver
    /// can register dma-bufs.
    Supported { errno: i32 },
    /// EOPNOTSUPP or EPROTONOSUPPORT: the kernel or the driver cannot.
    Unsupported { errno: i32 },
    /// This libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34).
    NoSymbol,
}

impl DmaBufProbe {
    /// net_ib's test: `dev_fail |= (errno == EOPNOTSUPP) || (errno == EPROTONOSUPPORT)`.
    pub(crate) fn from_errno(errno: i32) -> DmaBufProbe {
        if errno == libc::EOPNOTSUPP || errno == libc::EPROTONOSUPPORT {
            DmaBufProbe::Unsupported { errno }
        } else {
            DmaBufProbe::Supported { errno }
        }
    }

    /// Runs the probe on `pd`.
    pub fn run(pd: &ProtectionDomain) -> DmaBufProbe {
        let Some(reg) = ib::gdr_verbs().and_then(|g| g.reg_dmabuf_mr) else {
            return DmaBufProbe::NoSymbol;
        };
        // SAFETY: errno is thread-local; cleared so the value read below is this call's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: live PD; fd -1 is never a dma-buf, so nothing can be registered.
        let mr = unsafe { reg(pd.as_ptr(), 0, 0, 0, -1, 0) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if !mr.is_null() {
            // SAFETY: a region we got back must be released; registered exactly once.
            unsafe { (pd.context().verbs().dereg_mr)(mr) };
            return DmaBufProbe::Supported { errno: 0 };
        }
        DmaBufProbe::from_errno(errno)
    }
}

fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EBADF => "EBADF",
        libc::EINVAL => "EINVAL",
        _ => "errno",
    };
    format!("{name} ({errno})")
}

/// The GPUDirect side of a device's properties, with the reason for each capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GdrCaps {
    pub cuda: bool,
    pub dmabuf: bool,
    /// CUDA advertised only because of FORCE_GDR_ENV.
    pub forced: bool,
    /// iflush posts its RDMA READ (a GDR capability and not NCCL_IB_GDR_FLUSH_DISABLE=1).
    pub flush: bool,
    pub why_cuda: String,
    pub why_dmabuf: String,
}

impl GdrCaps {
    /// The decision from the detected facts (net_ib's ncclIbGetPhysProperties: HOST always,
    /// CUDA with a peer-memory client, DMABUF with the probe; its flushEnabled in
    /// ncclIbAccept: either, unless NCCL_IB_GDR_FLUSH_DISABLE).
    pub(crate) fn decide(
        peer: &PeerMem,
        probe: DmaBufProbe,
        force: bool,
        flush_disabled: bool,
    ) -> Self {
        let (cuda, why_cuda) = match (peer, force) {
            (PeerMem::Loaded(p), _) => (true, format!("on (peer memory: {})", p.display())),
            (PeerMem::Missing(_), true) => (
                true,
                format!("on, FORCED by {FORCE_GDR_ENV}=1 (test only: no peer-memory client)"),
            ),
            (PeerMem::Missing(paths), false) => {
                let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                (
                    false,
                    format!(
                        "off (no GPU peer-memory client: none of {} exists; load nvidia-peermem)",
                        list.join(", ")
                    ),
                )
            }
        };
        let (dmabuf, why_dmabuf) = match probe {
            DmaBufProbe::Supported { errno } => (
                true,
                format!(
                    "on (ibv_reg_dmabuf_mr(fd -1) failed with {}, not EOPNOTSUPP)",
                    errno_name(errno)
                ),
            ),
            DmaBufProbe::Unsupported { errno } => (
                false,
                format!(
                    "off (ibv_reg_dmabuf_mr(fd -1) failed with {}: the kernel or driver cannot register dma-bufs)",
                    errno_name(errno)
                ),
            ),
            DmaBufProbe::NoSymbol => (
                false,
                "off (libibverbs has no ibv_reg_dmabuf_mr@IBVERBS_1.12: rdma-core 34 or later needed)"
                    .to_string(),
            ),
        };
        GdrCaps {
            cuda,
            dmabuf,
            forced: force && matches!(peer, PeerMem::Missing(_)),
            flush: (cuda || dmabuf) && !flush_disabled,
            why_cuda,
            why_dmabuf,
        }
    }

    /// NCCL's ptrSupport bits.
    pub fn ptr_support(&self) -> i32 {
        PTR_HOST | if self.cuda { PTR_CUDA } else { 0 } | if self.dmabuf { PTR_DMABUF } else { 0 }
    }

    /// The one INFO line per device.
    pub fn describe(&self, dev: &str) -> String {
        format!(
            "{dev}: GPUDirect NCCL_PTR_CUDA {}; NCCL_PTR_DMABUF {}; iflush {}",
            self.why_cuda,
            self.why_dmabuf,
            if self.flush {
                "posts an RDMA READ"
            } else {
                "returns NULL"
            }
        )
    }
}

/// Detection for an opened device: peer memory under `sys_root`, the dma-buf probe on `pd`,
/// the test switch and NCCL_IB_GDR_FLUSH_DISABLE from the environment.
pub(crate) fn detect(sys_root: &Path, pd: &ProtectionDomain) -> Result<GdrCaps> {
    let env = |k: &str| std::env::var(k).ok();
    let switch = |var: &str| switch_from(env, var).map_err(|e| VerbsError::invalid(e.msg));
    let force = switch(FORCE_GDR_ENV)?;
    let flush_disabled = switch("NCCL_IB_GDR_FLUSH_DISABLE")?;
    Ok(GdrCaps::decide(
        &peer_mem(sys_root),
        DmaBufProbe::run(pd),
        force,
        flush_disabled,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dqplb_dcqcn::fake_tree::FakeTree;

    #[test]
    fn peer_memory_clients_are_found_in_net_ib_order() {
        let t = FakeTree::new("gdr-peer").unwrap();
        let sys = t.root().join("sys");
        let missing = peer_mem(&sys);
        assert_eq!(
            missing,
            PeerMem::Missing(PEER_MEM_FILES.iter().map(|f| sys.join(f)).collect())
        );
        // nvidia-peermem (the module, as /sys/module shows it)
        t.write("sys/module/nvidia_peermem/version", "535.104.05\n")
            .unwrap();
        assert_eq!(
            peer_mem(&sys),
            PeerMem::Loaded(sys.join("module/nvidia_peermem/version"))
        );
        // the legacy nv_peer_mem client registers nv_mem under memory_peers and wins the order
        t.write("sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0\n")
            .unwrap();
        assert_eq!(
            peer_mem(&sys),
            PeerMem::Loaded(sys.join("kernel/mm/memory_peers/nv_mem/version"))
        );
        t.remove("sys/kernel/mm/memory_peers/nv_mem").unwrap();
        t.remove("sys/module/nvidia_peermem").unwrap();
        t.write("sys/kernel/mm/memory_peers/nv_mem_nc/version", "1.0\n")
            .unwrap();
        assert_eq!(
            peer_mem(&sys),
            PeerMem::Loaded(sys.join("kernel/mm/memory_peers/nv_mem_nc/version"))
        );
        // a directory without the version file does not count (net_ib checks the file)
        t.remove("sys/kernel/mm/memory_peers/nv_mem_nc/version")
            .unwrap();
        assert!(matches!(peer_mem(&sys), PeerMem::Missing(_)));
    }

    #[test]
    fn dmabuf_probe_tells_unsupported_from_a_bad_fd() {
        assert_eq!(
            DmaBufProbe::from_errno(libc::EBADF),
            DmaBufProbe::Supported { errno: libc::EBADF }
        );
        assert_eq!(
            DmaBufProbe::from_errno(libc::EOPNOTSUPP),
            DmaBufProbe::Unsupported {
                errno: libc::EOPNOTSUPP
            }
        );
        assert_eq!(
            DmaBufProbe::from_errno(libc::EPROTONOSUPPORT),
            DmaBufProbe::Unsupported {
                errno: libc::EPROTONOSUPPORT
            }
        );
        // net_ib only fails on those two: anything else (EINVAL, ENOENT) counts as supported
        assert_eq!(
            DmaBufProbe::from_errno(libc::EINVAL),
            DmaBufProbe::Supported {
                errno: libc::EINVAL
            }
        );
    }

    #[test]
    fn decisions_and_their_reasons() {
        let t = FakeTree::new("gdr-decide").unwrap();
        let sys = t.root().join("sys");
        let none = peer_mem(&sys);
        let eop = DmaBufProbe::Unsupported {
            errno: libc::EOPNOTSUPP,
        };
        // rxe in the VM: nothing
        let c = GdrCaps::decide(&none, eop, false, false);
        assert_eq!(
            (c.cuda, c.dmabuf, c.flush, c.forced),
            (false, false, false, false)
        );
        assert_eq!(c.ptr_support(), PTR_HOST);
        assert_eq!(
            c.describe("rxe0"),
            format!(
                "rxe0: GPUDirect NCCL_PTR_CUDA off (no GPU peer-memory client: none of {}, {}, {} exists; load nvidia-peermem); \
                 NCCL_PTR_DMABUF off (ibv_reg_dmabuf_mr(fd -1) failed with EOPNOTSUPP ({}): the kernel or driver cannot register dma-bufs); iflush returns NULL",
                sys.join(PEER_MEM_FILES[0]).display(),
                sys.join(PEER_MEM_FILES[1]).display(),
                sys.join(PEER_MEM_FILES[2]).display(),
                libc::EOPNOTSUPP
            )
        );
        // the test switch
        let c = GdrCaps::decide(&none, eop, true, false);
        assert_eq!(
            (c.cuda, c.dmabuf, c.flush, c.forced),
            (true, false, true, true)
        );
        assert_eq!(c.ptr_support(), PTR_HOST | PTR_CUDA);
        assert_eq!(
            c.why_cuda,
            "on, FORCED by DQPLB_TEST_FORCE_GDR=1 (test only: no peer-memory client)"
        );
        // a GPU node with nvidia-peermem and a dma-buf capable mlx5
        t.write("sys/module/nvidia_peermem/version", "550\n")
            .unwrap();
        let c = GdrCaps::decide(
            &peer_mem(&sys),
            DmaBufProbe::Supported { errno: libc::EBADF },
            false,
            false,
        );
        assert_eq!(c.ptr_support(), PTR_HOST | PTR_CUDA | PTR_DMABUF);
        assert_eq!((c.flush, c.forced), (true, false));
        assert_eq!(
            c.why_dmabuf,
            format!(
                "on (ibv_reg_dmabuf_mr(fd -1) failed with EBADF ({}), not EOPNOTSUPP)",
                libc::EBADF
            )
        );
        // forcing changes nothing when peer memory is really there
        assert!(!GdrCaps::decide(&peer_mem(&sys), eop, true, false).forced);
        // NCCL_IB_GDR_FLUSH_DISABLE=1 keeps the capabilities, drops the flush
        let c = GdrCaps::decide(&peer_mem(&sys), eop, false, true);
        assert_eq!((c.cuda, c.flush), (true, false));
        let c = GdrCaps::decide(&none, DmaBufProbe::NoSymbol, false, false);
        assert_eq!(
            c.why_dmabuf,
            "off (libibverbs has no ibv_reg_dmabuf_mr@IBVERBS_1.12: rdma-core 34 or later needed)"
        );
    }
}
