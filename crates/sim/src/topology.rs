//! A rail-optimized leaf-spine fabric: hosts x rails, each rail its own leafs and spines (and, with
//! pods, a third tier of cores), an oversubscription ratio, and seeded failed or slow links.

use super::error::SimError;
use super::hashing::{ecmp_hash, udp_sport, HashFields};
use super::rng::Rng;

/// Picoseconds: the simulator's time unit (400 Gb/s moves one byte in 20 ps).
pub type Ps = u64;

/// The fabric as configured (identical for every rail except its failed and slow links).
#[derive(Debug, Clone, PartialEq)]
pub struct FabricSpec {
    pub hosts: usize,
    /// NICs per host, one rail each; traffic stays on its rail (rail-optimized).
    pub rails: usize,
    pub hosts_per_leaf: usize,
    /// Spines per rail; every leaf has one uplink to each.
    pub spines: usize,
    /// NIC (and leaf downlink) rate.
    pub host_gbps: f64,
    /// Leaf downlink capacity over uplink capacity (1 = non-blocking).
    pub oversub: f64,
    /// Per hop: propagation plus switch latency.
    pub hop_latency_ps: Ps,
    /// Leaf-spine links that are down (per rail, both directions; routing avoids them).
    pub failed_links: usize,
    /// Leaf-spine links running at `slow_factor` of their rate (per rail).
    pub slow_links: usize,
    pub slow_factor: f64,
    pub hash: HashFields,
    /// Third tier: leafs grouped into this many pods, each pod its own `spines` (aggregation
    /// switches) wired to core switches (tier3.rs); 0 = two tiers.
    pub pods: usize,
    /// Core switches per rail (a multiple of `spines`; 0 = spines x leafs per pod: non-blocking).
    pub cores: usize,
    /// DC interconnect (dci.rs): latency of every aggregation -> core hop, each pod a data
    /// centre (0 = `hop_latency_ps`, as any hop).
    pub dci_latency_ps: Ps,
    /// Aggregation-core capacity divided by this (1 = the tier's non-blocking rate).
    pub dci_oversub: f64,
    /// Spraying NICs spray each QP over this many paths of its ECMP group, drawn once (spray.rs;
    /// 0 = the whole group).
    pub spray_paths: usize,
}

impl Default for FabricSpec {
    fn default() -> Self {
        FabricSpec {
            hosts: 64,
            rails: 8,
            hosts_per_leaf: 32,
            spines: 32,
            host_gbps: 400.0,
            oversub: 1.0,
            hop_latency_ps: 1_000_000,
            failed_links: 0,
            slow_links: 0,
            slow_factor: 0.5,
            hash: HashFields::default(),
            pods: 0,
            cores: 0,
            dci_latency_ps: 0,
            dci_oversub: 1.0,
            spray_paths: 0,
        }
    }
}

impl FabricSpec {
    pub fn leaves(&self) -> usize {
        self.hosts.div_ceil(self.hosts_per_leaf)
    }

    /// Uplink rate: the leaf's downlink capacity / oversubscription, split over the spines.
    pub(crate) fn uplink_gbps(&self) -> f64 {
        self.host_gbps * self.hosts_per_leaf as f64 / (self.spines as f64 * self.oversub)
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.hosts < 2 || self.hosts > 1 << 20 {
            return Err(SimError::Config(format!(
                "hosts {} must be 2 ..= 1048576",
                self.hosts
            )));
        }
        if self.rails == 0 || self.rails > 64 {
            return Err(SimError::Config(format!(
                "rails {} must be 1 ..= 64",
                self.rails
            )));
        }
        if self.hosts_per_leaf == 0 || self.spines == 0 || self.spines > 4096 {
            return Err(SimError::Config(
                "hosts-per-leaf must be >= 1 and spines 1 ..= 4096".into(),
            ));
        }
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if !ok(self.host_gbps) || !ok(self.oversub) || !ok(self.slow_factor) {
            return Err(SimError::Config(
                "host rate, oversubscription and slow factor must be positive".into(),
            ));
        }
        self.validate_tier3()?;
        self.validate_dci()?;
        let uplinks = self.leaves() * self.spines + self.core_links();
        if self.failed_links + self.slow_links > uplinks {
            return Err(SimError::Config(format!(
                "{} failed + {} slow links exceed the {uplinks} switch-switch links of a rail",
                self.failed_links, self.slow_links
            )));
        }
        Ok(())
    }
}

/// What a link connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    HostUp,
    HostDown,
    LeafUp,
    SpineDown,
    /// Aggregation (a pod's spine) to core (third tier only).
    AggUp,
    /// Core to a pod's aggregation switch (third tier only).
    CoreDown,
}

/// One rail's links: ids `[host up | host down | leaf->spine | spine->leaf]`.
#[derive(Debug, Clone)]
pub struct Rail {
    pub index: usize,
    pub hosts: usize,
    pub leaves: usize,
    pub spines: usize,
    pub hosts_per_leaf: usize,
    /// Picoseconds per byte of each link (f64: 400G = 20.0).
    pub ps_per_byte: Vec<f64>,
    pub alive: Vec<bool>,
    pub hash: HashFields,
    pub hop_latency_ps: Ps,
    /// Latency of an aggregation -> core hop (dci.rs; `hop_latency_ps` unless set).
    pub dci_latency_ps: Ps,
    /// Pods (0: two tiers), leafs per pod and core uplinks per aggregation switch.
    pub pods: usize,
    pub leaves_per_pod: usize,
    pub cores_per_agg: usize,
    /// `FabricSpec::spray_paths`.
    pub spray_paths: usize,
}

/// A path: up to 6 link ids (host up, leaf up, [agg up, core down,] spine down, host down).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path {
    pub links: [u32; 6],
    pub hops: u8,
}

impl Path {
    pub fn links(&self) -> &[u32] {
        &self.links[..self.hops as usize]
    }
}

/// IPv4 address of a host's NIC on a rail: 10.x.y.z with the rail in bits 20..24.
pub(crate) fn nic_ip(rail: usize, host: usize) -> u32 {
    (10 << 24) | ((rail as u32 & 0xF) << 20) | (host as u32 & 0xF_FFFF)
}

impl Rail {
    /// Rail `index` of `spec`; its failed and slow switch-switch links drawn from `rng`.
    pub fn new(spec: &FabricSpec, index: usize, rng: &mut Rng) -> Rail {
        let (h, l, s) = (spec.hosts, spec.leaves(), spec.spines);
        let n = 2 * h + 2 * l * s + 2 * spec.core_links();
        let host = 8000.0 / spec.host_gbps;
        let up = 8000.0 / spec.uplink_gbps();
        let mut ps_per_byte = vec![host; n];
        for v in &mut ps_per_byte[2 * h..2 * h + 2 * l * s] {
            *v = up;
        }
        for v in &mut ps_per_byte[2 * h + 2 * l * s..] {
            *v = 8000.0 / spec.core_gbps();
        }
        let mut rail = Rail {
            index,
            hosts: h,
            leaves: l,
            spines: s,
            hosts_per_leaf: spec.hosts_per_leaf,
            ps_per_byte,
            alive: vec![true; n],
            hash: spec.hash,
            hop_latency_ps: spec.hop_latency_ps,
            dci_latency_ps: spec.dci_latency(),
            pods: spec.pods,
            leaves_per_pod: spec.leaves_per_pod(),
            cores_per_agg: spec.cores_per_agg(),
            spray_paths: spec.spray_paths,
        };
        // Draw distinct switch pairs (leaf-spine, then agg-core): the first `failed` fail, the
        // next `slow` are slow. Two tiers: the same draws as before the third tier existed.
        let mut pairs: Vec<u32> = (0..(l * s + spec.core_links()) as u32).collect();
        let pick = spec.failed_links + spec.slow_links;
        for i in 0..pick {
            let j = i + rng.below((pairs.len() - i) as u64) as usize;
            pairs.swap(i, j);
        }
        for (i, &p) in pairs[..pick].iter().enumerate() {
            let ids = if (p as usize) < l * s {
                let (leaf, spine) = (p as usize / s, p as usize % s);
                [rail.leaf_up(leaf, spine), rail.spine_down(spine, leaf)]
            } else {
                rail.core_pair(p as usize - l * s)
            };
            for id in ids {
                if i < spec.failed_links {
                    rail.alive[id as usize] = false;
                } else {
                    rail.ps_per_byte[id as usize] /= spec.slow_factor;
                }
            }
        }
        rail
    }

    pub fn links(&self) -> usize {
        self.alive.len()
    }

    pub fn host_up(&self, host: usize) -> u32 {
        host as u32
    }

    pub fn host_down(&self, host: usize) -> u32 {
        (self.hosts + host) as u32
    }

    pub(crate) fn leaf_up(&self, leaf: usize, spine: usize) -> u32 {
        (2 * self.hosts + leaf * self.spines + spine) as u32
    }

    pub(crate) fn spine_down(&self, spine: usize, leaf: usize) -> u32 {
        (2 * self.hosts + self.leaves * self.spines + spine * self.leaves + leaf) as u32
    }

    pub(crate) fn leaf_of(&self, host: usize) -> usize {
        host / self.hosts_per_leaf
    }

    pub fn kind(&self, link: u32) -> LinkKind {
        let l = link as usize;
        if l < self.hosts {
            LinkKind::HostUp
        } else if l < 2 * self.hosts {
            LinkKind::HostDown
        } else if l < 2 * self.hosts + self.leaves * self.spines {
            LinkKind::LeafUp
        } else if l < 2 * self.hosts + 2 * self.leaves * self.spines {
            LinkKind::SpineDown
        } else if l < self.core_down_base() {
            LinkKind::AggUp
        } else {
            LinkKind::CoreDown
        }
    }

    /// Capacity of a link in bytes per picosecond (0 when it is down).
    pub(crate) fn bytes_per_ps(&self, link: u32) -> f64 {
        if self.alive[link as usize] {
            1.0 / self.ps_per_byte[link as usize]
        } else {
            0.0
        }
    }

    /// Spines through which leaf `a` reaches leaf `b` (both links alive): the ECMP group.
    pub(crate) fn group_len(&self, a: usize, b: usize) -> usize {
        (0..self.spines).filter(|&s| self.via(a, b, s)).count()
    }

    pub(crate) fn via(&self, a: usize, b: usize, s: usize) -> bool {
        self.alive[self.leaf_up(a, s) as usize] && self.alive[self.spine_down(s, b) as usize]
    }

    /// The `k`-th member (`k < group_len`) of the ECMP group from leaf `a` to leaf `b`.
    fn group_member(&self, a: usize, b: usize, mut k: usize) -> usize {
        for s in 0..self.spines {
            if self.via(a, b, s) {
                if k == 0 {
                    return s;
                }
                k -= 1;
            }
        }
        unreachable!("group member beyond the group")
    }

    /// Spines usable from `src`'s leaf to `dst`'s leaf (0: none, or the same leaf).
    pub fn spines_between(&self, src: usize, dst: usize) -> usize {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        if a == b {
            0
        } else if !self.same_pod(a, b) {
            self.core_paths(a, b)
        } else {
            self.group_len(a, b)
        }
    }

    /// The path through spine choice `k` (an index into the ECMP group).
    pub fn path_via(&self, src: usize, dst: usize, k: usize) -> Path {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        if a == b {
            return Path {
                links: [self.host_up(src), self.host_down(dst), 0, 0, 0, 0],
                hops: 2,
            };
        }
        if !self.same_pod(a, b) {
            return self.core_path_via(src, dst, k);
        }
        let s = self.group_member(a, b, k);
        Path {
            links: [
                self.host_up(src),
                self.leaf_up(a, s),
                self.spine_down(s, b),
                self.host_down(dst),
                0,
                0,
            ],
            hops: 4,
        }
    }

    /// The path the switches give QP `lqpn` (on `src`) -> `rqpn` (on `dst`), its source port
    /// derived from the QPNs (or fixed): [`Rail::ecmp_path_port`].
    pub fn ecmp_path(&self, src: usize, dst: usize, lqpn: u32, rqpn: u32) -> Option<Path> {
        let sport = udp_sport(self.hash.source_port, lqpn, rqpn);
        self.ecmp_path_port(src, dst, sport, rqpn)
    }

    /// Hash seed of leaf `a`'s ECMP (per rail).
    pub(crate) fn leaf_seed(&self, a: usize) -> u32 {
        0x5eed_0000 ^ ((self.index as u32) << 16) ^ a as u32
    }

    /// The path the switches give a QP sending from UDP port `sport` (on `src`) to QP `rqpn` (on
    /// `dst`): the source leaf hashes the 5-tuple over its live group (`hash mod` the members);
    /// None if no spine reaches the destination leaf.
    pub fn ecmp_path_port(&self, src: usize, dst: usize, sport: u16, rqpn: u32) -> Option<Path> {
        let (a, b) = (self.leaf_of(src), self.leaf_of(dst));
        if a == b {
            return Some(self.path_via(src, dst, 0));
        }
        if !self.same_pod(a, b) {
            return self.core_ecmp_path(src, dst, sport, rqpn);
        }
        let n = self.group_len(a, b);
        if n == 0 {
            return None;
        }
        let h = ecmp_hash(
            self.leaf_seed(a),
            self.hash,
            nic_ip(self.index, src),
            nic_ip(self.index, dst),
            sport,
            rqpn,
        );
        Some(self.path_via(src, dst, h as usize % n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_kinds_and_paths() {
        let spec = FabricSpec {
            hosts: 8,
            hosts_per_leaf: 4,
            spines: 2,
            failed_links: 1,
            ..FabricSpec::default()
        };
        let r = Rail::new(&spec, 0, &mut Rng::new(1));
        assert_eq!(r.links(), 16 + 8);
        assert_eq!(r.kind(r.leaf_up(1, 1)), LinkKind::LeafUp);
        assert_eq!(r.kind(r.spine_down(0, 1)), LinkKind::SpineDown);
        let p = r.ecmp_path(0, 5, 100, 200).unwrap();
        assert_eq!(p.hops, 4);
        assert!(p.links().iter().all(|&l| r.alive[l as usize]));
        assert_eq!(r.spines_between(0, 5), 1);
        assert_eq!(r.ecmp_path(0, 1, 1, 2).unwrap().hops, 2);
        // Uplinks: 4 hosts x 400G over 2 spines = 800G each.
        assert!((r.ps_per_byte[r.leaf_up(0, 0) as usize] - 10.0).abs() < 1e-9);
    }
}
