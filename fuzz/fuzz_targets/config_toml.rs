//! cargo-fuzz entry point for the `config_toml` check in harness/config_toml.rs (see docs/records/robustness.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dqplb_fuzz::config_toml::check(data));
