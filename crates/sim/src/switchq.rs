//! P mode's switch egress queues: byte occupancy of each link's FIFO and RED-like ECN marking
//! (nothing below Kmin, rising linearly to Pmax at Kmax, every packet above Kmax).

// A link's FIFO lives in the event core (one queue per link, in arrival order). Every packet
// carries `cum`, the link's running byte count when it was queued, so the backlog at time t is
// `cum(last packet arrived by t) - cum(head) + len(head)`: a binary search, no scan. Marking is
// at dequeue, on the backlog the departing packet leaves behind plus itself (DCTCP's argument:
// marking at dequeue tells the sender about the queue one queueing delay sooner).

use super::error::SimError;
use super::rng::Rng;

/// ECN marking of the switch egress queues.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EcnSpec {
    pub enabled: bool,
    /// Bytes below which no packet is marked.
    pub kmin: u64,
    /// Bytes at which the marking probability reaches `pmax`; above, every packet is marked.
    pub kmax: u64,
    pub pmax: f64,
}

impl EcnSpec {
    /// Defaults for a 400 Gb/s RoCE fabric: see docs/records/simulation.md, "P mode" (the DCQCN paper's
    /// Kmin/Kmax at 40 Gb/s, 5 KB and 200 KB, scaled to the link rate, so the thresholds stand
    /// for the same queueing delay, 1 us and 40 us; Pmax 1% as in the paper).
    pub(crate) fn default_for_gbps(gbps: f64) -> EcnSpec {
        let scale = (gbps / 40.0).max(1e-3);
        EcnSpec {
            enabled: true,
            kmin: (5_000.0 * scale) as u64,
            kmax: (200_000.0 * scale) as u64,
            pmax: 0.01,
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.kmax < self.kmin {
            return Err(SimError::Config(format!(
                "ECN Kmax {} B is below Kmin {} B",
                self.kmax, self.kmin
            )));
        }
        if !(self.pmax.is_finite() && (0.0..=1.0).contains(&self.pmax)) {
            return Err(SimError::Config(format!(
                "ECN Pmax {} must be 0 ..= 1",
                self.pmax
            )));
        }
        Ok(())
    }

    /// Marking probability at a backlog of `bytes`.
    pub fn probability(&self, bytes: u64) -> f64 {
        if !self.enabled || bytes <= self.kmin {
            0.0
        } else if bytes > self.kmax {
            1.0
        } else {
            self.pmax * (bytes - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
        }
    }

    /// Whether a packet leaving a backlog of `bytes` is marked (one draw when 0 < p < 1).
    #[inline]
    pub fn mark(&self, bytes: u64, rng: &mut Rng) -> bool {
        let p = self.probability(bytes);
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
        }
    }
}

/// Per-link counters of the switch queues.
#[derive(Debug, Clone, Default)]
pub(crate) struct SwitchQueues {
    /// Running byte count queued on each link (the `cum` stamp source).
    pub cum: Vec<u64>,
    /// Deepest backlog seen at a dequeue, bytes.
    pub max_bytes: Vec<u64>,
    /// Packets marked CE on each link.
    pub marks: Vec<u64>,
    /// Packets dequeued on each link.
    pub packets: Vec<u64>,
}

impl SwitchQueues {
    pub(crate) fn new(links: usize) -> SwitchQueues {
        SwitchQueues {
            cum: vec![0; links],
            max_bytes: vec![0; links],
            marks: vec![0; links],
            packets: vec![0; links],
        }
    }

    /// Stamps a packet of `len` bytes queued on `link`: its `cum`.
    #[inline]
    pub(crate) fn enqueue(&mut self, link: u32, len: u32) -> u64 {
        let c = &mut self.cum[link as usize];
        *c += u64::from(len);
        *c
    }
}

/// Backlog in bytes of a FIFO whose head has stamp `head_cum` and length `head_len`, and whose
/// latest arrived packet has stamp `last_cum` (`None`: only the head).
#[inline]
pub fn backlog(head_cum: u64, head_len: u32, last_cum: Option<u64>) -> u64 {
    last_cum.map_or(u64::from(head_len), |l| l + u64::from(head_len) - head_cum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_ramp_between_kmin_and_kmax() {
        let e = EcnSpec {
            enabled: true,
            kmin: 100,
            kmax: 300,
            pmax: 0.2,
        };
        assert_eq!(e.probability(100), 0.0);
        assert!((e.probability(200) - 0.1).abs() < 1e-12);
        assert!((e.probability(300) - 0.2).abs() < 1e-12);
        assert_eq!(e.probability(301), 1.0);
        let off = EcnSpec {
            enabled: false,
            ..e
        };
        assert_eq!(off.probability(10_000), 0.0);
        // The draw follows p: 10% of 20000 draws at the ramp's middle, within 4 sigma (42 each).
        let mut rng = Rng::new(5);
        let n = (0..20_000).filter(|_| e.mark(200, &mut rng)).count();
        assert!((1_830..=2_170).contains(&n), "{n}");
        assert!(e.mark(301, &mut rng) && !e.mark(50, &mut rng));
    }

    #[test]
    fn defaults_scale_with_the_rate_and_validate() {
        let e = EcnSpec::default_for_gbps(400.0);
        assert_eq!((e.kmin, e.kmax), (50_000, 2_000_000));
        assert!(e.validate().is_ok());
        let bad = EcnSpec { kmax: 1, ..e };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn backlog_from_stamps() {
        // Packets of 10, 20, 30 bytes queued: stamps 10, 30, 60.
        assert_eq!(backlog(10, 10, Some(60)), 60);
        assert_eq!(backlog(30, 20, Some(60)), 50);
        assert_eq!(backlog(60, 30, None), 30);
    }
}
