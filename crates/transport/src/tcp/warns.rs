//! Aggregated WARNs for sockets anyone can reach (listeners): the first few drops of each interval
//! are logged one by one, the rest are counted and summed up in one line when the interval ends.

use std::time::{Duration, Instant};

/// Drops logged one by one per interval.
pub(crate) const SHOWN_PER_INTERVAL: u32 = 5;
/// Length of an interval; the count of what it held back is logged when it ends.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

pub(crate) struct WarnBudget {
    start: Instant,
    shown: u32,
    held: u64,
}

impl WarnBudget {
    pub(crate) fn new() -> WarnBudget {
        WarnBudget {
            start: Instant::now(),
            shown: 0,
            held: 0,
        }
    }

    /// Logs `line()` while this interval's budget lasts; counts it otherwise.
    pub(crate) fn warn(&mut self, who: &dyn std::fmt::Display, line: impl FnOnce() -> String) {
        self.roll(who);
        if self.shown < SHOWN_PER_INTERVAL {
            self.shown += 1;
            tracing::warn!(target: "dqplb::net", "{who}: {}", line());
        } else {
            self.held += 1;
        }
    }

    /// Ends an interval that is over: one line with the number of drops it did not log.
    pub(crate) fn roll(&mut self, who: &dyn std::fmt::Display) {
        if self.start.elapsed() < INTERVAL {
            return;
        }
        if self.held > 0 {
            tracing::warn!(target: "dqplb::net", "{who}: {} more connection(s) dropped in the last {} s (not logged one by one: at most {SHOWN_PER_INTERVAL} per {} s are)", self.held, INTERVAL.as_secs(), INTERVAL.as_secs());
        }
        *self = WarnBudget::new();
    }
}
