//! dqplb-net: an NCCL network plugin with Dynamic QP Load Balancing and a DCQCN pre-flight check.
//! This crate is the plugin itself: the C ABI (`ffi`) over the plugin state (`plugin`), which
//! drives the engine through the transports of the workspace's other crates.

pub mod ffi;
pub mod plugin;
