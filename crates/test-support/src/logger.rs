//! The C logger handed to the plugin's init(): logger.c, a real variadic C function, compiled
//! with the system `cc` into `dqplb-logger/dqplb-logger.so` next to the test binary, and dlopen'ed.

use crate::dl::Library;
use crate::nccl::Logger;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_long, c_void};
use std::path::{Path, PathBuf};

/// The shared object's file name in `dir()`.
pub const SO_NAME: &str = "dqplb-logger.so";
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/logger.c");
const SYMBOLS: [&str; 3] = ["dqplb_logger", "dqplb_log_count", "dqplb_warn_text"];

/// Where the logger is built and looked for: `dqplb-logger/` next to the test executable
/// (scripts/verbs-tests.sh ships a build there for the Soft-RoCE VM, which has no compiler).
pub fn dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .expect("test binary directory")
        .join("dqplb-logger")
}

type Count = unsafe extern "C" fn(c_int) -> c_long;
type WarnText = unsafe extern "C" fn(c_long) -> *const c_char;

/// The loaded logger: `logger` for init(), its per-level counts and the WARN texts.
pub struct CLogger {
    _lib: Library,
    pub logger: Logger,
    count: Count,
    warn_text: WarnText,
}

/// Opens `so` if it has every function of this logger.c; Ok(None) if it lacks one.
fn open_current(so: &Path) -> Result<Option<Library>, String> {
    let lib = Library::open(so)?;
    if SYMBOLS.iter().all(|s| lib.symbol(s).is_ok()) {
        return Ok(Some(lib));
    }
    lib.close()?;
    Ok(None)
}

fn compile(dir: &Path, so: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    // Children of one test build it at the same time: each into its own file, renamed over.
    let tmp = dir.join(format!("dqplb-logger.{}.so", std::process::id()));
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&tmp)
        .arg(SOURCE)
        .output()
        .map_err(|e| format!("running cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc {SOURCE}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::rename(&tmp, so).map_err(|e| format!("rename logger: {e}"))
}

impl CLogger {
    /// Loads `dir()`/dqplb-logger.so, compiling logger.c first when the build is missing, older
    /// than logger.c, or lacks one of its functions; where the source is absent (the VM) the
    /// shipped build is used as it is.
    pub fn load() -> Result<CLogger, String> {
        let dir = dir();
        let so = dir.join(SO_NAME);
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let newer_source = match (modified(Path::new(SOURCE)), modified(&so)) {
            (Some(src), Some(built)) => src > built,
            _ => false,
        };
        let current = if so.exists() && !newer_source {
            open_current(&so)?
        } else {
            None
        };
        let lib = match current {
            Some(lib) => lib,
            None => {
                compile(&dir, &so)?;
                Library::open(&so)?
            }
        };
        let [f, c, w] = SYMBOLS.map(|s| lib.symbol(s));
        let (f, c, w) = (f?, c?, w?);
        // SAFETY: the symbols are logger.c's functions, with these signatures.
        unsafe {
            Ok(CLogger {
                logger: std::mem::transmute::<*mut c_void, Logger>(f),
                count: std::mem::transmute::<*mut c_void, Count>(c),
                warn_text: std::mem::transmute::<*mut c_void, WarnText>(w),
                _lib: lib,
            })
        }
    }

    /// Messages logged at `level` so far (nccl::LOG_WARN, nccl::LOG_INFO, ...).
    pub fn count(&self, level: c_int) -> c_long {
        // SAFETY: a plain C function reading an atomic counter.
        unsafe { (self.count)(level) }
    }

    /// The text of every WARN logged so far (up to the first 256), in order.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            // SAFETY: returns NULL or a NUL-terminated string in the logger's static storage.
            let p = unsafe { (self.warn_text)(out.len() as c_long) };
            if p.is_null() {
                return out;
            }
            // SAFETY: non-NULL and NUL-terminated (snprintf).
            out.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
}
