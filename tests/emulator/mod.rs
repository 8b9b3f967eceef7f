//! The NCCL emulator behind tests/nccl_emulator.rs: drives the built plugin .so as NCCL's core and
//! proxy do (2.20-2.30), each behaviour with the NCCL file and function it follows.

pub(crate) mod child;
pub(crate) mod nccl;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod recv;
pub(crate) mod rendezvous;
pub(crate) mod setup;
pub(crate) mod spawn;
pub(crate) mod versions;
