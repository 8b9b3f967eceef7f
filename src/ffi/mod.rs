//! The C boundary: bindgen types for the NCCL v8 ABI and the exported `ncclNetPlugin_v8` vtable.
//! Every entry point catches panics and maps errors to ncclResult_t; nothing else lives here.

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/nccl_net_v8.rs"));
}

pub mod guard;
pub mod vtable;
