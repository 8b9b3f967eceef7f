//! The C boundary: bindgen types for the NCCL net ABI v8-v12 and the exported vtables
//! `ncclNetPlugin_v8` .. `ncclNetPlugin_v12`, each a thin adapter (v8.rs .. v12.rs) over the one
//! internal API in common.rs. Every entry point catches panics and maps errors to ncclResult_t.

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/nccl_net.rs"));
}

pub mod common;
pub mod guard;
pub mod v10;
pub mod v11;
pub mod v12;
pub mod v8;
pub mod v9;
pub mod vtable;
