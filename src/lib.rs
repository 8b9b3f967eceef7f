//! dqplb-net: an NCCL network plugin with Dynamic QP Load Balancing and a DCQCN pre-flight check.
//! This crate is the plugin itself: the C ABI (`ffi`) over the plugin state (`plugin`), which
//! drives the engine through the transports of the workspace's other crates.

pub mod ffi;
pub mod plugin;

/// The version every component reports: the package version and the short git hash of the
/// checkout it was built from (build.rs; "unknown" outside git without DQPLB_GIT_HASH), e.g.
/// "0.1.0 (abc1234)". The plugin's init line and `dqplb --version` print it.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("DQPLB_GIT_HASH"), ")");
