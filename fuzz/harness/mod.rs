//! Fuzz checks shared by the cargo-fuzz targets (fuzz/fuzz_targets) and the stable regression
//! replay (tests/fuzz_regressions.rs): each `check(&[u8])` panics only when an invariant breaks.

pub mod config_toml;
pub mod engine_receiver;
pub mod engine_sender_receiver;
pub mod tcp_peer;
pub mod tcp_stream_bytes;
pub mod wire_frames;
