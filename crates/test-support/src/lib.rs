//! Test support shared by the workspace's integration tests (never shipped): the verbs device
//! helpers (pick the RDMA device, loopback QP sets, comm pairs, CQE waits).

pub mod verbs;
