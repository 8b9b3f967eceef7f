//! The plugin proper in safe Rust: global state, devices, comms and requests behind the NCCL
//! net API; the ffi layer translates C calls into these functions.
