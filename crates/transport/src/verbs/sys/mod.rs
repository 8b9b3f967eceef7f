//! Our own copy of the libibverbs ABI (the structs, enums and constants this transport uses) and
//! the function table dlopen'ed from libibverbs.so.1 at run time: nothing links against rdma-core.
#![allow(non_camel_case_types, non_snake_case)]

pub mod attr;
pub(crate) mod consts;
pub mod gdr;
pub mod library;
pub mod mlx5dv;
pub mod objects;
pub mod wr;

pub use attr::*;
pub use consts::*;
pub use gdr::{
    gdr_verbs, GdrVerbs, IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED, IBV_WR_RDMA_READ,
};
pub use library::{verbs, LoadError, Verbs, LIBIBVERBS};
pub use objects::*;
pub use wr::*;
