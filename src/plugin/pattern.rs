//! Traffic patterns from NCCL's setNetAttr hints (collective, p2p, all-to-all) and the engine route
//! each one runs on, from the site's `[patterns]` table.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::state::NetAttr;
use dqplb_config::{PatternsSection, PolicyName};
use dqplb_engine::PolicyKind;

/// What a communicator is doing now, as NCCL's latest setNetAttr describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Pattern {
    /// No hint, or one that mixes patterns: the configured `engine.policy`.
    Unknown = 0,
    Collective = 1,
    P2p = 2,
    AllToAll = 3,
}

/// Number of patterns (array size of a route table).
pub(crate) const PATTERNS: usize = 4;

impl Pattern {
    pub const ALL: [Pattern; PATTERNS] = [
        Pattern::Unknown,
        Pattern::Collective,
        Pattern::P2p,
        Pattern::AllToAll,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Unknown => "unknown",
            Pattern::Collective => "collective",
            Pattern::P2p => "p2p",
            Pattern::AllToAll => "alltoall",
        }
    }

    fn from_u8(v: u8) -> Pattern {
        Pattern::ALL[(v as usize) & (PATTERNS - 1)]
    }
}

// ncclFunc_t bits of ncclNetAttr_t.op (NCCL src/include/nccl_common.h, 2.28.3 - 2.30.7):
// Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3, AllReduce 4, SendRecv 5, Send 6, Recv 7,
// AlltoAll 8, Scatter 9, Gather 10, AllGatherV 11, PutSignal 12, Signal 13, WaitSignal 14.
const COLLECTIVE_OPS: u32 = 0b1_1111 | (1 << 11);
const P2P_OPS: u32 = (0b111 << 5) | (0b111 << 12);
const ALLTOALL_OPS: u32 = 0b111 << 8;
/// NCCL_NET_ATTR_UNDEF (-1) as the uint32_t op field holds it.
const OP_UNDEF: u32 = u32::MAX;

/// The pattern of a hint. NCCL's connect-time hints (net.cc populateCommNetAttrs, 2.28.3 -
/// 2.30.7) leave op undefined on collective connections and set Send|Recv|AlltoAll|Scatter|Gather
/// on p2p ones: both mixed, so Unknown. Its per-transfer hints (setXferNetAttrs) set exactly one
/// op bit, BIT(collAPI), with the transfer's nPeers as min = max concurrent peers of its side.
pub fn classify(a: &NetAttr, alltoall_min_peers: u32) -> Pattern {
    let op = a.op;
    if op == 0 || op == OP_UNDEF {
        return Pattern::Unknown;
    }
    if op & !COLLECTIVE_OPS == 0 {
        return Pattern::Collective;
    }
    if op & !ALLTOALL_OPS == 0 {
        return Pattern::AllToAll;
    }
    if op & !P2P_OPS == 0 {
        // A send/recv batch to many peers at once is an all-to-all in all but name.
        let peers = a.send.max_concurrent_peers.max(a.recv.max_concurrent_peers);
        if peers >= 0 && peers as u32 >= alltoall_min_peers {
            return Pattern::AllToAll;
        }
        return Pattern::P2p;
    }
    Pattern::Unknown
}

/// A communicator's current pattern, shared by its context and its send comms (one relaxed
/// load per isend).
#[derive(Debug, Clone, Default)]
pub struct PatternCell(Arc<AtomicU8>);

impl PatternCell {
    pub fn get(&self) -> Pattern {
        Pattern::from_u8(self.0.load(Ordering::Relaxed))
    }

    /// Stores `p`; true if it changed.
    pub fn set(&self, p: Pattern) -> bool {
        self.0.swap(p as u8, Ordering::Relaxed) != p as u8
    }
}

/// The (policy, data QPs used; 0 = all) a pattern runs with under `cfg`, `engine` being the
/// configured `engine.policy`.
pub(crate) fn pattern_policy(
    cfg: &PatternsSection,
    engine: PolicyName,
    p: Pattern,
) -> (PolicyName, usize) {
    match p {
        Pattern::Unknown => (engine, 0),
        Pattern::Collective => (cfg.collective.resolve(engine), 0),
        Pattern::P2p => (cfg.p2p.resolve(engine), 0),
        Pattern::AllToAll => (cfg.alltoall.resolve(engine), cfg.alltoall_qps as usize),
    }
}

/// A send comm's route per pattern, and the distinct (policy, QPs) routes it needs beyond route 0
/// (the connection's configured policy over all `conn_qps` QPs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RoutePlan {
    /// Route index per pattern (indexed by `Pattern as usize`).
    pub route_of: [u8; PATTERNS],
    /// Routes 1.. in order: (policy, QPs).
    pub extra: Vec<(PolicyKind, usize)>,
}

/// Plans the routes of a connection with `conn_qps` data QPs.
pub(crate) fn plan_routes(
    cfg: &PatternsSection,
    engine: PolicyName,
    conn_qps: usize,
    kind_of: impl Fn(PolicyName) -> PolicyKind,
) -> RoutePlan {
    let mut plan = RoutePlan {
        route_of: [0; PATTERNS],
        extra: Vec::new(),
    };
    let base = (kind_of(engine), conn_qps);
    for p in Pattern::ALL {
        let (name, qps) = pattern_policy(cfg, engine, p);
        let qps = if qps == 0 {
            conn_qps
        } else {
            qps.min(conn_qps)
        };
        let want = (kind_of(name), qps);
        if want == base {
            continue;
        }
        let idx = match plan.extra.iter().position(|r| *r == want) {
            Some(i) => i,
            None => {
                plan.extra.push(want);
                plan.extra.len() - 1
            }
        };
        plan.route_of[p as usize] = (idx + 1) as u8;
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::state::CommAttr;

    fn attr(op: u32, send_peers: i32, recv_peers: i32) -> NetAttr {
        let side = |n| CommAttr {
            max_concurrent_peers: n,
            min_concurrent_peers: n.min(1),
            max_flows_per_peer: 2,
            min_flows_per_peer: 1,
        };
        NetAttr {
            send: side(send_peers),
            recv: side(recv_peers),
            op,
            algo: u32::MAX,
            proto: u32::MAX,
        }
    }

    #[test]
    fn nccl_hints_classify() {
        let bit = |f: u32| 1u32 << f;
        // Connect time: collective connections leave op undefined, p2p ones set 5 ops.
        assert_eq!(classify(&attr(u32::MAX, 6, 6), 8), Pattern::Unknown);
        let p2p_conn = bit(6) | bit(7) | bit(8) | bit(9) | bit(10);
        assert_eq!(classify(&attr(p2p_conn, 64, 64), 8), Pattern::Unknown);
        // Per transfer: one op bit.
        for f in [0, 1, 2, 3, 4, 11] {
            assert_eq!(
                classify(&attr(bit(f), 1, 1), 8),
                Pattern::Collective,
                "op {f}"
            );
        }
        for f in [8, 9, 10] {
            assert_eq!(
                classify(&attr(bit(f), 1, 1), 8),
                Pattern::AllToAll,
                "op {f}"
            );
        }
        for f in [5, 6, 7, 12, 13, 14] {
            assert_eq!(classify(&attr(bit(f), 1, 1), 8), Pattern::P2p, "op {f}");
        }
        // Send with 8 concurrent peers: all-to-all at the default threshold, p2p below.
        assert_eq!(classify(&attr(bit(6), 8, 1), 8), Pattern::AllToAll);
        assert_eq!(classify(&attr(bit(6), 7, 1), 8), Pattern::P2p);
        assert_eq!(classify(&attr(bit(7), 1, 9), 8), Pattern::AllToAll);
        // Undefined peers (-1) never count as many.
        assert_eq!(classify(&attr(bit(6), -1, -1), 1), Pattern::P2p);
        assert_eq!(classify(&attr(0, 1, 1), 8), Pattern::Unknown);
        assert_eq!(classify(&attr(bit(4) | bit(8), 1, 1), 8), Pattern::Unknown);
    }

    #[test]
    fn cell_round_trips() {
        let c = PatternCell::default();
        assert_eq!(c.get(), Pattern::Unknown);
        assert!(c.set(Pattern::AllToAll));
        assert!(!c.set(Pattern::AllToAll));
        assert_eq!(c.clone().get(), Pattern::AllToAll);
    }

    #[test]
    fn default_plan_sprays_alltoall_over_four_qps() {
        let kind = crate::plugin::policy_kind;
        let cfg = PatternsSection::default();
        let plan = plan_routes(&cfg, PolicyName::Dqplb, 8, kind);
        assert_eq!(plan.route_of, [0, 0, 0, 1]);
        assert_eq!(plan.extra, vec![(PolicyKind::StaticSplit, 4)]);
        // A 2-QP connection: static split over its 2.
        let plan = plan_routes(&cfg, PolicyName::Dqplb, 2, kind);
        assert_eq!(plan.extra, vec![(PolicyKind::StaticSplit, 2)]);
        // Everything default: no extra route.
        let same = PatternsSection {
            alltoall: dqplb_config::PatternPolicy::Default,
            alltoall_qps: 0,
            ..cfg.clone()
        };
        let plan = plan_routes(&same, PolicyName::Dqplb, 8, kind);
        assert_eq!((plan.route_of, plan.extra.len()), ([0; PATTERNS], 0));
        // Two patterns sharing a route get one.
        let shared = PatternsSection {
            p2p: dqplb_config::PatternPolicy::StaticSplit,
            alltoall_qps: 0,
            ..cfg
        };
        let plan = plan_routes(&shared, PolicyName::Dqplb, 8, kind);
        assert_eq!(plan.route_of, [0, 0, 1, 1]);
        assert_eq!(plan.extra, vec![(PolicyKind::StaticSplit, 8)]);
    }
}
