//! The engine's depth rule on a send comm of either transport: installed over a base depth below
//! the one the connection was sized for, and what it has done so far.

use dqplb_engine::{DepthRule, RepinRule};

use super::requests::Requests;
use super::send::SendCore;
use crate::NetResult;

/// The depth rule's state on one send comm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthState {
    /// Segments in flight allowed per data QP now.
    pub depth: u32,
    /// Times the rule raised the depth (0 without the rule).
    pub raises: u64,
    /// The rule installed, if any.
    pub rule: Option<DepthRule>,
    /// Segments in flight per data QP the connection was sized for (`ConnParams::outstanding`,
    /// what the peer's receive side holds room for).
    pub bound: u32,
    /// The re-pin rule installed on the depth rule, if any (verbs).
    pub repin: Option<RepinRule>,
    /// Moves the re-pin rule made so far (not counting moves back).
    pub repins: u32,
}

/// A send comm whose engine can run the depth rule (TCP and verbs).
pub trait DepthControl {
    /// Installs `rule` with the engine at `base` segments per QP; the comm must have been
    /// connected with `ConnParams::outstanding` >= `rule.raised` (its per-QP rings, the peer's
    /// receive sizing and its checks follow that bound). Before any message, route or re-hash
    /// rule.
    fn set_depth_rule(&mut self, base: u32, rule: DepthRule) -> NetResult<()>;

    /// The depth now, the raises so far and the rule.
    fn depth_state(&mut self) -> DepthState;
}

fn state<A: Copy, R>(core: &SendCore<A, R>) -> DepthState {
    DepthState {
        depth: core.engine.depth(),
        raises: core.engine.depth_raises(),
        rule: core.engine.depth_rule(),
        bound: core.params.outstanding,
        repin: core.engine.repin_rule(),
        repins: core.engine.depth_repins(),
    }
}

impl DepthControl for crate::tcp::TcpSendComm {
    fn set_depth_rule(&mut self, base: u32, rule: DepthRule) -> NetResult<()> {
        self.core().set_depth_rule(base, rule)
    }

    fn depth_state(&mut self) -> DepthState {
        state(self.core())
    }
}

#[cfg(feature = "verbs")]
impl DepthControl for crate::verbs::VerbsSendComm {
    fn set_depth_rule(&mut self, base: u32, rule: DepthRule) -> NetResult<()> {
        self.core().set_depth_rule(base, rule)
    }

    fn depth_state(&mut self) -> DepthState {
        state(self.core())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::ConnParams;
    use dqplb_engine::PolicyKind;

    #[derive(Clone, Copy)]
    struct Send(usize);

    impl super::super::Outgoing for Send {
        fn bytes(&self) -> usize {
            self.0
        }
    }

    fn core(outstanding: u32) -> SendCore<Send, u32> {
        let params = ConnParams {
            qps: 4,
            outstanding,
            segment_bytes: 1 << 16,
            max_messages: 8,
            policy: PolicyKind::DqplbLed,
            fabric_id: 0,
        };
        SendCore::new(params, &"peer", "test comm".into()).expect("core")
    }

    const RULE: DepthRule = DepthRule {
        ratio: 1.3,
        raised: 3,
        hold: 4,
    };

    #[test]
    fn the_engine_runs_the_base_depth_under_the_sized_bound() {
        let mut c = core(3);
        assert_eq!(
            state(&c),
            DepthState {
                depth: 3,
                raises: 0,
                rule: None,
                bound: 3,
                repin: None,
                repins: 0
            }
        );
        c.set_depth_rule(2, RULE).expect("rule");
        assert_eq!(
            state(&c),
            DepthState {
                depth: 2,
                raises: 0,
                rule: Some(RULE),
                bound: 3,
                repin: None,
                repins: 0
            }
        );
        // Routes and the re-hash rule still go on after it.
        c.add_route(PolicyKind::StaticSplit, 2).expect("route");
    }

    #[test]
    fn guards_name_what_is_wrong() {
        // Sized for 2 only: a raised depth of 3 would overrun the peer's receive side.
        let e = core(2).set_depth_rule(2, RULE).unwrap_err();
        assert_eq!(
            e.msg,
            "depth rule: raised depth 3 is above the 2 segments per QP the connection was sized for"
        );
        // After a route it is refused (it rebuilds the engine).
        let mut c = core(3);
        c.add_route(PolicyKind::StaticSplit, 2).expect("route");
        let e = c.set_depth_rule(2, RULE).unwrap_err();
        assert_eq!(
            e.msg,
            "depth rule: must be installed before any route, re-hash rule or message"
        );
        // The engine's own check: the raised depth must be above the base.
        let e = core(3).set_depth_rule(3, RULE).unwrap_err();
        assert!(e.msg.starts_with("depth rule: "), "{}", e.msg);
        assert!(e.msg.contains("raised depth"), "{}", e.msg);
    }
}
