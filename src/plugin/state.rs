//! Process-wide plugin state set by init: the loaded site config and the device list, shared by
//! NCCL's service and progress threads behind a lock-free-to-read Arc.

use std::sync::{Arc, RwLock};

use crate::config::{LoadedConfig, SiteConfig};
use crate::transport::{NetError, NetResult};

use super::devices::Device;

pub struct Global {
    pub config: SiteConfig,
    pub config_source: String,
    pub devices: Vec<Device>,
}

static GLOBAL: RwLock<Option<Arc<Global>>> = RwLock::new(None);

pub fn set(loaded: LoadedConfig, devices: Vec<Device>) {
    let g = Arc::new(Global {
        config: loaded.config,
        config_source: loaded.source,
        devices,
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
