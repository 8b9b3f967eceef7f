//! Support code for tests/nccl_harness.rs: drives the built plugin .so through its C ABI exactly
//! as NCCL's proxy does, from child processes that re-execute the test binary.

pub(crate) mod driver;
pub(crate) mod garbage;
pub(crate) mod listen_handle;
pub(crate) mod pattern;
pub(crate) mod roles;
pub(crate) mod spawn;
