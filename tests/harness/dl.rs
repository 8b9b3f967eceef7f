//! Loading shared objects the way NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, dlsym, dlclose): the
//! plugin under test and the C logger, which is compiled here with the system `cc` on first use.

use super::abi::{Logger, NetV8};
use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_void};
use std::path::{Path, PathBuf};

/// Location of the cdylib under test: `$DQPLB_PLUGIN_SO` if set, else the
/// `libnccl_net_dqplb.so` that `cargo test` has just built next to this test executable
/// (`target/<profile>/deps/`). Only `cargo build` copies it up to `target/<profile>/`, so the copy
/// there can be stale during `cargo test`; it is used only when the deps one is missing.
pub(crate) fn plugin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("DQPLB_PLUGIN_SO") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    let fresh = deps.join("libnccl_net_dqplb.so");
    if fresh.exists() {
        return fresh;
    }
    deps.parent()
        .expect("profile dir")
        .join("libnccl_net_dqplb.so")
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dl error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// An open shared object; dropping it does nothing, `close` must be called explicitly.
pub(crate) struct Library {
    handle: *mut c_void,
    path: PathBuf,
}

impl Library {
    pub(crate) fn open(path: &Path) -> Result<Library, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: c is a valid C string; flags as NCCL uses them.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen {}: {}", path.display(), dlerror_string()));
        }
        Ok(Library {
            handle,
            path: path.to_path_buf(),
        })
    }

    pub(crate) fn symbol(&self, name: &str) -> Result<*mut c_void, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: handle is a live dlopen handle.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(format!(
                "dlsym {name} in {}: {}",
                self.path.display(),
                dlerror_string()
            ));
        }
        Ok(p)
    }

    pub(crate) fn close(self) -> Result<(), String> {
        // SAFETY: handle came from dlopen and is closed once.
        let rc = unsafe { libc::dlclose(self.handle) };
        if rc != 0 {
            return Err(format!(
                "dlclose {}: {}",
                self.path.display(),
                dlerror_string()
            ));
        }
        Ok(())
    }
}

/// The plugin's exported vtable, valid while `lib` is open.
pub(crate) struct Plugin {
    pub lib: Library,
    pub net: &'static NetV8,
}

impl Plugin {
    pub(crate) fn load(path: &Path) -> Result<Plugin, String> {
        if !path.exists() {
            return Err(format!(
                "plugin library {} not found: `cargo test` builds it with the package \
                 (crate-type cdylib); or point DQPLB_PLUGIN_SO at a built .so",
                path.display()
            ));
        }
        let lib = Library::open(path)?;
        let sym = lib.symbol("ncclNetPlugin_v8")?;
        // SAFETY: the symbol is the plugin's `ncclNet_v8_t` static; it outlives the handle
        // because the plugin links with -z nodelete (checked again after reopen).
        let net = unsafe { &*(sym as *const NetV8) };
        Ok(Plugin { lib, net })
    }

    pub(crate) fn name(&self) -> String {
        if self.net.name.is_null() {
            return String::new();
        }
        // SAFETY: non-null name is a static C string per the ABI.
        unsafe { CStr::from_ptr(self.net.name) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The C logger: `harness_logger` (passed to init), `harness_log_count(level)` and
/// `harness_warn_text(i)`, the text of the i-th WARN.
pub(crate) struct CLogger {
    _lib: Library,
    pub logger: Logger,
    count: unsafe extern "C" fn(c_int) -> libc::c_long,
    warn_text: unsafe extern "C" fn(libc::c_long) -> *const libc::c_char,
}

impl CLogger {
    /// Compiles tests/harness/logger.c into `dir`/harness-logger.so and loads it. A build already
    /// there is reused unless logger.c is newer than it (scripts/verbs-tests.sh compiles it on the
    /// host for the VM, which has no compiler and no source tree) or it lacks a function of this
    /// version of logger.c (`harness_warn_text`): an edited logger.c is never served stale.
    pub(crate) fn build_and_load(dir: &Path) -> Result<CLogger, String> {
        let so = dir.join("harness-logger.so");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harness/logger.c");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let newer_source = match (modified(&src), modified(&so)) {
            (Some(s), Some(o)) => s > o,
            _ => false,
        };
        let current = so.exists() && !newer_source && {
            let lib = Library::open(&so)?;
            let has = lib.symbol("harness_warn_text").is_ok();
            lib.close()?;
            has
        };
        if !current {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            let tmp = dir.join(format!("harness-logger.{}.so", std::process::id()));
            let out = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&tmp)
                .arg(&src)
                .output()
                .map_err(|e| format!("running cc: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "cc {}: {}",
                    src.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            std::fs::rename(&tmp, &so).map_err(|e| format!("rename logger: {e}"))?;
        }
        let lib = Library::open(&so)?;
        let f = lib.symbol("harness_logger")?;
        let c = lib.symbol("harness_log_count")?;
        let w = lib.symbol("harness_warn_text")?;
        // SAFETY: the symbols are the C functions of logger.c with these signatures.
        unsafe {
            Ok(CLogger {
                logger: std::mem::transmute::<*mut c_void, Logger>(f),
                count: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(c_int) -> libc::c_long,
                >(c),
                warn_text: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(libc::c_long) -> *const libc::c_char,
                >(w),
                _lib: lib,
            })
        }
    }

    pub(crate) fn count(&self, level: c_int) -> i64 {
        // SAFETY: plain C function reading an atomic counter.
        unsafe { (self.count)(level) }
    }

    /// The text of every WARN logged so far (up to the first 256), in order.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            // SAFETY: returns NULL or a NUL-terminated string in the logger's static storage.
            let p = unsafe { (self.warn_text)(out.len() as libc::c_long) };
            if p.is_null() {
                return out;
            }
            // SAFETY: non-NULL, NUL-terminated (snprintf).
            out.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
}
