//! Loading shared objects as NCCL does (dlopen RTLD_NOW | RTLD_LOCAL: src/net.cc 2.20-2.27,
//! src/plugin/plugin_open.cc 2.28-2.30; dlsym; dlclose), and where the plugin under test is.

use crate::nccl::NetV8;
use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::path::{Path, PathBuf};

/// The plugin .so under test: `$DQPLB_PLUGIN_SO` if set, else the `libnccl_net_dqplb.so` that
/// `cargo test` has just built next to this test executable (`target/<profile>/deps/`). Only
/// `cargo build` copies it up to `target/<profile>/`, so the copy there can be stale during
/// `cargo test`; it is used only when the deps one is missing.
pub fn plugin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("DQPLB_PLUGIN_SO") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    let fresh = deps.join("libnccl_net_dqplb.so");
    if fresh.exists() {
        return fresh;
    }
    deps.parent()
        .expect("profile directory")
        .join("libnccl_net_dqplb.so")
}

/// The last dl* error of this thread.
pub fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "(no dlerror)".into();
    }
    // SAFETY: non-NULL result of dlerror.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// An open shared object; dropping it does nothing, `close` must be called explicitly.
pub struct Library {
    handle: *mut c_void,
    path: PathBuf,
}

// SAFETY: a dlopen handle may be used and closed from any thread.
unsafe impl Send for Library {}

impl Library {
    pub fn open(path: &Path) -> Result<Library, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: c is a valid C string; the flags are NCCL's.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen {}: {}", path.display(), dlerror()));
        }
        Ok(Library {
            handle,
            path: path.to_path_buf(),
        })
    }

    pub fn symbol(&self, name: &str) -> Result<*mut c_void, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: handle is a live dlopen handle, c a valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(format!(
                "dlsym {name} in {}: {}",
                self.path.display(),
                dlerror()
            ));
        }
        Ok(p)
    }

    pub fn close(self) -> Result<(), String> {
        // SAFETY: handle came from dlopen and is closed once (self is consumed).
        if unsafe { libc::dlclose(self.handle) } != 0 {
            return Err(format!("dlclose {}: {}", self.path.display(), dlerror()));
        }
        Ok(())
    }
}

/// `ncclNetPlugin_v8` of an open library, as a `'static` reference: valid while the library is
/// open (and after, since the plugin links with -z nodelete; callers do not rely on that).
pub fn net_v8(lib: &Library) -> Result<&'static NetV8, String> {
    let p = lib.symbol("ncclNetPlugin_v8")?;
    // SAFETY: the symbol is the plugin's ncclNet_v8_t static.
    Ok(unsafe { &*(p as *const NetV8) })
}

/// The plugin library and its exported v8 vtable, valid while `lib` is open.
pub struct Plugin {
    pub lib: Library,
    pub net: &'static NetV8,
}

impl Plugin {
    pub fn load(path: &Path) -> Result<Plugin, String> {
        if !path.exists() {
            return Err(format!(
                "plugin library {} not found: `cargo test` builds it with the package \
                 (crate-type cdylib); or point DQPLB_PLUGIN_SO at a built .so",
                path.display()
            ));
        }
        let lib = Library::open(path)?;
        let net = net_v8(&lib)?;
        Ok(Plugin { lib, net })
    }

    /// The vtable's name ("" for NULL).
    pub fn name(&self) -> String {
        if self.net.name.is_null() {
            return String::new();
        }
        // SAFETY: a non-NULL name is a static C string per the ABI.
        unsafe { CStr::from_ptr(self.net.name) }
            .to_string_lossy()
            .into_owned()
    }
}
