//! Path health of a sender's data QPs: the straggler re-hash rule (a QP slow against the
//! connection's median for `window` completions, and by its latency EWMA, is drained, replaced).

use std::collections::VecDeque;

use super::policy::Room;
use super::{EngineError, QpStats};

/// When a slow QP is drained and replaced by a new one (new QPN or stream: a new ECMP hash).
/// Times are in the driver's units (the `now` of `poll_transmit`/`completed`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RehashRule {
    /// k: a completion this many times the connection's median latency counts as slow (> 1).
    pub ratio: f64,
    /// W: consecutive slow completions that make a QP a straggler (>= 1).
    pub window: u32,
    /// No re-hash within this long of the previous one on the connection.
    pub cooldown: u64,
    /// At most this many re-hashes per `budget_period` (>= 1).
    pub budget: u32,
    pub budget_period: u64,
}

impl RehashRule {
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = super::error::bad_param::<()>;
        if !(self.ratio > 1.0 && self.ratio.is_finite()) {
            return bad(
                "rehash ratio",
                self.ratio as u64,
                "must be a finite number above 1",
            );
        }
        if self.window == 0 {
            return bad("rehash window", 0, "must be at least 1 completion");
        }
        if self.budget == 0 || self.budget > MAX_BUDGET {
            return bad(
                "rehash budget",
                u64::from(self.budget),
                "must be 1..=64 per period",
            );
        }
        Ok(())
    }
}

/// Largest re-hash budget per period (the decision times are kept in a fixed ring).
pub const MAX_BUDGET: u32 = 64;

/// Completions between recomputations of the connection's median latency.
const MEDIAN_EVERY: u32 = 16;

/// Something the transport must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathEvent {
    /// QP `qp` was drained as a straggler and has nothing in flight: replace it (new QP / stream)
    /// and call `Sender::path_replaced`.
    Replace { qp: usize },
}

/// The straggler detector: per-QP slow streaks against a cached median of the per-QP latency
/// EWMAs, with the cool-down and per-period budget of the rule. A QP whose streak reaches the
/// window becomes a candidate; it is judged one full median period later, against a fresh
/// median, so that a slowdown of every QP at once (the peer or this host stalled), which shows
/// on the QPs one after the other as their completions are read, is not taken for a straggler.
/// All storage is allocated when the rule is installed.
#[derive(Debug, Clone)]
pub(crate) struct Straggler {
    rule: RehashRule,
    streak: Vec<u32>,
    median: f64,
    since: u32,
    scratch: Vec<f64>,
    recent: VecDeque<u64>,
    last: Option<u64>,
    /// Candidates of the current median period, and of the previous one (judged next).
    fresh: Room,
    ripe: Room,
}

impl Straggler {
    pub(crate) fn new(rule: RehashRule, qps: usize) -> Straggler {
        Straggler {
            rule,
            streak: vec![0; qps],
            median: 0.0,
            since: 0,
            scratch: Vec::with_capacity(qps),
            recent: VecDeque::with_capacity(rule.budget as usize),
            last: None,
            fresh: Room::default(),
            ripe: Room::default(),
        }
    }

    /// The lower median of the latency EWMAs of `eligible` QPs that completed something.
    fn refresh_median(&mut self, stats: &[QpStats], eligible: Room) {
        self.scratch.clear();
        for (q, s) in stats.iter().enumerate() {
            if eligible.has(q) && s.completed > 0 {
                self.scratch.push(s.latency_ewma);
            }
        }
        if self.scratch.len() < 2 {
            self.median = 0.0;
            return;
        }
        let mid = (self.scratch.len() - 1) / 2;
        self.scratch
            .select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
        self.median = self.scratch[mid];
    }

    /// A completion of `latency` on `qp` at `now`; `eligible` = QPs neither draining nor dead.
    /// Some(q): drain QP `q` now.
    pub(crate) fn on_complete(
        &mut self,
        qp: usize,
        latency: u64,
        now: u64,
        stats: &[QpStats],
        eligible: Room,
    ) -> Option<usize> {
        let mut drain = None;
        if self.since == 0 {
            self.refresh_median(stats, eligible);
            drain = self.judge(now, stats, eligible);
        }
        self.since = (self.since + 1) % MEDIAN_EVERY;
        if self.median <= 0.0 || (latency as f64) < self.rule.ratio * self.median {
            self.streak[qp] = 0;
        } else {
            self.streak[qp] = self.streak[qp].saturating_add(1);
            if self.streak[qp] >= self.rule.window {
                self.streak[qp] = 0;
                self.fresh.set(qp);
            }
        }
        drain
    }

    /// At a median refresh: the candidates of the previous period whose EWMA is still `ratio` x
    /// the fresh median are stragglers (the lowest one is drained, within the guards); the
    /// current period's candidates are judged at the next refresh.
    fn judge(&mut self, now: u64, stats: &[QpStats], eligible: Room) -> Option<usize> {
        let ripe = self.ripe.and(eligible);
        self.ripe = self.fresh;
        self.fresh = Room::default();
        let (mut left, mut slow) = (ripe, None);
        while let Some(c) = left.next_from(0) {
            left.clear(c);
            if self.median > 0.0 && stats[c].latency_ewma >= self.rule.ratio * self.median {
                slow = Some(c);
                break;
            }
        }
        let qp = slow?;
        // Never drain the last QP that could carry the connection.
        let mut others = eligible;
        others.clear(qp);
        if others.bits() == 0 {
            return None;
        }
        if let Some(t) = self.last {
            if now.saturating_sub(t) < self.rule.cooldown {
                return None;
            }
        }
        while let Some(&t) = self.recent.front() {
            if now.saturating_sub(t) >= self.rule.budget_period {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() >= self.rule.budget as usize {
            return None;
        }
        self.recent.push_back(now);
        self.last = Some(now);
        Some(qp)
    }

    /// `qp` has a new path: its streak starts over.
    pub(crate) fn reset(&mut self, qp: usize) {
        self.streak[qp] = 0;
        self.fresh.clear(qp);
        self.ripe.clear(qp);
        self.since = 0;
    }

    pub(crate) fn footprint_bytes(&self) -> usize {
        self.streak.capacity() * 4 + self.scratch.capacity() * 8 + self.recent.capacity() * 8
    }
}
