//! Engine parameters (`EngineParams`, `PolicyKind`), their limits and validation, shared by the
//! sender and the receiver so both sides agree on the window and the reorder span.

use super::imm::SEQ_BITS;
use super::EngineError;
use std::fmt;
use std::str::FromStr;

/// Most data QPs per connection (NCCLX's cap); the sender keeps a 128-bit "has room" mask.
pub const MAX_QPS: usize = 128;
/// Most segments in flight per QP.
pub const MAX_OUTSTANDING: u32 = 2048;
/// Most messages (or posted receives) one side holds at once.
pub const MAX_MESSAGES: usize = 1 << 20;
/// Every segment boundary except a message's end is a multiple of this (LL/LL128 safety).
pub const SEGMENT_ALIGN: u32 = 128;
/// Longest segment: the largest multiple of 128 that fits the 32-bit length.
pub const MAX_SEGMENT_BYTES: u32 = u32::MAX / SEGMENT_ALIGN * SEGMENT_ALIGN;
/// The sequence span (oldest incomplete to newest sent) may reach `REORDER_SLACK * window`;
/// a QP up to about this many times slower than the others never throttles the sender.
pub const REORDER_SLACK: u32 = 16;
/// Exclusive bound on the reorder span: half the sequence space keeps wrap-around unambiguous.
pub(crate) const MAX_SPAN: u64 = 1 << (SEQ_BITS - 1);

/// How the sender picks a QP and a length for each segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Dynamic QP load balancing: `segment_bytes` pieces round-robin over QPs with room.
    Dqplb,
    /// DQPLB choosing, among QPs with room, the lowest expected completion
    /// `(outstanding + 1) x latency EWMA`, ties round robin.
    DqplbLed,
    /// NCCL_IB_SPLIT_DATA_ON_QPS=1: each message split evenly, chunk i on QP i.
    StaticSplit,
    /// NCCL default: a whole message on one QP, rotating per message.
    RoundRobinMessage,
    /// Everything on QP 0.
    SingleQp,
}

impl PolicyKind {
    /// All policies, in documentation order.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Dqplb,
        PolicyKind::DqplbLed,
        PolicyKind::StaticSplit,
        PolicyKind::RoundRobinMessage,
        PolicyKind::SingleQp,
    ];

    /// The policy's name as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Dqplb => "dqplb",
            PolicyKind::DqplbLed => "dqplb-led",
            PolicyKind::StaticSplit => "static-split",
            PolicyKind::RoundRobinMessage => "round-robin-message",
            PolicyKind::SingleQp => "single-qp",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| {
                let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown policy {s:?}: expected one of {}", names.join(", "))
            })
    }
}

/// Parameters of one connection's sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineParams {
    /// Data QPs, 1 ..= MAX_QPS.
    pub qps: usize,
    /// Segments in flight per QP, 1 ..= MAX_OUTSTANDING.
    pub max_outstanding: u32,
    /// Segment size for dqplb / round-robin-message / single-qp: a non-zero multiple of 128.
    pub segment_bytes: u32,
    /// Messages the sender may hold (queued, in flight, or done but not yet polled).
    pub max_messages: usize,
    pub policy: PolicyKind,
}

impl EngineParams {
    /// Segments that can be in flight: `qps * max_outstanding`.
    pub fn window(&self) -> u64 {
        self.qps as u64 * u64::from(self.max_outstanding)
    }

    /// Checks every field; the error names the field, its value and the rule.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = super::error::bad_param::<()>;
        if self.qps == 0 || self.qps > MAX_QPS {
            return bad("qps", self.qps as u64, "must be 1 ..= 128");
        }
        if self.max_outstanding == 0 || self.max_outstanding > MAX_OUTSTANDING {
            return bad(
                "max_outstanding",
                u64::from(self.max_outstanding),
                "must be 1 ..= 2048",
            );
        }
        if self.segment_bytes == 0 || !self.segment_bytes.is_multiple_of(SEGMENT_ALIGN) {
            return bad(
                "segment_bytes",
                u64::from(self.segment_bytes),
                "must be a non-zero multiple of 128",
            );
        }
        check_max_messages(self.max_messages)?;
        check_window(self.window())
    }
}

pub(crate) fn check_max_messages(max_messages: usize) -> Result<(), EngineError> {
    if max_messages == 0 || max_messages > MAX_MESSAGES {
        return Err(EngineError::BadParam {
            param: "max_messages",
            value: max_messages as u64,
            reason: "must be 1 ..= 1048576",
        });
    }
    Ok(())
}

/// The reorder span `REORDER_SLACK * window` must stay below 2^23.
pub(crate) fn check_window(window: u64) -> Result<(), EngineError> {
    if window == 0 || window * u64::from(REORDER_SLACK) >= MAX_SPAN {
        return Err(EngineError::BadParam {
            param: "window",
            value: window,
            reason: "must be >= 1 and REORDER_SLACK (16) * window must stay below 2^23 (window < 524288)",
        });
    }
    Ok(())
}

pub(crate) fn check_initial_seq(seq: u32) -> Result<(), EngineError> {
    if seq > super::imm::SEQ_MASK {
        return Err(EngineError::BadParam {
            param: "initial_seq",
            value: u64::from(seq),
            reason: "must be below 2^24",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for k in PolicyKind::ALL {
            assert_eq!(k.to_string().parse::<PolicyKind>(), Ok(k));
        }
        assert_eq!(" DQPLB ".parse::<PolicyKind>(), Ok(PolicyKind::Dqplb));
        let err = "spray".parse::<PolicyKind>().unwrap_err();
        assert!(
            err.contains("spray") && err.contains("static-split"),
            "{err}"
        );
    }
}
