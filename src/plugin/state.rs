//! Process-wide plugin state set by init: the loaded site config and the device list, shared by
//! NCCL's service and progress threads behind a lock-free-to-read Arc.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dqplb_config::{LoadedConfig, SiteConfig};
use dqplb_transport::{NetError, NetResult};

use super::devices::Device;

pub struct Global {
    pub config: SiteConfig,
    pub config_source: String,
    pub devices: Vec<Device>,
    /// NCCL v12 railId/planeId of each device (-1: unknown), from NCCL_IB_HCA.
    pub rail_plane: Vec<(i16, i16)>,
}

static GLOBAL: RwLock<Option<Arc<Global>>> = RwLock::new(None);

pub fn set(loaded: LoadedConfig, devices: Vec<Device>, rail_plane: Vec<(i16, i16)>) {
    let g = Arc::new(Global {
        config: loaded.config,
        config_source: loaded.source,
        devices,
        rail_plane,
    });
    match GLOBAL.write() {
        Ok(mut w) => *w = Some(g),
        Err(p) => *p.into_inner() = Some(g),
    }
}

/// The state, or InvalidUsage when NCCL calls before init.
pub fn get() -> NetResult<Arc<Global>> {
    let r = match GLOBAL.read() {
        Ok(r) => r,
        Err(p) => p.into_inner(),
    };
    r.clone()
        .ok_or_else(|| NetError::invalid_usage("DQPLB plugin used before init()"))
}

impl Global {
    pub fn device(&self, dev: i32) -> NetResult<&Device> {
        usize::try_from(dev)
            .ok()
            .and_then(|d| self.devices.get(d))
            .ok_or_else(|| {
                NetError::invalid_argument(format!(
                    "device {dev} does not exist (this plugin has {} devices)",
                    self.devices.len()
                ))
            })
    }
}

/// One communicator-pattern hint of NCCL's setNetAttr (v11+), per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommAttr {
    pub max_concurrent_peers: i32,
    pub min_concurrent_peers: i32,
    pub max_flows_per_peer: i32,
    pub min_flows_per_peer: i32,
}

/// The hints of one setNetAttr call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetAttr {
    pub send: CommAttr,
    pub recv: CommAttr,
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}

static LIVE_CONTEXTS: AtomicUsize = AtomicUsize::new(0);
static NEXT_CONTEXT: AtomicU64 = AtomicU64::new(1);

/// A communicator's context (NCCL v11+ init/finalize): its id, connection config and the latest
/// pattern hints. Connects started through it and not finished are dropped with it.
#[derive(Debug)]
pub struct CommContext {
    /// Process-unique serial (owner key of in-progress connects).
    pub serial: u64,
    pub comm_id: u64,
    /// trafficClass of the communicator's config (None: NCCL_NET_TRAFFIC_CLASS_UNDEF).
    pub traffic_class: Option<u8>,
    pub net_attr: Mutex<Option<NetAttr>>,
    /// The pattern of the latest hints, shared with the context's send comms.
    pub pattern: super::PatternCell,
}

impl CommContext {
    pub fn new(comm_id: u64, traffic_class: Option<u8>) -> CommContext {
        LIVE_CONTEXTS.fetch_add(1, Ordering::AcqRel);
        CommContext {
            serial: NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed),
            comm_id,
            traffic_class,
            net_attr: Mutex::new(None),
            pattern: super::PatternCell::default(),
        }
    }

    pub fn set_net_attr(&self, a: NetAttr) {
        self.replace_net_attr(a);
    }

    /// Stores `a`; false (and nothing changes) when it equals the hints stored already.
    pub fn replace_net_attr(&self, a: NetAttr) -> bool {
        let mut g = match self.net_attr.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if *g == Some(a) {
            return false;
        }
        *g = Some(a);
        true
    }

    pub fn net_attr(&self) -> Option<NetAttr> {
        match self.net_attr.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }
}

impl Drop for CommContext {
    fn drop(&mut self) {
        LIVE_CONTEXTS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Communicator contexts alive now (v11+ init minus finalize).
pub fn live_contexts() -> usize {
    LIVE_CONTEXTS.load(Ordering::Acquire)
}
