//! Build script: generates the NCCL v8-v12 ABI types from nccl-headers/ with bindgen (one module:
//! nccl_net_v12.h includes v11, v10, v9 and v8) and sets the
//! cdylib's link options (`-z nodelete`, soname) so NCCL can dlclose it safely.
use std::env;
use std::path::PathBuf;

fn main() {
    let header = "nccl-headers/nccl_net_v12.h";
    for v in 8..=12 {
        println!("cargo:rerun-if-changed=nccl-headers/nccl_net_v{v}.h");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let bindings = bindgen::Builder::default()
        .header(header)
        .allowlist_type("ncclNet_v(8|9|10|11|12)_t|ncclNetProperties_v(8|9|10|11|12)_t|ncclNetDeviceHandle_v(8|9|10|11|12)_t|ncclNetVDeviceProps_v(9|10|11|12)_t|ncclNetCommConfig_v(10|11|12)_t|ncclNetCommAttr_v(11|12)_t|ncclNetAttr_v(11|12)_t|ncclProfilerCallback_t|ncclResult_t|ncclDebugLogLevel|ncclDebugLogSubSys|ncclDebugLogger_t")
        .allowlist_var("NCCL_.*")
        .rustified_enum("ncclResult_t")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on nccl-headers/nccl_net_v12.h (is libclang installed? see README)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("nccl_net.rs"))
        .expect("write bindings");

    // NCCL may dlclose the plugin after the last communicator; never unmap our code.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl-net-dqplb.so");
}
