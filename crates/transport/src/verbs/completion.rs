//! Work completions copied out of `ibv_wc` into a plain Copy struct (immediate converted from
//! network to host order) and mapped to errors naming device, QP and `ibv_wc_status_str`.

use super::error::{Result, VerbsError};
use super::sys as ib;
use std::ffi::CStr;

/// Most completions one `CompletionQueue::poll` call returns (its stack buffer size).
pub const POLL_BATCH: usize = 32;

/// What a completion reports (valid only for successful completions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
    /// The receive side of an RDMA_WRITE_WITH_IMM.
    RecvRdmaWithImm,
    #[default]
    Unknown,
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    pub wr_id: u64,
    /// Local QP number the work request was posted on.
    pub qp_num: u32,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    pub vendor_err: u32,
    pub opcode: WcOpcode,
    /// Bytes received (receives) — for RECV_RDMA_WITH_IMM the bytes the peer wrote.
    pub byte_len: u32,
    /// Immediate in host byte order, when the completion carries one.
    pub imm: Option<u32>,
}

/// Text of an `ibv_wc_status` value as libibverbs spells it ("status N" without libibverbs).
pub fn status_str(status: u32) -> String {
    let Ok(v) = ib::verbs() else {
        return fallback_status_str(status);
    };
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value.
    let p = unsafe { (v.wc_status_str)(status) };
    if p.is_null() {
        return format!("unknown status {status}");
    }
    // SAFETY: non-NULL static string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The text of `enum ibv_wc_status` values without libibverbs (its ibv_wc_status_str wording).
fn fallback_status_str(status: u32) -> String {
    const NAMES: [&str; 24] = [
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "Work Request Flushed Error",
        "memory management operation error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
        "TM rendezvous error",
    ];
    NAMES
        .get(status as usize)
        .map_or_else(|| format!("unknown status {status}"), |s| s.to_string())
}

impl WorkCompletion {
    pub(crate) fn from_raw(wc: &ib::ibv_wc) -> Self {
        let opcode = match wc.opcode {
            ib::IBV_WC_SEND => WcOpcode::Send,
            ib::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            ib::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            ib::IBV_WC_RECV => WcOpcode::Recv,
            ib::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            _ => WcOpcode::Unknown,
        };
        let ok = wc.status == ib::IBV_WC_SUCCESS;
        let imm = if ok && wc.wc_flags & ib::IBV_WC_WITH_IMM != 0 {
            // SAFETY: with IBV_WC_WITH_IMM set the union holds the immediate (network order).
            Some(u32::from_be(unsafe {
                wc.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        };
        WorkCompletion {
            wr_id: wc.wr_id,
            qp_num: wc.qp_num,
            status: wc.status,
            vendor_err: wc.vendor_err,
            opcode,
            byte_len: wc.byte_len,
            imm,
        }
    }

    pub fn is_success(&self) -> bool {
        self.status == ib::IBV_WC_SUCCESS
    }

    /// True for a completion flushed because its QP went to the error state.
    pub fn is_flush(&self) -> bool {
        self.status == ib::IBV_WC_WR_FLUSH_ERR
    }

    /// Ok for success, else an error naming `device`, the QP and the status text.
    pub fn result(&self, device: &str) -> Result<()> {
        if self.is_success() {
            return Ok(());
        }
        Err(VerbsError::Completion {
            device: device.to_string(),
            qpn: self.qp_num,
            wr_id: self.wr_id,
            status: self.status,
            status_str: status_str(self.status),
            vendor_err: self.vendor_err,
        })
    }
}

/// Per-connection operation counts of one comm's data path: plain integers bumped with `&mut`
/// (no atomics, no allocation), read through the comm's `op_counters()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpCounters {
    /// Send work requests posted (RDMA writes, with or without immediate).
    pub send_posts: u64,
    /// Receive work requests posted (after connection setup).
    pub recv_posts: u64,
    /// Work completions reaped (any status).
    pub completions: u64,
    /// `ibv_poll_cq` calls that returned nothing.
    pub polls_empty: u64,
    /// `ibv_poll_cq` calls that returned at least one completion.
    pub polls_full: u64,
    /// Completions with IBV_WC_RNR_RETRY_EXC_ERR.
    pub rnr_errors: u64,
    /// Completions with IBV_WC_RETRY_EXC_ERR.
    pub retry_errors: u64,
}

impl OpCounters {
    /// Counts one poll that returned `n` completions, and those completions' error statuses.
    #[inline]
    pub fn polled(&mut self, wcs: &[WorkCompletion]) {
        if wcs.is_empty() {
            self.polls_empty += 1;
            return;
        }
        self.polls_full += 1;
        self.completions += wcs.len() as u64;
        for wc in wcs {
            match wc.status {
                ib::IBV_WC_SUCCESS => {}
                ib::IBV_WC_RNR_RETRY_EXC_ERR => self.rnr_errors += 1,
                ib::IBV_WC_RETRY_EXC_ERR => self.retry_errors += 1,
                _ => {}
            }
        }
    }

    /// All CQ polls.
    pub fn polls(&self) -> u64 {
        self.polls_empty + self.polls_full
    }

    /// All posts.
    pub fn posts(&self) -> u64 {
        self.send_posts + self.recv_posts
    }

    /// Field-wise `self - earlier` (saturating), for the counts of an interval.
    pub fn since(&self, earlier: &OpCounters) -> OpCounters {
        OpCounters {
            send_posts: self.send_posts.saturating_sub(earlier.send_posts),
            recv_posts: self.recv_posts.saturating_sub(earlier.recv_posts),
            completions: self.completions.saturating_sub(earlier.completions),
            polls_empty: self.polls_empty.saturating_sub(earlier.polls_empty),
            polls_full: self.polls_full.saturating_sub(earlier.polls_full),
            rnr_errors: self.rnr_errors.saturating_sub(earlier.rnr_errors),
            retry_errors: self.retry_errors.saturating_sub(earlier.retry_errors),
        }
    }

    /// `key=value` summary for log lines (parsed back by `dqplb perf`).
    pub fn summary(&self) -> String {
        format!(
            "send_posts={} recv_posts={} completions={} polls_empty={} polls_full={} rnr_errors={} retry_errors={}",
            self.send_posts,
            self.recv_posts,
            self.completions,
            self.polls_empty,
            self.polls_full,
            self.rnr_errors,
            self.retry_errors
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_texts_come_from_libibverbs() {
        if ib::verbs().is_err() {
            // Our own table speaks for an absent libibverbs.
            assert_eq!(status_str(ib::IBV_WC_SUCCESS), "success");
            assert_eq!(
                status_str(ib::IBV_WC_WR_FLUSH_ERR),
                "Work Request Flushed Error"
            );
            return;
        }
        assert_eq!(status_str(ib::IBV_WC_SUCCESS), "success");
        assert_eq!(status_str(ib::IBV_WC_REM_ACCESS_ERR), "remote access error");
        // Without libibverbs the same words come from our own table.
        for st in [
            ib::IBV_WC_SUCCESS,
            ib::IBV_WC_WR_FLUSH_ERR,
            ib::IBV_WC_RETRY_EXC_ERR,
        ] {
            if ib::verbs().is_ok() {
                assert_eq!(fallback_status_str(st), status_str(st), "status {st}");
            }
        }
        assert_eq!(fallback_status_str(99), "unknown status 99");
    }

    #[test]
    fn error_completion_names_device_and_qp() {
        let wc = WorkCompletion {
            wr_id: 7,
            qp_num: 0x11,
            status: ib::IBV_WC_WR_FLUSH_ERR,
            ..Default::default()
        };
        assert!(wc.is_flush());
        let err = wc.result("rxe0").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("rxe0") && text.contains("QP 17"), "{text}");
        assert!(text.contains("Flushed"), "{text}");
        let ok = WorkCompletion::default();
        assert!(ok.result("rxe0").is_ok());
    }
}
