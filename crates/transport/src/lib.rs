//! Transports that drive the engine over real links: TCP streams and (feature `verbs`) RDMA verbs.
//! Each maps engine actions to wire operations and wire events back to engine calls.

pub(crate) mod common;
pub mod error;
pub mod events;
pub mod gdr;
#[cfg(feature = "verbs")]
pub mod regcache;
pub mod slots;
pub mod tcp;

pub use common::{DepthControl, DepthState};
pub use error::{ErrorCode, NetError, NetResult};
pub(crate) mod userbuf;
pub use userbuf::UserBuf;

#[cfg(feature = "verbs")]
pub mod verbs;
