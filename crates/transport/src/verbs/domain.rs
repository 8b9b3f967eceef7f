//! One opened RDMA port a transport works on: context, protection domain, port facts, QP knobs,
//! GPUDirect capabilities and the registration cache, shared by every comm of the device.

use super::caps::{self, GdrCaps};
use super::device::{Context, DeviceInfo, PortInfo};
use super::error::{Result, VerbsError};
use super::resources::{MemoryRegion, ProtectionDomain};
use super::tuning::{QpTuning, RelaxedOrdering};
use crate::regcache::RegCache;
use std::path::Path;
use std::sync::Arc;

/// An opened device port ready to carry connections.
pub struct VerbsDomain {
    pd: Arc<ProtectionDomain>,
    port: PortInfo,
    tuning: QpTuning,
    caps: GdrCaps,
    /// Every regMr of every comm on this port goes through here (regIsGlobal = 1).
    cache: RegCache<MemoryRegion>,
}

impl std::fmt::Debug for VerbsDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerbsDomain({}:{})", self.name(), self.port.port)
    }
}

/// Domains are equal only to themselves (one per opened port).
impl PartialEq for VerbsDomain {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl VerbsDomain {
    /// Opens `dev` on its port number `port` (must be one of its active ports).
    pub fn open(dev: &DeviceInfo, port: u8, tuning: QpTuning) -> Result<Arc<Self>> {
        let info = dev
            .ports
            .iter()
            .find(|p| p.port == port)
            .cloned()
            .ok_or_else(|| {
                VerbsError::invalid(format!("{} has no active port {port}", dev.name))
            })?;
        let ctx = Context::open(&dev.name)?;
        let relaxed = match tuning.relaxed_ordering {
            RelaxedOrdering::Off => false,
            RelaxedOrdering::On => true,
            RelaxedOrdering::Auto => ctx.verbs().reg_mr_iova2.is_some(),
        };
        let pd = ProtectionDomain::with_relaxed_ordering(&ctx, relaxed)?;
        let caps = caps::detect(Path::new("/sys"), &pd)?;
        Ok(Arc::new(VerbsDomain {
            pd,
            port: info,
            tuning,
            caps,
            cache: RegCache::with_system_page(),
        }))
    }

    /// GPUDirect capabilities detected when the port was opened.
    pub fn caps(&self) -> &GdrCaps {
        &self.caps
    }

    /// The registration cache of this port.
    pub fn reg_cache(&self) -> &RegCache<MemoryRegion> {
        &self.cache
    }

    pub fn name(&self) -> &str {
        self.pd.context().name()
    }

    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    pub fn port(&self) -> &PortInfo {
        &self.port
    }

    pub fn tuning(&self) -> &QpTuning {
        &self.tuning
    }

    /// Registers caller memory (NCCL's regMr) on this domain.
    ///
    /// # Safety
    /// As `MemoryRegion::register_raw`: `[addr, addr+len)` stays valid until the region is
    /// dropped and no request using it is in flight.
    pub unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Arc<MemoryRegion>> {
        // SAFETY: forwarded contract.
        unsafe { MemoryRegion::register_raw(&self.pd, addr, len) }.map(Arc::new)
    }
}
