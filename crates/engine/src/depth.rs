//! Depth adapting: a connection's per-QP window is raised while its QPs' completion latencies
//! diverge (some of its paths shared, e.g. pins broken by a failed uplink) and falls back after.

use super::policy::Room;
use super::{EngineError, QpStats, MAX_OUTSTANDING};

/// When a connection runs deeper than its configured `max_outstanding`. Checked every
/// [`DEPTH_EVERY`] completions, from the per-QP latency EWMAs only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthRule {
    /// Divergence: the slowest QP's latency EWMA at least this many times the connection's
    /// median EWMA (> 1).
    pub ratio: f64,
    /// Segments in flight per QP while the latencies diverge (above the base depth, at most
    /// [`MAX_OUTSTANDING`]).
    pub raised: u32,
    /// Consecutive checks without divergence before the depth falls back (>= 1).
    pub hold: u32,
}

/// Completions between two divergence checks.
pub const DEPTH_EVERY: u32 = 16;

impl DepthRule {
    /// Checks the rule against the sender's base depth.
    pub fn validate(&self, base: u32) -> Result<(), EngineError> {
        let bad = super::error::bad_param::<()>;
        if !(self.ratio > 1.0 && self.ratio.is_finite()) {
            return bad(
                "depth ratio",
                self.ratio as u64,
                "must be a finite number above 1",
            );
        }
        if self.raised <= base || self.raised > MAX_OUTSTANDING {
            return bad(
                "raised depth",
                u64::from(self.raised),
                "must be above max_outstanding and at most MAX_OUTSTANDING",
            );
        }
        if self.hold == 0 {
            return bad("depth hold", 0, "must be at least 1 check");
        }
        Ok(())
    }
}

/// The divergence detector (all storage allocated when the rule is installed).
#[derive(Debug, Clone)]
pub(crate) struct DepthAdapt {
    rule: DepthRule,
    since: u32,
    calm: u32,
    raised: bool,
    /// Times the depth rose.
    raises: u64,
    scratch: Vec<f64>,
}

impl DepthAdapt {
    pub(crate) fn new(rule: DepthRule, qps: usize) -> DepthAdapt {
        DepthAdapt {
            rule,
            since: 0,
            calm: 0,
            raised: false,
            raises: 0,
            scratch: Vec::with_capacity(qps),
        }
    }

    pub(crate) fn rule(&self) -> DepthRule {
        self.rule
    }

    pub(crate) fn raised_depth(&self) -> u32 {
        self.rule.raised
    }

    /// One completion; at a check, Some(true) to raise the depth, Some(false) to lower it back.
    #[inline]
    pub(crate) fn on_complete(&mut self, stats: &[QpStats], eligible: Room) -> Option<bool> {
        self.since += 1;
        if self.since < DEPTH_EVERY {
            return None;
        }
        self.since = 0;
        self.check(stats, eligible)
    }

    #[cold]
    fn check(&mut self, stats: &[QpStats], eligible: Room) -> Option<bool> {
        self.scratch.clear();
        let mut max = 0.0f64;
        for (q, s) in stats.iter().enumerate() {
            if eligible.has(q) && s.completed > 0 {
                self.scratch.push(s.latency_ewma);
                max = max.max(s.latency_ewma);
            }
        }
        if self.scratch.len() < 2 {
            return None;
        }
        let mid = (self.scratch.len() - 1) / 2;
        self.scratch
            .select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
        let median = self.scratch[mid];
        let diverged = median > 0.0 && max >= self.rule.ratio * median;
        if diverged {
            self.calm = 0;
            if !self.raised {
                self.raised = true;
                self.raises += 1;
                return Some(true);
            }
        } else if self.raised {
            self.calm += 1;
            if self.calm >= self.rule.hold {
                self.calm = 0;
                self.raised = false;
                return Some(false);
            }
        }
        None
    }

    pub(crate) fn raises(&self) -> u64 {
        self.raises
    }

    pub(crate) fn footprint_bytes(&self) -> usize {
        self.scratch.capacity() * 8
    }
}
