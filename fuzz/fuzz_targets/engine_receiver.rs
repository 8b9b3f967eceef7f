//! cargo-fuzz entry point for the `engine_receiver` check in harness/engine_receiver.rs (see docs/records/robustness.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dqplb_fuzz::engine_receiver::check(data));
