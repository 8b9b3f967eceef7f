//! cargo-fuzz entry point for the `wire_frames` check in harness/wire_frames.rs (see docs/records/robustness.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dqplb_fuzz::wire_frames::check(data));
