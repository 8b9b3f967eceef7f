//! What the TCP and verbs comms share, so each keeps only its wire: the engine and request state of
//! each side, built from the connection parameters, and NCCL's test() and progress over them.

pub(crate) mod depth;
pub(crate) mod recv;
pub(crate) mod requests;
pub(crate) mod send;

pub use depth::{DepthControl, DepthState};
pub(crate) use recv::{Grp, RecvCore};
pub(crate) use requests::{RequestTable, Requests};
pub(crate) use send::{Outgoing, SendCore};
