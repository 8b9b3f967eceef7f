//! dqplb-net: an NCCL network plugin with Dynamic QP Load Balancing and a DCQCN pre-flight check.
//! Layers, imports flowing one way: ffi -> plugin -> engine / transport / dcqcn -> config.

pub mod config;
pub mod dcqcn;
pub mod engine;
pub mod ffi;
pub mod plugin;
pub mod sim;
pub mod transport;
