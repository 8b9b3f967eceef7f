//! The exported vtables, one per NCCL net-plugin version (each defined by its adapter module).

pub use super::common::{profiler_registered, Vtable};
pub use super::v10::ncclNetPlugin_v10;
pub use super::v11::ncclNetPlugin_v11;
pub use super::v12::ncclNetPlugin_v12;
pub use super::v8::ncclNetPlugin_v8;
pub use super::v9::ncclNetPlugin_v9;
