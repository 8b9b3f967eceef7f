//! `dqplb perf --plugin PATH`: opens another NCCL net plugin as NCCL does (dlopen RTLD_NOW |
//! RTLD_LOCAL) and finds its `ncclNetPlugin_v8` vtable.

use nccl_net_dqplb::ffi::sys::ncclNet_v8_t;
use std::ffi::{CStr, CString};
use std::path::Path;

/// The symbol `dqplb perf` drives: NCCL 2.19+ look for it (src/net.cc, `ncclNetPlugin_v8`,
/// 2.19-2.27; src/plugin/net.cc 2.28-2.30) before older versions.
pub(crate) const SYMBOL: &str = "ncclNetPlugin_v8";

/// The last dl* error of this thread.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "no dlerror".into();
    }
    // SAFETY: non-NULL result of dlerror.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// Opens `path` and returns its v8 vtable. The library stays loaded for the life of the
/// process (the vtable's functions are called until exit), so it is never closed.
pub(crate) fn open_v8(path: &Path) -> Result<&'static ncclNet_v8_t, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("--plugin {}: the path contains a NUL byte", path.display()))?;
    // SAFETY: c is a valid C string; the flags are NCCL's (src/net.cc 2.19-2.27,
    // src/plugin/plugin_open.cc 2.28-2.30: RTLD_NOW | RTLD_LOCAL).
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!(
            "--plugin {}: cannot load it: {}",
            path.display(),
            dlerror()
        ));
    }
    let sym = CString::new(SYMBOL).map_err(|e| e.to_string())?;
    // SAFETY: handle is a live dlopen handle, sym a valid C string.
    let p = unsafe { libc::dlsym(handle, sym.as_ptr()) };
    if p.is_null() {
        return Err(format!(
            "--plugin {}: not an NCCL net plugin: no symbol {SYMBOL} ({})",
            path.display(),
            dlerror()
        ));
    }
    // SAFETY: NCCL's contract for this symbol: a static ncclNet_v8_t that lives as long as the
    // library, which is never unloaded.
    Ok(unsafe { &*p.cast::<ncclNet_v8_t>() })
}

/// The vtable's `name` field ("?" if NULL).
pub(crate) fn name_of(v: &ncclNet_v8_t) -> String {
    if v.name.is_null() {
        return "?".into();
    }
    // SAFETY: NCCL reads `name` as a C string; non-NULL here.
    unsafe { CStr::from_ptr(v.name) }
        .to_string_lossy()
        .into_owned()
}
