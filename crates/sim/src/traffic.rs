//! Collective traffic as phases of connections: a pipelined ring or double-binary-tree all-reduce
//! (NCCL's step size and slots), a permutation, a leaf shift, all-to-all, and a background job.

use super::error::SimError;
use super::rng::Rng;
use super::tree::{double_tree, Deps};

/// NCCL's default Simple-protocol step: a 4 MiB buffer over NCCL_STEPS = 8 slots.
pub(crate) const NCCL_STEP_BYTES: u64 = 512 * 1024;
/// NCCL's p2p message between nodes: `NCCL_P2P_NET_CHUNKSIZE`, 128 KiB (src/init.cc).
pub const P2P_NET_CHUNK_BYTES: u64 = 128 * 1024;
/// Background messages per connection by default: more than any run reaches.
pub const BACKGROUND_ENDLESS: u32 = 1 << 30;
/// NCCL_STEPS: receive slots per connection, the ring's flow-control credit.
pub(crate) const NCCL_SLOTS: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficKind {
    /// Ring all-reduce over each rail's hosts: 2(n-1) steps of bytes/n per rank.
    Ring,
    /// NCCL's double binary tree all-reduce over each rail's hosts (tree.rs): each tree carries
    /// half the buffer up (reduce) and down (broadcast) in step-size chunks, pipelined.
    Tree,
    /// Every host sends `bytes` to one random other host (a derangement).
    Permutation,
    /// Host i sends `bytes` to host i + hosts_per_leaf: every flow leaves its leaf.
    LeafShift,
    /// n-1 phases; in phase k host i sends bytes/n to host i + k (placement order).
    AllToAll,
    /// N-to-1: every host sends `bytes` to the first host of the placement order.
    Incast,
    /// Every host sends `bytes` to a host of the next pod (data centre, dci.rs): slot k of pod p
    /// to slot sigma(k) of pod p + 1 (mod pods), sigma a seeded permutation of a pod's hosts.
    CrossDc,
    /// One round of a PXN-less all-to-all (cross_rail.rs): rail r's GPU of host k sends `bytes`
    /// to rail r + 1's GPU of host sigma(k), sigma a seeded derangement; all rails in one plane.
    CrossRail,
    /// The whole PXN-less all-to-all (cross_rail.rs): every GPU sends bytes / ranks to every GPU
    /// of every other host, in NCCL's p2p schedule, `p2p_batches` batches of 8 rounds per phase.
    CrossRailAllToAll,
}

impl TrafficKind {
    pub fn parse(s: &str) -> Result<TrafficKind, String> {
        Ok(match s {
            "ring" | "allreduce" | "all-reduce" => TrafficKind::Ring,
            "tree" => TrafficKind::Tree,
            "permutation" => TrafficKind::Permutation,
            "leaf-shift" | "shift" => TrafficKind::LeafShift,
            "all-to-all" | "alltoall" => TrafficKind::AllToAll,
            "incast" => TrafficKind::Incast,
            "cross-dc" => TrafficKind::CrossDc,
            "cross-rail" => TrafficKind::CrossRail,
            "cross-rail-all-to-all" | "xr-all-to-all" => TrafficKind::CrossRailAllToAll,
            other => {
                return Err(format!(
                    "unknown traffic '{other}' (ring, tree, permutation, leaf-shift, all-to-all, \
                     incast, cross-dc, cross-rail, cross-rail-all-to-all)"
                ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            TrafficKind::Ring => "ring",
            TrafficKind::Tree => "tree",
            TrafficKind::Permutation => "permutation",
            TrafficKind::LeafShift => "leaf-shift",
            TrafficKind::AllToAll => "all-to-all",
            TrafficKind::Incast => "incast",
            TrafficKind::CrossDc => "cross-dc",
            TrafficKind::CrossRail => "cross-rail",
            TrafficKind::CrossRailAllToAll => "cross-rail-all-to-all",
        }
    }

    /// Traffic between rails: the whole fabric runs as one plane (cross_rail.rs).
    pub fn is_plane(self) -> bool {
        matches!(
            self,
            TrafficKind::CrossRail | TrafficKind::CrossRailAllToAll
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Ranks in host order: ring neighbours mostly share a leaf.
    Contiguous,
    /// Ranks on a seeded random order of hosts (a fragmented allocation).
    Fragmented,
    /// Ranks grouped by leaf (a topology-aware rank order): the leaves in a seeded random
    /// order, each leaf's hosts in order, so ring neighbours share a leaf except once per leaf.
    LeafOrdered,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Contiguous => "contiguous",
            Placement::Fragmented => "fragmented",
            Placement::LeafOrdered => "leaf-ordered",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrafficSpec {
    pub kind: TrafficKind,
    /// Ring: the all-reduce buffer per GPU. Permutation / shift: per connection. All-to-all:
    /// the send buffer per GPU (bytes / n per peer).
    pub bytes: u64,
    /// Message (NCCL step) size.
    pub step_bytes: u64,
    /// Messages a connection may have posted and not yet consumed by its receiver.
    pub slots: u32,
    pub placement: Placement,
    /// Ring only: simulate at most this many of the 2(n-1) steps and scale the time (0 = all).
    pub max_steps: u32,
    /// A second job: the last this-many hosts of the placement order run a permutation among
    /// themselves, `step_bytes` messages without end, until the collective finishes (0 = none).
    pub background_hosts: usize,
    /// Messages each background connection sends (0: the hosts stay idle).
    pub background_messages: u32,
    /// Cross-rail all-to-all: batches of 8 p2p rounds NCCL's channels run at once, one phase.
    pub p2p_batches: u32,
    /// Connections per rank pair: NCCL's channels (it duplicates its ring channels,
    /// `ncclTopoPreset` in src/graph/connect.cc, so a NIC pair has two or more), each its own
    /// connection with its own slots, carrying `1 / channels` of the bytes. Ring, permutation,
    /// leaf shift, all-to-all and incast; 1 for the others.
    pub channels: u32,
}

impl Default for TrafficSpec {
    fn default() -> Self {
        TrafficSpec {
            kind: TrafficKind::Ring,
            bytes: 1 << 30,
            step_bytes: NCCL_STEP_BYTES,
            slots: NCCL_SLOTS,
            placement: Placement::Contiguous,
            max_steps: 0,
            background_hosts: 0,
            background_messages: BACKGROUND_ENDLESS,
            p2p_batches: 1,
            channels: 1,
        }
    }
}

/// One phase: connections `(src, dst)` all sending `messages` messages cut from `chunk` bytes per
/// step, with ring dependencies when `ring` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub pairs: Vec<(u32, u32)>,
    /// Bytes a connection moves per step (ring) or in total.
    pub chunk: u64,
    /// Messages per step (ring) or in total.
    pub per_step: u32,
    /// Ring: messages of each step moved per pass of the ring (NCCL's chunk, at most half the
    /// slots: ALLREDUCE_CHUNKSTEPS = NCCL_STEPS / 2). A step of more messages goes round in
    /// `ceil(per_step / pass_msgs)` passes, each through every step, in the order NCCL's loop
    /// over the buffer sends them. `per_step` when not a ring.
    pub pass_msgs: u32,
    /// Steps simulated (1 unless ring).
    pub steps: u32,
    /// Steps the real collective has: time is scaled by `total_steps / steps`.
    pub total_steps: u32,
    pub step_bytes: u64,
    pub slots: u32,
    /// Ring: connection i's receiver is connection (i + 1)'s sender.
    pub ring: bool,
    /// Tree: which connections' messages each connection's message j reduces or forwards, and
    /// whose posts free them (tree.rs); None for every other traffic.
    pub deps: Option<Deps>,
    /// Bytes one NIC must send in the whole collective, the ideal's numerator: a connection's
    /// bytes, or for the all-reduces NCCL's bus bytes, 2(n-1) x bytes/n.
    pub nic_bytes: u64,
    /// The background job's connections (after `pairs` in the run): `step_bytes` messages,
    /// `slots` in flight, no end; `channels` connections per pair as the collective's.
    pub bg_pairs: Vec<(u32, u32)>,
    pub bg_messages: u32,
    /// Connections per rank pair (NCCL's channels): `pairs` is `channels` copies of one
    /// channel's pairs, channel by channel.
    pub channels: u32,
}

impl Phase {
    /// Connections of one channel (a ring's length); `pairs.len()` for one channel.
    pub fn per_channel(&self) -> usize {
        self.pairs.len() / self.channels.max(1) as usize
    }

    /// The channel of connection `c`: the collective's, then the background job's (`bg_pairs`
    /// likewise `channels` copies of one channel's pairs).
    pub fn channel_of(&self, c: usize) -> u32 {
        let ch = self.channels.max(1) as usize;
        if c < self.pairs.len() {
            (c / self.per_channel().max(1)) as u32
        } else {
            ((c - self.pairs.len()) / (self.bg_pairs.len() / ch).max(1)) as u32
        }
    }
}

impl Phase {
    /// Messages each connection sends in this phase.
    pub fn messages(&self) -> u32 {
        self.per_step * self.steps
    }

    /// Where a connection's message `j` (in sending order) sits: its step, its index within the
    /// step (0 .. per_step), and the messages per step of its pass (`pass_msgs`, fewer in a
    /// last, partial pass). Message j of step k >= 1 reduces message `j - width` of step k - 1.
    pub fn place(&self, j: u32) -> (u32, u32, u32) {
        let full = self.pass_msgs * self.steps;
        let pass = j / full;
        let in_pass = j - pass * full;
        let first = pass * self.pass_msgs;
        let width = self.pass_msgs.min(self.per_step - first);
        (in_pass / width, first + in_pass % width, width)
    }

    /// Length of message `j`: `step_bytes` pieces of each step's chunk, the last one shorter.
    pub(crate) fn message_len(&self, j: u32) -> u64 {
        let m = u64::from(self.place(j).1);
        let start = m * self.step_bytes;
        (self.chunk - start).min(self.step_bytes)
    }

    /// The ideal's bytes for one simulated step (the whole phase unless ring).
    pub(crate) fn ideal_bytes_per_step(&self) -> f64 {
        self.nic_bytes as f64 / f64::from(self.total_steps.max(1))
    }

    /// Bytes one NIC sends in the whole collective at the ideal (all steps, scaled).
    pub(crate) fn bytes_per_conn_total(&self) -> u64 {
        self.nic_bytes
    }
}

fn order(hosts: usize, hosts_per_leaf: usize, placement: Placement, rng: &mut Rng) -> Vec<u32> {
    let mut v: Vec<u32> = (0..hosts as u32).collect();
    match placement {
        Placement::Contiguous => {}
        Placement::Fragmented => rng.shuffle(&mut v),
        Placement::LeafOrdered => {
            let per = hosts_per_leaf.max(1);
            let mut leaves: Vec<u32> = (0..hosts.div_ceil(per) as u32).collect();
            rng.shuffle(&mut leaves);
            v = leaves
                .iter()
                .flat_map(|&l| {
                    let lo = l as usize * per;
                    (lo..(lo + per).min(hosts)).map(|h| h as u32)
                })
                .collect();
        }
    }
    v
}

fn round128(x: u64) -> u64 {
    x.div_ceil(128).max(1) * 128
}

/// The phases of `spec` over `hosts` hosts (one rail; every rail runs the same traffic);
/// `hosts_per_dc` is read by `cross-dc` (hosts per pod) and `cross-rail` (hosts per rail, with
/// `hosts` the plane's NICs) only.
pub(crate) fn phases(
    spec: &TrafficSpec,
    hosts: usize,
    hosts_per_leaf: usize,
    hosts_per_dc: usize,
    rng: &mut Rng,
) -> Vec<Phase> {
    let ord = order(hosts, hosts_per_leaf, spec.placement, rng);
    let b = if spec.background_hosts >= 2 {
        spec.background_hosts.min(hosts.saturating_sub(2))
    } else {
        0
    };
    let (fg, bg) = ord.split_at(hosts - b);
    let n = fg.len() as u32;
    let at = |i: u32| fg[(i % n) as usize];
    let step = spec.step_bytes.max(128);
    let ch = spec.channels.max(1);
    let mut bg_pairs = Vec::new();
    if bg.len() >= 2 {
        // The second job runs the same NCCL: as many channels per pair.
        let perm = derangement(bg.len(), rng);
        bg_pairs = (0..ch)
            .flat_map(|_| (0..bg.len()).map(|i| (bg[i], bg[perm[i] as usize])))
            .collect();
    }
    let single = |one: Vec<(u32, u32)>, bytes: u64| {
        let chunk = round128(bytes.div_ceil(u64::from(ch)));
        let per_step = chunk.div_ceil(step) as u32;
        let pairs: Vec<(u32, u32)> = (0..ch).flat_map(|_| one.iter().copied()).collect();
        Phase {
            pairs,
            chunk,
            per_step,
            pass_msgs: per_step,
            steps: 1,
            total_steps: 1,
            step_bytes: step,
            slots: spec.slots,
            ring: false,
            deps: None,
            nic_bytes: chunk * u64::from(ch),
            bg_pairs: bg_pairs.clone(),
            bg_messages: spec.background_messages,
            channels: ch,
        }
    };
    match spec.kind {
        TrafficKind::Ring => {
            let pairs = (0..ch)
                .flat_map(|_| (0..n).map(|i| (at(i), at(i + 1))))
                .collect();
            let chunk = round128(spec.bytes.div_ceil(u64::from(n) * u64::from(ch)));
            let total = 2 * (n - 1);
            let steps = if spec.max_steps == 0 {
                total
            } else {
                spec.max_steps.min(total)
            };
            let per_step = chunk.div_ceil(step) as u32;
            vec![Phase {
                pairs,
                chunk,
                per_step,
                pass_msgs: per_step.min((spec.slots / 2).max(1)),
                steps,
                total_steps: total,
                step_bytes: step,
                slots: spec.slots,
                ring: true,
                deps: None,
                nic_bytes: chunk * u64::from(total) * u64::from(ch),
                bg_pairs,
                bg_messages: spec.background_messages,
                channels: ch,
            }]
        }
        TrafficKind::Tree => {
            let (ranks, deps) = double_tree(n);
            let pairs = ranks.iter().map(|&(a, b)| (at(a), at(b))).collect();
            let mut p = single(pairs, spec.bytes.div_ceil(2));
            p.deps = Some(deps);
            p.nic_bytes = round128(spec.bytes.div_ceil(u64::from(n))) * u64::from(2 * (n - 1));
            vec![p]
        }
        TrafficKind::Permutation => {
            let perm = derangement(n as usize, rng);
            let pairs = (0..n).map(|i| (at(i), at(perm[i as usize]))).collect();
            vec![single(pairs, spec.bytes)]
        }
        TrafficKind::LeafShift => {
            let k = (hosts_per_leaf as u32 % n).max(1);
            let pairs = (0..n).map(|i| (at(i), at(i + k))).collect();
            vec![single(pairs, spec.bytes)]
        }
        TrafficKind::Incast => {
            let pairs = (1..n).map(|i| (at(i), at(0))).collect();
            vec![single(pairs, spec.bytes)]
        }
        TrafficKind::CrossDc => {
            // By host id (placement does not apply): pod p's slot k -> pod p + 1's slot sigma(k).
            let h = hosts_per_dc.max(1);
            let mut sigma: Vec<u32> = (0..h as u32).collect();
            rng.shuffle(&mut sigma);
            let pods = hosts / h;
            let pairs = (0..pods * h)
                .map(|i| {
                    let (p, k) = (i / h, i % h);
                    let dst = ((p + 1) % pods) * h + sigma[k] as usize;
                    (i as u32, dst as u32)
                })
                .collect();
            vec![single(pairs, spec.bytes)]
        }
        TrafficKind::CrossRail => {
            // By host id, as cross-dc (placement does not apply).
            let h = hosts_per_dc.max(1);
            let pairs = super::cross_rail::pairs(h, hosts / h, rng);
            vec![single(pairs, spec.bytes)]
        }
        TrafficKind::CrossRailAllToAll => {
            // The plane's `hosts` are rails x hosts NICs; nodes in placement order.
            let h = hosts_per_dc.max(1);
            let rails = hosts / h;
            let nodes = order(h, hosts_per_leaf, spec.placement, rng);
            let chunk = spec.bytes.div_ceil((h * rails) as u64);
            super::cross_rail::all_to_all_phases(&nodes, rails, spec.p2p_batches as usize)
                .into_iter()
                .map(|pairs| {
                    let mut sent = vec![0u64; hosts];
                    for &(s, _) in &pairs {
                        sent[s as usize] += 1;
                    }
                    let most = sent.into_iter().max().unwrap_or(1);
                    let mut p = single(pairs, chunk);
                    p.nic_bytes = p.chunk * most;
                    p
                })
                .collect()
        }
        TrafficKind::AllToAll => (1..n)
            .map(|k| {
                let pairs = (0..n).map(|i| (at(i), at(i + k))).collect();
                single(pairs, spec.bytes.div_ceil(u64::from(n)))
            })
            .collect(),
    }
}

impl TrafficSpec {
    /// What the traffic needs of the fabric: `cross-dc` two or more full pods and no second job;
    /// `--max-steps` only for the ring (a tree's pipeline has no steps to scale).
    pub fn check(&self, f: &super::topology::FabricSpec) -> Result<(), SimError> {
        let multi = matches!(
            self.kind,
            TrafficKind::Ring
                | TrafficKind::Permutation
                | TrafficKind::LeafShift
                | TrafficKind::AllToAll
                | TrafficKind::Incast
        );
        if self.channels == 0 || (self.channels > 1 && !multi) || self.channels > 64 {
            return Err(SimError::Config(format!(
                "--channels {} : 1 ..= 64, and above 1 for ring, permutation, leaf-shift, \
                 all-to-all and incast only (not {})",
                self.channels,
                self.kind.name()
            )));
        }
        if self.max_steps != 0 && self.kind != TrafficKind::Ring {
            return Err(SimError::Config(format!(
                "--max-steps {} applies to --traffic ring only, not {}",
                self.max_steps,
                self.kind.name()
            )));
        }
        if self.p2p_batches != 1 && self.kind != TrafficKind::CrossRailAllToAll {
            return Err(SimError::Config(format!(
                "--p2p-batches {} applies to --traffic cross-rail-all-to-all only, not {}",
                self.p2p_batches,
                self.kind.name()
            )));
        }
        if self.kind.is_plane() {
            return super::cross_rail::check(f, self);
        }
        if self.kind != TrafficKind::CrossDc {
            return Ok(());
        }
        let per_dc = f.leaves_per_pod() * f.hosts_per_leaf;
        if f.pods < 2 || !f.hosts.is_multiple_of(per_dc) || f.hosts / per_dc < 2 {
            return Err(SimError::Config(format!(
                "--traffic cross-dc needs two or more data centres, every one full: --pods >= 2 \
                 and hosts ({}) a multiple of leafs per pod x hosts per leaf ({per_dc})",
                f.hosts
            )));
        }
        if self.background_hosts > 0 {
            return Err(SimError::Config(
                "--traffic cross-dc takes no --background-hosts".into(),
            ));
        }
        Ok(())
    }
}

/// A permutation of `0 .. n` without fixed points: shuffle until none (expected e tries).
pub(super) fn derangement(n: usize, rng: &mut Rng) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..n as u32).collect();
    loop {
        rng.shuffle(&mut perm);
        if perm.iter().enumerate().all(|(i, &p)| p != i as u32) {
            return perm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_messages_tile_the_chunk() {
        let spec = TrafficSpec {
            bytes: 10 << 20,
            ..TrafficSpec::default()
        };
        let ph = phases(&spec, 4, 2, 4, &mut Rng::new(1));
        let p = &ph[0];
        assert_eq!((p.steps, p.total_steps), (6, 6));
        let per: u64 = (0..p.per_step).map(|j| p.message_len(j)).sum();
        assert_eq!(per, p.chunk);
        assert_eq!(p.chunk, (10 << 20) / 4);
        assert_eq!(p.pairs[3], (3, 0));
    }

    #[test]
    fn channels_copy_the_ring_with_a_share_of_the_bytes_each() {
        let one = TrafficSpec {
            bytes: 10 << 20,
            ..TrafficSpec::default()
        };
        let two = TrafficSpec {
            channels: 2,
            ..one.clone()
        };
        let p1 = phases(&one, 4, 2, 4, &mut Rng::new(1)).remove(0);
        let p2 = phases(&two, 4, 2, 4, &mut Rng::new(1)).remove(0);
        assert_eq!(p2.pairs.len(), 8);
        assert_eq!(p2.pairs[..4], p1.pairs[..]);
        assert_eq!(p2.pairs[4..], p1.pairs[..]);
        assert_eq!(p2.chunk, p1.chunk / 2);
        assert_eq!(p2.nic_bytes, p1.nic_bytes);
        assert_eq!(
            (p2.per_channel(), p2.channel_of(3), p2.channel_of(4)),
            (4, 0, 1)
        );
        // A second job runs as many channels.
        let bg = TrafficSpec {
            background_hosts: 4,
            ..two.clone()
        };
        let pb = phases(&bg, 8, 2, 8, &mut Rng::new(1)).remove(0);
        assert_eq!((pb.pairs.len(), pb.bg_pairs.len()), (8, 8));
        assert_eq!(pb.bg_pairs[..4], pb.bg_pairs[4..]);
        assert_eq!(
            (pb.channel_of(8), pb.channel_of(11), pb.channel_of(12)),
            (0, 0, 1)
        );
        // A permutation: each connection twice, half the bytes each.
        let perm = TrafficSpec {
            kind: TrafficKind::Permutation,
            ..two.clone()
        };
        let pp = phases(&perm, 4, 2, 4, &mut Rng::new(1)).remove(0);
        assert_eq!(
            (pp.pairs.len(), pp.chunk, pp.nic_bytes),
            (8, 5 << 20, 10 << 20)
        );
        // Channels only where the traffic has them.
        let f = super::super::topology::FabricSpec::default();
        assert!(two.check(&f).is_ok());
        let tree = TrafficSpec {
            kind: TrafficKind::Tree,
            ..two
        };
        let e = tree.check(&f).unwrap_err().to_string();
        assert!(e.contains("--channels 2"), "{e}");
    }

    #[test]
    fn leaf_ordered_keeps_each_leaf_together() {
        let ord = order(12, 4, Placement::LeafOrdered, &mut Rng::new(5));
        let mut sorted = ord.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..12).collect::<Vec<u32>>());
        for block in ord.chunks(4) {
            let leaf = block[0] / 4;
            assert_eq!(block, &[leaf * 4, leaf * 4 + 1, leaf * 4 + 2, leaf * 4 + 3]);
        }
        // The leaves' order is drawn: not all seeds keep 0, 1, 2.
        assert!((1..20).any(|s| order(12, 4, Placement::LeafOrdered, &mut Rng::new(s))[0] != 0));
    }

    #[test]
    fn a_step_of_many_messages_goes_round_in_passes_of_half_the_slots() {
        // 4 ranks, 9 messages per step, 8 slots: passes of 4, 4 and 1 message per step.
        let spec = TrafficSpec {
            bytes: 4 * 9 * (512 << 10),
            ..TrafficSpec::default()
        };
        let p = &phases(&spec, 4, 2, 4, &mut Rng::new(1))[0];
        assert_eq!((p.per_step, p.pass_msgs, p.steps), (9, 4, 6));
        let mut seen = vec![0u32; (p.per_step * p.steps) as usize];
        let mut widths = Vec::new();
        for j in 0..p.messages() {
            let (step, m, width) = p.place(j);
            seen[(step * p.per_step + m) as usize] += 1;
            widths.push(width);
            if step >= 1 {
                // It reduces the same message of the previous step, sent `width` earlier.
                assert_eq!(p.place(j - width), (step - 1, m, width));
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        assert_eq!(widths[..24], [4; 24]);
        assert_eq!(widths[48..], [1; 6]);
        assert_eq!(
            (p.place(24), p.place(48), p.place(53)),
            ((0, 4, 4), (0, 8, 1), (5, 8, 1))
        );
        // Steps of at most half the slots keep one pass, step after step.
        let spec = TrafficSpec {
            bytes: 4 * 4 * (512 << 10),
            ..TrafficSpec::default()
        };
        let p = &phases(&spec, 4, 2, 4, &mut Rng::new(1))[0];
        assert_eq!((p.per_step, p.pass_msgs), (4, 4));
        for j in 0..p.messages() {
            assert_eq!(p.place(j), (j / 4, j % 4, 4));
        }
    }

    #[test]
    fn a_tree_phase_is_both_trees_edges_on_the_placement_with_the_ring_s_ideal() {
        let spec = TrafficSpec {
            kind: TrafficKind::Tree,
            bytes: 10 << 20,
            placement: Placement::Fragmented,
            ..TrafficSpec::default()
        };
        let mut rng = Rng::new(7);
        let p = &phases(&spec, 4, 2, 4, &mut rng)[0];
        let ord = order(4, 32, Placement::Fragmented, &mut Rng::new(7));
        let (ranks, deps) = double_tree(4);
        let mapped: Vec<_> = ranks
            .iter()
            .map(|&(a, b)| (ord[a as usize], ord[b as usize]))
            .collect();
        assert_eq!(p.pairs, mapped);
        assert_eq!(p.deps.as_ref(), Some(&deps));
        // Each tree carries half: 5 MiB per edge in 10 chunks of 512 KiB, in one step.
        assert_eq!(
            (p.chunk, p.per_step, p.steps, p.total_steps),
            (5 << 20, 10, 1, 1)
        );
        assert!(!p.ring);
        // The ideal is the ring's bus bytes: 2 (n - 1) x bytes / n.
        assert_eq!(p.nic_bytes, 6 * ((10 << 20) / 4));
        let ring = &phases(
            &TrafficSpec {
                kind: TrafficKind::Ring,
                ..spec.clone()
            },
            4,
            2,
            4,
            &mut Rng::new(7),
        )[0];
        assert_eq!(ring.nic_bytes, p.nic_bytes);
        assert_eq!(ring.bytes_per_conn_total(), ring.chunk * 6);
    }

    #[test]
    fn cross_dc_pairs_every_host_with_one_in_the_next_pod() {
        let spec = TrafficSpec {
            kind: TrafficKind::CrossDc,
            ..TrafficSpec::default()
        };
        let p = &phases(&spec, 12, 2, 4, &mut Rng::new(5))[0];
        assert_eq!(p.pairs.len(), 12);
        let mut dsts: Vec<u32> = p.pairs.iter().map(|&(_, d)| d).collect();
        for &(s, d) in &p.pairs {
            assert_eq!((s / 4 + 1) % 3, d / 4, "{s} -> {d}: the next pod");
        }
        dsts.sort_unstable();
        assert_eq!(dsts, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn permutation_is_a_derangement() {
        let spec = TrafficSpec {
            kind: TrafficKind::Permutation,
            ..TrafficSpec::default()
        };
        let p = &phases(&spec, 64, 8, 64, &mut Rng::new(3))[0];
        let mut dsts: Vec<u32> = p
            .pairs
            .iter()
            .map(|&(s, d)| {
                assert_ne!(s, d);
                d
            })
            .collect();
        dsts.sort_unstable();
        assert_eq!(dsts, (0..64).collect::<Vec<_>>());
    }
}
