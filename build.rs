//! Build script: generates the NCCL v8-v12 ABI types from nccl-headers/ with bindgen (one module:
//! nccl_net_v12.h includes v11, v10, v9 and v8) and sets the
//! cdylib's link options (`-z nodelete`, soname) so NCCL can dlclose it safely; exports the
//! checkout's short git hash for the version string (`nccl_net_dqplb::VERSION`).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

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

    export_git_hash();
}

/// Output of `git ARGS` run in the package directory, trimmed; None if git fails or says nothing.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Sets DQPLB_GIT_HASH for the crate: `git rev-parse --short HEAD`, else the DQPLB_GIT_HASH
/// environment variable (a build outside a git checkout), else "unknown". Reruns when HEAD moves:
/// the worktree's HEAD file (a worktree's .git is a file: `git rev-parse --git-dir` finds its
/// directory), the branch's ref and packed-refs in the common git directory.
fn export_git_hash() {
    println!("cargo:rerun-if-env-changed=DQPLB_GIT_HASH");
    let hash = git(&["rev-parse", "--short", "HEAD"]);
    if hash.is_some() {
        let here = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
        let mut watch = Vec::new();
        if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
            watch.push(here.join(dir).join("HEAD"));
        }
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            let common = here.join(common);
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watch.push(common.join(branch));
            }
            watch.push(common.join("packed-refs"));
        }
        // A missing file would rerun this script on every build: watch those that exist.
        for path in watch.iter().filter(|p| Path::exists(p)) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let hash = hash
        .or_else(|| {
            env::var("DQPLB_GIT_HASH")
                .ok()
                .filter(|h| !h.trim().is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=DQPLB_GIT_HASH={}", hash.trim());
}
