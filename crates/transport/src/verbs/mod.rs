//! Safe RDMA verbs layer over libibverbs (dlopen'ed at run time, see `sys`): device discovery,
//! PD/CQ/MR wrappers and RC QP sets (one control QP + N data QPs) driven without blocking.

pub mod caps;
pub mod completion;
pub mod device;
pub mod error;
pub mod qp;
pub(crate) mod qpset;
pub mod resources;
pub mod srq;
pub mod sys;
pub mod sysfs;
pub mod tuning;

pub use completion::{status_str, WcOpcode, WorkCompletion, POLL_BATCH};
pub use device::{
    discover, discover_report, discover_system, mtu_bytes, mtu_code, Context, DeviceInfo,
    DeviceLimits, Discovery, PortInfo, Skipped,
};
pub use error::{Result, VerbsError};
pub use qp::{QpCaps, QpEndpoint, QpState, RcQp};
pub use qpset::{ConnInfo, PortPinner, QpRole, QpSet, QpSetConfig, MAX_DATA_QPS};
pub use resources::{
    CompletionQueue, LocalSlice, MemoryRegion, ProtectionDomain, RegisteredBuffer, RemoteSlice,
};
pub use srq::SharedReceiveQueue;
pub use sysfs::{
    select_gid, select_gid_with, AddrFamily, AddrRange, GidEntry, GidKind, GidPolicy, LinkLayer,
    Sysfs,
};
pub use tuning::{ib_disabled, ib_disabled_from_env, QpTuning, RelaxedOrdering};

pub mod bootstrap;
pub mod connect;
pub mod domain;
pub mod fence;
pub mod fifo;
pub mod flush;
pub mod fork;
pub mod listen;
pub mod mrcache;
pub mod peer;
pub mod recv;
pub mod send;

pub use caps::GdrCaps;
pub use connect::VerbsConnector;
pub use domain::VerbsDomain;
pub use flush::{FlushCounters, Flusher};
pub use listen::VerbsListenComm;
pub use mrcache::{CachedMr, MemSource};
pub use recv::VerbsRecvComm;
pub use send::VerbsSendComm;
