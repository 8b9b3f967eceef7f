//! The DC interconnect on the third tier: each pod a data centre, its aggregation -> core hop the
//! long-haul span (`--dci-latency-us`, optionally `--dci-oversub`); per-link hop latencies.

// Why the span sits on the aggregation -> core hop only: the event core needs every producer of
// a queue to push at `now + a constant`. A core -> aggregation link is fed only by aggregation ->
// core links, so their latency may differ from the rest; a spine -> leaf link is fed by leaf ->
// spine links (inside a pod) and by core -> aggregation links (between pods), so those two must
// keep the same hop latency. A path between DCs crosses exactly one aggregation -> core hop, so
// its one-way latency is 5 hops + the span, and every 6-hop path has the same latency (the
// acknowledgement queue per path length stays a FIFO).

use super::error::SimError;
use super::topology::{FabricSpec, Path, Ps, Rail};

/// The longest span accepted: 100 ms (a round trip stays within the site config's `rtt-us`).
pub(crate) const MAX_DCI_LATENCY_PS: Ps = 100_000 * 1_000_000;

impl FabricSpec {
    /// Latency of an aggregation -> core hop: the span, or the hop latency when it is not set.
    pub fn dci_latency(&self) -> Ps {
        if self.dci_latency_ps == 0 {
            self.hop_latency_ps
        } else {
            self.dci_latency_ps
        }
    }

    /// One way between hosts in different pods (DCs): 5 hop latencies and the span.
    pub fn cross_dc_one_way_ps(&self) -> Ps {
        5 * self.hop_latency_ps + self.dci_latency()
    }

    /// The propagation round trip between DCs (data one way, the acknowledgement back).
    pub fn cross_dc_rtt_ps(&self) -> Ps {
        2 * self.cross_dc_one_way_ps()
    }

    /// Serialization of `bytes` on the slowest link of a path between DCs (ps, rounded up as
    /// the simulator rounds it per link).
    pub fn cross_dc_serialization_ps(&self, bytes: u64) -> Ps {
        let slowest = self.host_gbps.min(self.uplink_gbps()).min(self.core_gbps());
        (bytes as f64 * (8000.0 / slowest)).ceil() as Ps
    }

    pub(crate) fn validate_dci(&self) -> Result<(), SimError> {
        let set = self.dci_latency_ps != 0 || self.dci_oversub != 1.0;
        if set && self.pods < 2 {
            return Err(SimError::Config(
                "--dci-latency-us and --dci-oversub need two or more data centres (--pods >= 2 \
                 or a fat-tree preset)"
                    .into(),
            ));
        }
        if self.dci_latency_ps > MAX_DCI_LATENCY_PS {
            return Err(SimError::Config(format!(
                "--dci-latency-us {} exceeds 100000 (100 ms)",
                self.dci_latency_ps as f64 / 1e6
            )));
        }
        if !(self.dci_oversub.is_finite() && self.dci_oversub > 0.0) {
            return Err(SimError::Config(format!(
                "--dci-oversub {} must be a positive number",
                self.dci_oversub
            )));
        }
        Ok(())
    }
}

impl Rail {
    /// Latency from serving `link` to the next queue (or the receiver): the span after an
    /// aggregation -> core link, one hop after any other.
    #[inline]
    pub(crate) fn lat_out(&self, link: u32) -> Ps {
        let l = link as usize;
        if l >= self.agg_up_base() && l < self.core_down_base() {
            self.dci_latency_ps
        } else {
            self.hop_latency_ps
        }
    }

    /// Latency of the wire into hop `hop` of `path` (the NIC's own hop for the first link).
    #[inline]
    pub(crate) fn lat_in(&self, path: &Path, hop: u8) -> Ps {
        if hop == 0 {
            self.hop_latency_ps
        } else {
            self.lat_out(path.links[hop as usize - 1])
        }
    }

    /// One-way latency of a path of `hops` links: 6 hops (between pods) cross one span.
    #[inline]
    pub(crate) fn one_way_ps(&self, hops: u8) -> Ps {
        if hops == 6 {
            5 * self.hop_latency_ps + self.dci_latency_ps
        } else {
            self.hop_latency_ps * Ps::from(hops)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rng::Rng;
    use super::*;

    #[test]
    fn the_span_is_on_the_aggregation_up_hop_only() {
        let base = FabricSpec {
            dci_latency_ps: 100_000_000,
            ..FabricSpec::default()
        };
        let spec = FabricSpec::fattree(4, &base).unwrap();
        spec.validate().unwrap();
        let r = Rail::new(&spec, 0, &mut Rng::new(1));
        let p = r.ecmp_path(0, 15, 100, 200).unwrap();
        let lat: Vec<Ps> = p.links().iter().map(|&l| r.lat_out(l)).collect();
        let h = spec.hop_latency_ps;
        assert_eq!(lat, [h, h, 100_000_000, h, h, h]);
        assert_eq!(lat.iter().sum::<Ps>(), r.one_way_ps(6));
        assert_eq!(r.one_way_ps(6), spec.cross_dc_one_way_ps());
        assert_eq!(r.lat_in(&p, 3), 100_000_000);
        assert_eq!(r.lat_in(&p, 0), h);
        // Unset: every hop the same, the old 6 x hop.
        let plain = FabricSpec::fattree(4, &FabricSpec::default()).unwrap();
        let r = Rail::new(&plain, 0, &mut Rng::new(1));
        assert_eq!(r.one_way_ps(6), 6 * h);
        assert_eq!(plain.cross_dc_rtt_ps(), 12 * h);
        // Two tiers refuse it.
        let two = FabricSpec {
            dci_latency_ps: 1,
            ..FabricSpec::default()
        };
        assert!(two
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--dci-latency-us"));
    }
}
