//! Support code for tests/nccl_harness.rs: drives the built plugin .so through its C ABI exactly
//! as NCCL's proxy does, from child processes that re-execute the test binary.

pub mod abi;
pub mod dl;
pub mod driver;
pub mod garbage;
pub mod pattern;
pub mod roles;
pub mod spawn;
