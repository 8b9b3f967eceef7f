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

/// Trial re-pins on top of the depth rule, for pinned source ports whose pins broke (a group
/// that is not the size the pins assume, e.g. 31 members after a failed uplink). When the same
/// QP was the connection's slowest, at `ratio` x the median or more, for `persist` consecutive
/// checks, it is drained and moved onto the path of the fastest QP (the transport gives it the
/// fastest QP's source port: the same path whatever the group). Once it completed `settle`
/// segments there it is judged: below `ratio` x the median and faster than before, it keeps the
/// path, else it goes back to the path it had. At most `budget` moves per connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepinRule {
    /// Slowness that counts: the slowest QP's latency EWMA this many times the median (> 1).
    pub ratio: f64,
    /// Consecutive checks the same QP must be that slow (>= 1).
    pub persist: u32,
    /// Completions on the new path before the move is judged (>= 1).
    pub settle: u32,
    /// Moves per connection, in all (>= 1; the moves back are not counted).
    pub budget: u32,
}

impl RepinRule {
    /// Checks the rule's values.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = super::error::bad_param::<()>;
        if !(self.ratio > 1.0 && self.ratio.is_finite()) {
            return bad(
                "repin ratio",
                self.ratio as u64,
                "must be a finite number above 1",
            );
        }
        if self.persist == 0 {
            return bad("repin persist", 0, "must be at least 1 check");
        }
        if self.settle == 0 {
            return bad("repin settle", 0, "must be at least 1 completion");
        }
        if self.budget == 0 {
            return bad("repin budget", 0, "must be at least 1 move");
        }
        Ok(())
    }
}

/// Where a QP drained by the re-pin rule goes when the transport replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepinPath {
    /// Onto the path of QP `qp` (its source port).
    Onto { qp: usize },
    /// Back onto the path it had before its last move.
    Back,
}

/// What a divergence check asks of the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DepthStep {
    /// Some(true): raise the depth; Some(false): lower it back.
    pub(crate) raise: Option<bool>,
    /// Drain this QP and replace it on the given path.
    pub(crate) repin: Option<(usize, RepinPath)>,
}

/// A move on trial: the QP, the completion count at which it is judged, its latency before.
#[derive(Debug, Clone, Copy)]
struct Trial {
    qp: usize,
    judge_at: u64,
    before: f64,
}

/// The re-pin rule's state (boxed: a sender without it carries one pointer).
#[derive(Debug, Clone)]
struct Repin {
    rule: RepinRule,
    /// Consecutive checks with `slowest` that slow.
    streak: u32,
    slowest: Option<usize>,
    used: u32,
    trial: Option<Trial>,
    /// The QP moved last (its latency starts from `median` on its new path).
    last: Option<usize>,
    /// The median of the latest check.
    median: f64,
    /// Per QP: where a drained QP goes (set when drained, cleared when replaced).
    to: Vec<Option<RepinPath>>,
}

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
    /// One latency per QP (a boxed slice: the rule's state stays within one cache line).
    scratch: Box<[f64]>,
    repin: Option<Box<Repin>>,
}

impl DepthAdapt {
    pub(crate) fn new(rule: DepthRule, qps: usize) -> DepthAdapt {
        DepthAdapt {
            rule,
            since: 0,
            calm: 0,
            raised: false,
            raises: 0,
            scratch: vec![0.0; qps].into_boxed_slice(),
            repin: None,
        }
    }

    pub(crate) fn set_repin(&mut self, rule: RepinRule, qps: usize) {
        self.repin = Some(Box::new(Repin {
            rule,
            streak: 0,
            slowest: None,
            used: 0,
            trial: None,
            last: None,
            median: 0.0,
            to: vec![None; qps],
        }));
    }

    pub(crate) fn repin_rule(&self) -> Option<RepinRule> {
        self.repin.as_ref().map(|r| r.rule)
    }

    /// Moves made so far (not counting the moves back).
    pub(crate) fn repins(&self) -> u32 {
        self.repin.as_ref().map_or(0, |r| r.used)
    }

    /// Where drained QP `qp` goes, if the re-pin rule drained it.
    pub(crate) fn repin_path(&self, qp: usize) -> Option<RepinPath> {
        self.repin.as_ref()?.to.get(qp).copied().flatten()
    }

    /// `qp` has its new path: the latency EWMA it starts from (the latest median for the QP
    /// the re-pin rule moved last, None for any other).
    pub(crate) fn replaced(&mut self, qp: usize) -> Option<f64> {
        let r = self.repin.as_mut()?;
        if let Some(slot) = r.to.get_mut(qp) {
            *slot = None;
        }
        (r.last == Some(qp) && r.median > 0.0).then_some(r.median)
    }

    pub(crate) fn rule(&self) -> DepthRule {
        self.rule
    }

    pub(crate) fn raised_depth(&self) -> u32 {
        self.rule.raised
    }

    /// One completion; at a check, what the sender must do (None: nothing).
    #[inline]
    pub(crate) fn on_complete(&mut self, stats: &[QpStats], eligible: Room) -> Option<DepthStep> {
        self.since += 1;
        if self.since < DEPTH_EVERY {
            return None;
        }
        self.since = 0;
        self.check(stats, eligible)
    }

    #[cold]
    fn check(&mut self, stats: &[QpStats], eligible: Room) -> Option<DepthStep> {
        let mut n = 0;
        let (mut max, mut slowest) = (0.0f64, 0);
        let (mut min, mut fastest) = (f64::INFINITY, 0);
        for (q, s) in stats.iter().enumerate() {
            if eligible.has(q) && s.completed > 0 {
                if let Some(x) = self.scratch.get_mut(n) {
                    *x = s.latency_ewma;
                    n += 1;
                }
                if s.latency_ewma > max {
                    (max, slowest) = (s.latency_ewma, q);
                }
                if s.latency_ewma < min {
                    (min, fastest) = (s.latency_ewma, q);
                }
            }
        }
        if n < 2 {
            return None;
        }
        let mid = (n - 1) / 2;
        self.scratch[..n].select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
        let median = self.scratch[mid];
        let diverged = median > 0.0 && max >= self.rule.ratio * median;
        let mut step = DepthStep::default();
        if diverged {
            self.calm = 0;
            if !self.raised {
                self.raised = true;
                self.raises += 1;
                step.raise = Some(true);
            }
        } else if self.raised {
            self.calm += 1;
            if self.calm >= self.rule.hold {
                self.calm = 0;
                self.raised = false;
                step.raise = Some(false);
            }
        }
        if let Some(r) = &mut self.repin {
            r.median = median;
            step.repin = r.check(median, (max, slowest), fastest, stats, eligible);
            if let Some((q, path)) = step.repin {
                r.to[q] = Some(path);
            }
        }
        (step != DepthStep::default()).then_some(step)
    }

    pub(crate) fn raises(&self) -> u64 {
        self.raises
    }

    pub(crate) fn footprint_bytes(&self) -> usize {
        self.scratch.len() * 8
            + self.repin.as_ref().map_or(0, |r| {
                std::mem::size_of::<Repin>()
                    + r.to.capacity() * std::mem::size_of::<Option<RepinPath>>()
            })
    }
}

impl Repin {
    /// One divergence check: the QP to drain and where it goes, if any. `max` is the latency of
    /// the eligible QP `slowest`; `fastest` the eligible QP with the lowest latency.
    fn check(
        &mut self,
        median: f64,
        (max, slowest): (f64, usize),
        fastest: usize,
        stats: &[QpStats],
        eligible: Room,
    ) -> Option<(usize, RepinPath)> {
        let slow = self.rule.ratio * median;
        if median > 0.0 && max >= slow {
            self.streak = if self.slowest == Some(slowest) {
                self.streak + 1
            } else {
                1
            };
            self.slowest = Some(slowest);
        } else {
            self.streak = 0;
            self.slowest = None;
        }
        if let Some(t) = self.trial {
            // Still draining, or too few completions on its new path yet.
            if !eligible.has(t.qp) || stats[t.qp].completed < t.judge_at {
                return None;
            }
            self.trial = None;
            self.streak = 0;
            let now = stats[t.qp].latency_ewma;
            if now < slow && now < t.before {
                return None;
            }
            self.last = Some(t.qp);
            return Some((t.qp, RepinPath::Back));
        }
        if self.streak < self.rule.persist || self.used >= self.rule.budget || slowest == fastest {
            return None;
        }
        self.used += 1;
        self.streak = 0;
        let st = &stats[slowest];
        self.trial = Some(Trial {
            qp: slowest,
            // Its segments in flight complete on the old path first.
            judge_at: st.completed + u64::from(st.outstanding) + u64::from(self.rule.settle),
            before: st.latency_ewma,
        });
        self.last = Some(slowest);
        Some((slowest, RepinPath::Onto { qp: fastest }))
    }
}
