//! Error values of the verbs layer: failed verbs calls, error completions, bad sysfs data and bad
//! tuning knobs, each naming the device, QP or file involved.

use std::fmt;
use std::path::PathBuf;

/// Result alias of the verbs layer.
pub type Result<T> = std::result::Result<T, VerbsError>;

/// Everything that can go wrong in the verbs layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbsError {
    /// A verbs call failed; `errno` is the OS error it reported (0 when it gave none).
    Call {
        op: &'static str,
        device: String,
        errno: i32,
    },
    /// A work request completed with an error status.
    Completion {
        device: String,
        qpn: u32,
        wr_id: u64,
        status: u32,
        status_str: String,
        vendor_err: u32,
    },
    /// A sysfs file was missing or unreadable where it was required, or held garbage.
    Sysfs { path: PathBuf, reason: String },
    /// An environment knob (e.g. NCCL_IB_TIMEOUT) held a value out of range.
    Config {
        var: &'static str,
        value: String,
        reason: &'static str,
    },
    /// A caller asked for something impossible (bad index, out-of-bounds slice, bad peer info).
    Invalid { what: String },
    /// libibverbs.so.1 could not be loaded, or lacks a symbol the transport needs.
    Library(crate::verbs::sys::LoadError),
    /// A memory registration failed: `what` names the memory, `memlock` is (soft, hard)
    /// RLIMIT_MEMLOCK when the errno (ENOMEM, EPERM) points at the pinned-memory limit.
    Register {
        op: &'static str,
        device: String,
        what: String,
        errno: i32,
        memlock: Option<(u64, u64)>,
    },
}

impl VerbsError {
    /// Builds a `Call` error from `errno` (the thread's last OS error).
    pub(crate) fn last_os(op: &'static str, device: &str) -> Self {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        VerbsError::Call {
            op,
            device: device.to_string(),
            errno,
        }
    }

    /// Builds a `Call` error from a verbs return code (verbs return the errno itself, or -1).
    pub(crate) fn from_rc(op: &'static str, device: &str, rc: i32) -> Self {
        if rc > 0 {
            VerbsError::Call {
                op,
                device: device.to_string(),
                errno: rc,
            }
        } else {
            Self::last_os(op, device)
        }
    }

    /// Shorthand for an `Invalid` error.
    pub fn invalid(what: impl Into<String>) -> Self {
        VerbsError::Invalid { what: what.into() }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::Call { op, device, errno } => write!(
                f,
                "{op} failed on RDMA device {device}: {} (errno {errno})",
                std::io::Error::from_raw_os_error(*errno)
            ),
            VerbsError::Completion {
                device,
                qpn,
                wr_id,
                status,
                status_str,
                vendor_err,
            } => write!(
                f,
                "work completion error on device {device} QP {qpn}: {status_str} (status {status}, \
                 vendor_err {vendor_err:#x}, wr_id {wr_id:#x})"
            ),
            VerbsError::Sysfs { path, reason } => {
                write!(f, "sysfs {}: {reason}", path.display())
            }
            VerbsError::Config { var, value, reason } => {
                write!(f, "environment variable {var}={value:?}: {reason}")
            }
            VerbsError::Invalid { what } => write!(f, "invalid verbs request: {what}"),
            VerbsError::Library(e) => write!(f, "{e}"),
            VerbsError::Register {
                op,
                device,
                what,
                errno,
                memlock,
            } => {
                write!(
                    f,
                    "{op} of {what} failed on RDMA device {device}: {} (errno {errno})",
                    std::io::Error::from_raw_os_error(*errno)
                )?;
                if let Some((soft, hard)) = memlock {
                    let v = |x: u64| {
                        if x == libc::RLIM_INFINITY {
                            "unlimited".to_string()
                        } else {
                            format!("{x} bytes")
                        }
                    };
                    write!(
                        f,
                        "; pinned memory is capped by RLIMIT_MEMLOCK = {} (hard {}): raise it \
                         (ulimit -l unlimited, or LimitMEMLOCK=infinity / docker --ulimit memlock=-1)",
                        v(*soft),
                        v(*hard)
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for VerbsError {}
