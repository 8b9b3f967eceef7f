//! Cross-rail traffic (`--traffic cross-rail`): every rail's leafs under one shared spine tier,
//! simulated as one plane, each GPU sending to the next rail's GPU on another host (PXN off).

// Why one plane: same-rail traffic never leaves its rail's links even when the spine switches are
// shared (a leaf's uplinks and a spine's downlink to a leaf belong to that leaf's rail), so rails
// are independent and run in parallel. A cross-rail flow leaves on its rail's uplink and lands on
// the other rail's spine downlink, which couples the rails: the whole fabric is one simulation.

use super::rng::Rng;
use super::topology::FabricSpec;
use super::traffic::{derangement, TrafficSpec};

/// The fabric as one plane: rail r's NIC of host k is plane host `r x hosts + k`, so rail r's
/// leafs are plane leafs `r x leaves .. (r + 1) x leaves` and every leaf keeps its `spines`
/// uplinks; failed and slow links stay so many per rail (drawn over the whole plane).
pub fn plane(f: &FabricSpec) -> FabricSpec {
    FabricSpec {
        hosts: f.hosts * f.rails,
        rails: 1,
        failed_links: f.failed_links * f.rails,
        slow_links: f.slow_links * f.rails,
        ..f.clone()
    }
}

/// The plane host of rail `rail`'s NIC on host `host`.
pub fn nic(rail: usize, host: usize, hosts: usize) -> u32 {
    (rail * hosts + host) as u32
}

/// One round of an all-to-all without PXN: the GPU of rail r on host k sends to the GPU of rail
/// r + 1 (mod rails) on host sigma(k), sigma a seeded derangement (a host's own GPUs talk over
/// NVLink, not the network). Every NIC sends one connection and receives one.
pub fn pairs(hosts: usize, rails: usize, rng: &mut Rng) -> Vec<(u32, u32)> {
    let sigma = derangement(hosts, rng);
    (0..rails)
        .flat_map(|r| {
            let sigma = &sigma;
            (0..hosts).map(move |k| {
                (
                    nic(r, k, hosts),
                    nic((r + 1) % rails, sigma[k] as usize, hosts),
                )
            })
        })
        .collect()
}

/// What cross-rail traffic needs: two rails or more, whole leafs per rail (a leaf holds one
/// rail's NICs), two tiers, no second job.
pub fn check(f: &FabricSpec, t: &TrafficSpec) -> Result<(), String> {
    if f.rails < 2 {
        return Err(format!(
            "--traffic cross-rail needs two rails or more (--rails {})",
            f.rails
        ));
    }
    if !f.hosts.is_multiple_of(f.hosts_per_leaf) {
        return Err(format!(
            "--traffic cross-rail needs whole leafs per rail: hosts ({}) a multiple of \
             hosts per leaf ({})",
            f.hosts, f.hosts_per_leaf
        ));
    }
    if f.pods > 0 {
        return Err(
            "--traffic cross-rail runs on two tiers (a spine tier shared by the rails): \
             no --pods or fat-tree preset"
                .into(),
        );
    }
    if t.background_hosts > 0 {
        return Err("--traffic cross-rail takes no --background-hosts".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hca::FabricId;
    use crate::config::plan::{classify, ConnClass};
    use crate::sim::topology::Rail;

    #[test]
    fn every_nic_sends_once_and_receives_once_to_another_rail_and_host() {
        for (hosts, rails) in [(2, 2), (5, 3), (64, 8)] {
            let p = pairs(hosts, rails, &mut Rng::new(7));
            assert_eq!(p.len(), hosts * rails);
            let mut sent = vec![0u32; hosts * rails];
            let mut received = vec![0u32; hosts * rails];
            for &(s, d) in &p {
                let (rs, ks) = (s as usize / hosts, s as usize % hosts);
                let (rd, kd) = (d as usize / hosts, d as usize % hosts);
                assert_eq!(rd, (rs + 1) % rails, "{s} -> {d}: the next rail");
                assert_ne!(ks, kd, "{s} -> {d}: another host");
                // The plugin's own classification of the pair's fabric ids (one DC).
                let id = |rail: usize| FabricId::from_id(rail as u32, rails as u32);
                assert_eq!(classify(&id(rs), &id(rd)), ConnClass::CrossRail);
                sent[s as usize] += 1;
                received[d as usize] += 1;
            }
            assert!(sent.iter().chain(&received).all(|&c| c == 1));
        }
    }

    #[test]
    fn the_plane_puts_each_rail_on_its_own_leafs_under_shared_spines() {
        let f = FabricSpec {
            hosts: 64,
            rails: 4,
            hosts_per_leaf: 16,
            spines: 8,
            failed_links: 2,
            ..FabricSpec::default()
        };
        let p = plane(&f);
        assert_eq!((p.hosts, p.rails, p.leaves(), p.spines), (256, 1, 16, 8));
        assert_eq!(p.failed_links, 8);
        assert_eq!(p.uplink_gbps(), f.uplink_gbps());
        let rail = Rail::new(&p, 0, &mut Rng::new(1));
        for r in 0..4 {
            for k in [0, 15, 16, 63] {
                assert_eq!(
                    rail.leaf_of(nic(r, k, 64) as usize),
                    r * 4 + k / 16,
                    "rail {r} host {k}"
                );
            }
        }
    }

    /// With PXN (NCCL's default: `ncclTopoGetNetDev`, src/graph/search.cc, NCCL 2.12 on, at
    /// `NCCL_P2P_PXN_LEVEL` 2) the sender hands the data over NVLink to its host's GPU of the
    /// peer's rail, whose NIC sends it: the pair (r, k) -> (r + 1, sigma(k)) becomes host k ->
    /// host sigma(k) on rail r + 1, a same-rail permutation by sigma on every rail. That is
    /// `--traffic permutation` (contiguous) of the same seed, pair for pair.
    #[test]
    fn with_pxn_the_network_sees_the_permutation_of_the_same_seed() {
        use crate::sim::traffic::{phases, TrafficKind};
        for (hosts, rails, seed) in [(8, 2, 1), (64, 4, 9), (48, 8, 3)] {
            let spec = |kind| TrafficSpec {
                kind,
                ..TrafficSpec::default()
            };
            let rng = || Rng::new(seed).fork(u64::MAX);
            let xr = phases(
                &spec(TrafficKind::CrossRail),
                hosts * rails,
                4,
                hosts,
                &mut rng(),
            );
            let perm = phases(&spec(TrafficKind::Permutation), hosts, 4, hosts, &mut rng());
            assert_eq!((xr.len(), perm.len()), (1, 1));
            assert_eq!(xr[0].pairs.len(), hosts * rails);
            for &(s, d) in &xr[0].pairs {
                let (k, kd) = (s as usize % hosts, d as usize % hosts);
                assert_eq!(perm[0].pairs[k], (k as u32, kd as u32), "seed {seed}");
            }
        }
    }

    #[test]
    fn refusals_name_what_is_missing() {
        let t = TrafficSpec::default();
        let f = FabricSpec {
            hosts: 64,
            rails: 1,
            ..FabricSpec::default()
        };
        assert!(check(&f, &t).unwrap_err().contains("two rails"));
        let f = FabricSpec {
            hosts: 40,
            ..FabricSpec::default()
        };
        assert!(check(&f, &t)
            .unwrap_err()
            .contains("multiple of hosts per leaf (32)"));
        let f = FabricSpec {
            pods: 2,
            ..FabricSpec::default()
        };
        assert!(check(&f, &t).unwrap_err().contains("no --pods"));
        let t = TrafficSpec {
            background_hosts: 4,
            ..TrafficSpec::default()
        };
        assert!(check(&FabricSpec::default(), &t)
            .unwrap_err()
            .contains("--background-hosts"));
        assert_eq!(
            check(&FabricSpec::default(), &TrafficSpec::default()),
            Ok(())
        );
    }
}
