//! Build script: generates the NCCL v8 ABI types from nccl-headers/ with bindgen and sets the
//! cdylib's link options (`-z nodelete`, soname) so NCCL can dlclose it safely.
use std::env;
use std::path::PathBuf;

fn main() {
    let header = "nccl-headers/nccl_net_v8.h";
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-changed=build.rs");
    let bindings = bindgen::Builder::default()
        .header(header)
        .allowlist_type("ncclNet_v8_t|ncclNetProperties_v8_t|ncclNetDeviceHandle_v8_t|ncclResult_t|ncclDebugLogLevel|ncclDebugLogSubSys|ncclDebugLogger_t")
        .allowlist_var("NCCL_.*")
        .rustified_enum("ncclResult_t")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on nccl-headers/nccl_net_v8.h (is libclang installed? see README)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("nccl_net_v8.rs"))
        .expect("write bindings");

    // NCCL may dlclose the plugin after the last communicator; never unmap our code.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl-net-dqplb.so");
}
