//! cargo-fuzz entry point for the `tcp_stream_bytes` check in harness/tcp_stream_bytes.rs (see docs/records/robustness.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dqplb_fuzz::tcp_stream_bytes::check(data));
