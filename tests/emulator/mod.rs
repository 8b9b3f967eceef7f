//! The NCCL emulator behind tests/nccl_emulator.rs: drives the built plugin .so as NCCL's core and
//! proxy do (2.20-2.30), each behaviour with the NCCL file and function it follows.

pub mod abi;
pub mod child;
pub mod dl;
pub mod nccl;
pub mod plan;
pub mod progress;
pub mod recv;
pub mod rendezvous;
pub mod setup;
pub mod spawn;
pub mod versions;
