//! Cross-rail traffic (`--traffic cross-rail`, `cross-rail-all-to-all`): every rail's leafs under
//! one shared spine tier as one plane; one round, or NCCL's whole p2p schedule, with PXN off.

// Why one plane: same-rail traffic never leaves its rail's links even when the spine switches are
// shared (a leaf's uplinks and a spine's downlink to a leaf belong to that leaf's rail), so rails
// are independent and run in parallel. A cross-rail flow leaves on its rail's uplink and lands on
// the other rail's spine downlink, which couples the rails: the whole fabric is one simulation.

use super::error::SimError;
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
pub(crate) fn nic(rail: usize, host: usize, hosts: usize) -> u32 {
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

/// NCCL's p2p schedule group size: `NCCL_P2P_SCHEDULE_GROUP_SIZE` (8, the device's p2p ops per
/// batch), cut to gcd(8, local ranks) where the local ranks are fewer or not a multiple
/// (`ncclP2pSchedule`, src/init.cc, NCCL 2.28.7 to 2.30.7). One GPU per rail: local ranks = rails.
pub(crate) fn p2p_group_size(rails: usize) -> usize {
    const GROUP: usize = 8;
    if !rails.is_multiple_of(GROUP) || rails < GROUP {
        gcd(GROUP, rails)
    } else {
        GROUP
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The p2p rounds of an all-to-all over `hosts` nodes of `rails` ranks each, in the order
/// `ncclP2pSchedule` (src/init.cc, NCCL 2.28.7 to 2.30.7) builds them: group deltas in the
/// quadratic order (x^2 + x) / 2 mod pow2Up(groups), those >= groups skipped, and for each one
/// the local deltas 0 .. group size. Returned as (group delta, local delta).
pub(crate) fn p2p_rounds(hosts: usize, rails: usize) -> Vec<(usize, usize)> {
    let g = p2p_group_size(rails);
    let groups = hosts * rails / g;
    let pow2 = groups.next_power_of_two();
    let mut out = Vec::with_capacity(hosts * rails);
    let (mut delta, mut round) = (0usize, 0usize);
    loop {
        if delta < groups {
            out.extend((0..g).map(|d| (delta, d)));
        }
        round += 1;
        delta = (delta + round) & (pow2 - 1);
        if round == pow2 {
            return out;
        }
    }
}

/// The whole all-to-all without PXN, as NCCL schedules it: rank = node x rails + rail (GPU i on
/// rail i), nodes on the hosts of `order` (the placement). In round (group delta D, local delta
/// d) the rank of group G, local l in its group sends to group G + D's local (l + d) mod g
/// (`ncclP2pSchedule`). The device runs 8 consecutive rounds as one batch
/// (`NCCL_MAX_DEV_WORK_P2P_PER_BATCH`, `ncclAddWorkBatchToPlan` in src/enqueue.cc): a phase here
/// is `batches` such batches, NIC to NIC (plane ids), the pairs within one host left out (NVLink).
pub(crate) fn all_to_all_phases(
    order: &[u32],
    rails: usize,
    batches: usize,
) -> Vec<Vec<(u32, u32)>> {
    const BATCH: usize = 8;
    let hosts = order.len();
    let g = p2p_group_size(rails);
    let per_node = rails / g;
    let groups = hosts * per_node;
    let rounds = p2p_rounds(hosts, rails);
    rounds
        .chunks(BATCH * batches.max(1))
        .map(|chunk| {
            let mut pairs = Vec::new();
            for &(delta, d) in chunk {
                for node in 0..hosts {
                    for l in 0..rails {
                        let group = node * per_node + l / g;
                        let to = (group + delta) % groups;
                        let (to_node, to_l) =
                            (to / per_node, (to % per_node) * g + (l % g + d) % g);
                        if to_node != node {
                            pairs.push((
                                nic(l, order[node] as usize, hosts),
                                nic(to_l, order[to_node] as usize, hosts),
                            ));
                        }
                    }
                }
            }
            pairs
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// What cross-rail traffic needs: two rails or more, whole leafs per rail (a leaf holds one
/// rail's NICs), two tiers, no second job.
pub fn check(f: &FabricSpec, t: &TrafficSpec) -> Result<(), SimError> {
    let kind = t.kind.name();
    if f.rails < 2 {
        return Err(SimError::Config(format!(
            "--traffic {kind} needs two rails or more (--rails {})",
            f.rails
        )));
    }
    if !f.hosts.is_multiple_of(f.hosts_per_leaf) {
        return Err(SimError::Config(format!(
            "--traffic {kind} needs whole leafs per rail: hosts ({}) a multiple of \
             hosts per leaf ({})",
            f.hosts, f.hosts_per_leaf
        )));
    }
    if f.pods > 0 {
        return Err(SimError::Config(format!(
            "--traffic {kind} runs on two tiers (a spine tier shared by the rails): \
             no --pods or fat-tree preset"
        )));
    }
    if t.background_hosts > 0 {
        return Err(SimError::Config(format!(
            "--traffic {kind} takes no --background-hosts"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Rail;
    use dqplb_config::hca::FabricId;
    use dqplb_config::plan::{classify, ConnClass};

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
        use crate::traffic::{phases, TrafficKind};
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

    /// NCCL's own example (the comment above the loop in `ncclP2pSchedule`, src/init.cc,
    /// 2.28.7 to 2.30.7): "Example sequence for 16 ranks: 0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7,
    /// 2, 14, 11, 9, 8". 16 hosts of 8 rails are 16 groups of 8.
    #[test]
    fn group_deltas_follow_ncclp2pschedules_quadratic_order() {
        let rounds = p2p_rounds(16, 8);
        assert_eq!(rounds.len(), 16 * 8, "NCCL checks round == nRanks");
        let deltas: Vec<usize> = rounds.iter().step_by(8).map(|r| r.0).collect();
        assert_eq!(
            deltas,
            [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]
        );
        assert!(rounds.chunks(8).all(|c| c.iter().map(|r| r.1).eq(0..8)));
        // 5 groups: the sequence over pow2Up(5) = 8 (0, 1, 3, 6, 2, 7, 5, 4) less those >= 5.
        let deltas: Vec<usize> = p2p_rounds(5, 8).iter().step_by(8).map(|r| r.0).collect();
        assert_eq!(deltas, [0, 1, 3, 2, 4]);
        // Group size: 8 unless the local ranks are fewer or not a multiple of 8.
        let sizes: Vec<usize> = [2, 4, 6, 8, 12, 16].map(p2p_group_size).to_vec();
        assert_eq!(sizes, [2, 4, 2, 8, 4, 8]);
        assert_eq!(p2p_rounds(3, 6).len(), 18, "9 groups of 2");
    }

    /// Every GPU sends to every GPU of every other host exactly once; a phase of b batches
    /// gives each NIC at most 8 b connections out and in.
    #[test]
    fn the_all_to_all_covers_every_pair_of_other_hosts_once() {
        let cases = [
            (2, 2, 1, 1, 1),
            (5, 4, 1, 2, 3),
            (7, 8, 1, 3, 6),
            (6, 6, 3, 4, 2),
        ];
        for (hosts, rails, batches, seed, want_phases) in cases {
            let mut order: Vec<u32> = (0..hosts as u32).collect();
            Rng::new(seed).shuffle(&mut order);
            let phases = all_to_all_phases(&order, rails, batches);
            let nics = hosts * rails;
            let mut seen = vec![0u8; nics * nics];
            for pairs in &phases {
                let (mut out, mut inn) = (vec![0usize; nics], vec![0usize; nics]);
                for &(s, d) in pairs {
                    assert_ne!(s as usize % hosts, d as usize % hosts, "{s} -> {d}: NVLink");
                    seen[s as usize * nics + d as usize] += 1;
                    out[s as usize] += 1;
                    inn[d as usize] += 1;
                }
                assert!(out.iter().chain(&inn).all(|&c| c <= 8 * batches));
            }
            for s in 0..nics {
                for d in 0..nics {
                    let want = u8::from(s % hosts != d % hosts);
                    assert_eq!(seen[s * nics + d], want, "{hosts}x{rails}: {s} -> {d}");
                }
            }
            // Phases: the rounds in chunks of 8 b; with 8 rails (group = host) group delta 0's
            // batch stays inside the hosts and is left out (7 hosts: 6 phases).
            assert_eq!(phases.len(), want_phases, "{hosts}x{rails}");
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
        assert!(check(&f, &t).unwrap_err().to_string().contains("two rails"));
        let f = FabricSpec {
            hosts: 40,
            ..FabricSpec::default()
        };
        assert!(check(&f, &t)
            .unwrap_err()
            .to_string()
            .contains("multiple of hosts per leaf (32)"));
        let f = FabricSpec {
            pods: 2,
            ..FabricSpec::default()
        };
        assert!(check(&f, &t).unwrap_err().to_string().contains("no --pods"));
        let t = TrafficSpec {
            background_hosts: 4,
            ..TrafficSpec::default()
        };
        assert!(check(&FabricSpec::default(), &t)
            .unwrap_err()
            .to_string()
            .contains("--background-hosts"));
        assert_eq!(
            check(&FabricSpec::default(), &TrafficSpec::default()),
            Ok(())
        );
    }
}
