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
    /// An I/O error on a socket: a peer that reset, closed, refused, stopped answering (TCP user
    /// timeout, keepalive) or became unreachable is the peer's doing (ncclRemoteError, as
    /// docs/records/abi.md promises for a closed or dead peer); the rest are local. `context` names
    /// the peer and stream.
    pub fn io(context: &str, err: &std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        let code = match err.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected
            | ConnectionRefused | TimedOut | HostUnreachable | NetworkUnreachable => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_or_closed_peer_is_a_remote_error_naming_it() {
        for errno in [
            libc::ECONNRESET,
            libc::ECONNABORTED,
            libc::EPIPE,
            libc::ENOTCONN,
            libc::ECONNREFUSED,
            libc::ETIMEDOUT,
            libc::EHOSTUNREACH,
            libc::ENETUNREACH,
        ] {
            let e = NetError::io(
                "data stream 1 (QP 0) with 10.0.0.2:4000: read",
                &std::io::Error::from_raw_os_error(errno),
            );
            assert_eq!(e.code, ErrorCode::RemoteError, "errno {errno}: {e}");
            assert!(
                e.msg.starts_with("data stream 1 (QP 0) with 10.0.0.2:4000"),
                "{e}"
            );
        }
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(NetError::io("x", &eof).code, ErrorCode::RemoteError);
        for errno in [libc::EMFILE, libc::ENOMEM, libc::EACCES, libc::EADDRINUSE] {
            let e = NetError::io("listen", &std::io::Error::from_raw_os_error(errno));
            assert_eq!(e.code, ErrorCode::SystemError, "errno {errno}: {e}");
        }
    }
}
