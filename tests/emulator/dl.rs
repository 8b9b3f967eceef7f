//! dlopen/dlsym/dlclose of the plugin under test (flags as NCCL's ncclOpenNetPluginLib uses them)
//! and of the emulator's C logger, compiled from tests/emulator/logger.c with the system `cc`.

use super::abi::{Logger, NetV8};
use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_long, c_void};
use std::path::{Path, PathBuf};

/// The RELEASE plugin: `$DQPLB_PLUGIN_SO`, else `libnccl_net_dqplb.so` next to this test binary
/// (target/release/deps/, fresh under `cargo test --release`), else target/release/.
pub(crate) fn plugin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("DQPLB_PLUGIN_SO") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    let here = deps.join("libnccl_net_dqplb.so");
    if here.exists() {
        return here;
    }
    deps.parent()
        .expect("profile directory")
        .join("libnccl_net_dqplb.so")
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "(no dlerror)".into();
    }
    // SAFETY: non-NULL result of dlerror.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// A dlopen handle; closed only by an explicit `close`.
pub(crate) struct Lib {
    handle: *mut c_void,
    what: String,
}

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Lib {}

impl Lib {
    /// RTLD_NOW|RTLD_LOCAL: src/net.cc (2.20-2.27) and src/plugin/plugin_open.cc (2.28-2.30).
    pub(crate) fn open(path: &Path) -> Result<Lib, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: valid C string.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen {}: {}", path.display(), last_dl_error()));
        }
        Ok(Lib {
            handle,
            what: path.display().to_string(),
        })
    }

    pub(crate) fn sym(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: live handle, valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    pub(crate) fn close(self) -> Result<(), String> {
        // SAFETY: handle from dlopen, closed once (self is consumed).
        if unsafe { libc::dlclose(self.handle) } != 0 {
            return Err(format!("dlclose {}: {}", self.what, last_dl_error()));
        }
        Ok(())
    }
}

/// `ncclNetPlugin_v8` of an open library, as a `'static` reference: valid while the library is
/// open (and afterwards too, because the plugin links with -z nodelete; the emulator does not
/// rely on that: it drops the reference before dlclose).
pub(crate) fn vtable(lib: &Lib) -> Result<&'static NetV8, String> {
    let p = lib
        .sym("ncclNetPlugin_v8")
        .ok_or_else(|| format!("dlsym ncclNetPlugin_v8: {}", last_dl_error()))?;
    // SAFETY: the symbol is the plugin's ncclNet_v8_t static.
    Ok(unsafe { &*(p as *const NetV8) })
}

/// The C logger handed to init().
pub(crate) struct CLog {
    _lib: Lib,
    pub logger: Logger,
    count: unsafe extern "C" fn(c_int) -> c_long,
}

impl CLog {
    pub(crate) fn load() -> Result<CLog, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let dir = exe.parent().ok_or("exe dir")?.join("dqplb-emulator");
        let so = dir.join("emu-logger.so");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emulator/logger.c");
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        // Rebuilt when logger.c changed; where the source is absent (the VM) the shipped one.
        let stale = match (mtime(&so), mtime(&src)) {
            (None, _) => true,
            (Some(built), Some(edited)) => edited > built,
            (Some(_), None) => false,
        };
        if stale {
            std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            let tmp = dir.join(format!("emu-logger.{}.so", std::process::id()));
            let out = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&tmp)
                .arg(&src)
                .output()
                .map_err(|e| format!("cc: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cc logger.c: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            std::fs::rename(&tmp, &so).map_err(|e| format!("rename logger: {e}"))?;
        }
        let lib = Lib::open(&so)?;
        let f = lib.sym("emu_logger").ok_or("dlsym emu_logger")?;
        let c = lib.sym("emu_log_count").ok_or("dlsym emu_log_count")?;
        // SAFETY: the two C functions of logger.c, with these signatures.
        let (logger, count) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Logger>(f),
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> c_long>(c),
            )
        };
        Ok(CLog {
            _lib: lib,
            logger,
            count,
        })
    }

    /// Messages logged at `level` so far (2 = WARN).
    pub(crate) fn count(&self, level: c_int) -> c_long {
        // SAFETY: plain C function.
        unsafe { (self.count)(level) }
    }
}
