//! B and F mode's time series in P mode's rows (timeseries.rs): per data QP bytes delivered, rate
//! and segments outstanding, per link (B mode) bytes carried and bytes waiting in its FIFO.

// Samples fall at k x period of the phase's clock, each taken before the events at or after its
// time are handled; one last sample at the first multiple after the phase ended holds its final
// counts. Off (period 0) the drivers run a copy of their loop without any of it (`drive::<false>`).

use super::conn::PhaseRun;
use super::timeseries::TsRow;
use super::topology::{Ps, Rail};

/// The sampling state of one phase on one rail.
#[derive(Debug)]
pub(crate) struct Sampler {
    pub on: bool,
    period: Ps,
    /// Time of the next sample (`Ps::MAX` when off).
    pub next: Ps,
    phase: u32,
    /// Payload bytes delivered to the receiver per data QP (conn * qps + qp).
    delivered: Vec<u64>,
    /// `delivered` at the previous sample.
    last: Vec<u64>,
    pub rows: Vec<TsRow>,
}

impl Sampler {
    /// `period` 0: off. `flows`: connections x data QPs.
    pub(crate) fn new(period: Ps, phase: usize, flows: usize) -> Sampler {
        let on = period > 0;
        let n = if on { flows } else { 0 };
        Sampler {
            on,
            period,
            next: if on { 0 } else { Ps::MAX },
            phase: phase as u32,
            delivered: vec![0; n],
            last: vec![0; n],
            rows: Vec::new(),
        }
    }

    /// A segment of `len` bytes of QP `g` landed at its receiver (call only when `on`).
    #[inline]
    pub(crate) fn delivered(&mut self, g: usize, len: u32) {
        self.delivered[g] += u64::from(len);
    }

    /// A row of this phase at the next sample time, zero counters.
    pub(crate) fn base(&self, rail: &Rail) -> TsRow {
        TsRow::blank(self.next, rail.index as u32, self.phase)
    }

    /// Every data QP's row at the next sample time: bytes delivered so far, segments the engine
    /// has in flight, and the rate: `rate(g)` in bytes per picosecond (F mode's fluid rate) or,
    /// with None, the bytes delivered since the previous sample over the period (B mode).
    pub(crate) fn qp_rows(
        &mut self,
        rail: &Rail,
        run: &PhaseRun,
        qps: usize,
        rate: Option<&[f64]>,
    ) {
        let base = self.base(rail);
        let first = self.next == 0;
        for (c, conn) in run.conns.iter().enumerate() {
            for (k, st) in conn.sender.qp_stats().iter().enumerate().take(qps) {
                let g = c * qps + k;
                let gbps = match rate {
                    Some(r) => r[g] * 8e3,
                    None if first => 0.0,
                    None => (self.delivered[g] - self.last[g]) as f64 * 8e3 / self.period as f64,
                };
                self.last[g] = self.delivered[g];
                self.rows.push(TsRow {
                    id: c as u32,
                    qp: k as u32,
                    rate_gbps: gbps,
                    outstanding: st.outstanding,
                    bytes: self.delivered[g],
                    ..base
                });
            }
        }
    }

    /// Moves the next sample one period on.
    #[inline]
    pub(crate) fn advance(&mut self) {
        self.next += self.period;
    }
}
