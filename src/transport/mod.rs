//! Transports that drive the engine over real links: TCP streams and (feature `verbs`) RDMA verbs.
//! Each maps engine actions to wire operations and wire events back to engine calls.

#[cfg(feature = "verbs")]
pub mod verbs;
