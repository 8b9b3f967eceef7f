//! Test support shared by the workspace's integration tests (never shipped): the NCCL net ABI as
//! NCCL declares it, dlopen of the plugin, the C logger, child-process roles, verbs device helpers.

pub mod dl;
pub mod logger;
pub mod nccl;
pub mod spawn;
pub mod verbs;
