//! cargo-fuzz entry point for the `engine_sender_receiver` check in harness/engine_sender_receiver.rs (see docs/records/robustness.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dqplb_fuzz::engine_sender_receiver::check(data));
