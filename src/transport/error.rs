//! The error value every transport and the plugin layer return: an NCCL-style code plus a message
//! that names what failed and where (peer, stream, device). The ffi layer maps the code.

use std::fmt;

/// Which ncclResult_t an error becomes at the C boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    SystemError,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    RemoteError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetError {
    pub code: ErrorCode,
    pub msg: String,
}

pub type NetResult<T> = Result<T, NetError>;

impl NetError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        NetError {
            code,
            msg: msg.into(),
        }
    }
    pub fn system(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::SystemError, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, msg)
    }
    pub fn invalid_argument(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, msg)
    }
    pub fn invalid_usage(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidUsage, msg)
    }
    pub fn remote(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::RemoteError, msg)
    }
    /// An I/O error on a socket: resets and EOFs are the peer's doing, the rest are local.
    pub fn io(context: &str, err: &std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        let code = match err.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
                ErrorCode::RemoteError
            }
            _ => ErrorCode::SystemError,
        };
        Self::new(code, format!("{context}: {err}"))
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)
    }
}

impl std::error::Error for NetError {}
