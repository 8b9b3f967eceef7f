//! NCCL's double binary tree over a rail's hosts, and the dependency graph of its edges: which
//! received messages an edge's next post waits for, and which posts free a received message.
//!
//! The trees follow NCCL 2.30.7 src/graph/trees.cc (`ncclGetBtree`, `ncclGetDtree`; the same
//! rules in 2.4's src/misc/trees.cu and in trees.cc of 2.5, 2.7-2.12 and 2.19, checked): tree 0
//! is a binary tree over ranks rooted at rank 0 built on the lowest set bit of each rank; tree
//! 1 mirrors it (`n - 1 - r`) for even n, or shifts it by one rank for odd n.
//! src/graph/connect.cc (`connectTrees`) gives channel c tree 0 and channel
//! c + nChannels tree 1, so each tree carries half of the buffer. The edge semantics follow
//! src/device/all_reduce.h (`runTreeSplit`, the Simple protocol's path except CUDA 11.2-11.3 on
//! sm_80 and newer): a node reduces chunk j from its children and sends it up; the root reduces it
//! and sends it down; any other node forwards chunk j from its parent to its children, while
//! the up half is still working on later chunks.

/// Parent and children of `rank` in NCCL's binary tree over `n` ranks (`ncclGetBtree`).
///
/// With b the lowest set bit of `rank`: the parent is `rank ^ b | 2b`, or `rank ^ b` when
/// that is out of range; the children are `rank - b/2` and the largest `rank + b/2^k < n`
/// (k >= 1). Rank 0 is the root and has one child: half the power of two at or above n.
pub(crate) fn btree(n: u32, rank: u32) -> (Option<u32>, [Option<u32>; 2]) {
    if rank == 0 {
        let top = n.next_power_of_two();
        let child = (n > 1).then_some(top >> 1);
        return (None, [None, child]);
    }
    let bit = 1u32 << rank.trailing_zeros();
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let half = bit >> 1;
    if half == 0 {
        return (Some(up), [None, None]);
    }
    let first = Some(rank - half);
    let mut step = half;
    while step > 0 && rank + step >= n {
        step >>= 1;
    }
    let second = (step > 0).then_some(rank + step);
    (Some(up), [first, second])
}

/// Parent and children of `rank` in tree `t` (0 or 1) of NCCL's double binary tree
/// (`ncclGetDtree`): tree 1 is tree 0 mirrored for even n, shifted by one rank for odd n.
pub(crate) fn dtree(n: u32, rank: u32, t: usize) -> (Option<u32>, [Option<u32>; 2]) {
    if t == 0 {
        return btree(n, rank);
    }
    let odd = n % 2 == 1;
    let to = |r: u32| if odd { (r + n - 1) % n } else { n - 1 - r };
    let from = |r: u32| if odd { (r + 1) % n } else { n - 1 - r };
    let (up, down) = btree(n, to(rank));
    (up.map(&from), [down[0].map(&from), down[1].map(&from)])
}

/// For every connection of a phase: the connections whose message j it must have received
/// before it posts its own message j (`inputs`), and the connections whose posts of message j
/// consume (free the receive slot of) its message j (`consumers`; none: freed on arrival).
/// Stored as offsets into flat lists.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Deps {
    in_at: Vec<u32>,
    ins: Vec<u32>,
    out_at: Vec<u32>,
    outs: Vec<u32>,
}

impl Deps {
    /// From per-connection input lists; the consumers are their inverse.
    pub(crate) fn from_inputs(inputs: &[Vec<u32>]) -> Deps {
        let n = inputs.len();
        let mut users: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (c, list) in inputs.iter().enumerate() {
            for &u in list {
                users[u as usize].push(c as u32);
            }
        }
        let flat = |lists: &[Vec<u32>]| {
            let mut at = Vec::with_capacity(lists.len() + 1);
            let mut all = Vec::new();
            at.push(0);
            for l in lists {
                all.extend_from_slice(l);
                at.push(all.len() as u32);
            }
            (at, all)
        };
        let (in_at, ins) = flat(inputs);
        let (out_at, outs) = flat(&users);
        Deps {
            in_at,
            ins,
            out_at,
            outs,
        }
    }

    pub fn len(&self) -> usize {
        self.in_at.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn inputs(&self, c: usize) -> &[u32] {
        &self.ins[self.in_at[c] as usize..self.in_at[c + 1] as usize]
    }

    pub(crate) fn consumers(&self, c: usize) -> &[u32] {
        &self.outs[self.out_at[c] as usize..self.out_at[c + 1] as usize]
    }
}

/// The edges of both trees over `n` ranks as `(from, to)` rank pairs, and their dependencies.
/// Per tree: first every up edge (rank -> parent, in rank order), then every down edge
/// (parent -> rank).
pub fn double_tree(n: u32) -> (Vec<(u32, u32)>, Deps) {
    let mut pairs = Vec::new();
    let mut inputs: Vec<Vec<u32>> = Vec::new();
    for t in 0..2 {
        let nodes: Vec<_> = (0..n).map(|r| dtree(n, r, t)).collect();
        let base = pairs.len() as u32;
        // Edge index of rank r's up edge and of the down edge into r (only ranks with a parent).
        let mut up_of = vec![u32::MAX; n as usize];
        let mut k = base;
        for (r, node) in nodes.iter().enumerate() {
            if let Some(p) = node.0 {
                up_of[r] = k;
                pairs.push((r as u32, p));
                k += 1;
            }
        }
        let ups = k - base;
        let down_of: Vec<u32> = up_of
            .iter()
            .map(|&u| if u == u32::MAX { u } else { u + ups })
            .collect();
        for (r, node) in nodes.iter().enumerate() {
            if let Some(p) = node.0 {
                pairs.push((p, r as u32));
            }
        }
        let children_ups = |r: usize| -> Vec<u32> {
            nodes[r]
                .1
                .iter()
                .flatten()
                .map(|&ch| up_of[ch as usize])
                .collect()
        };
        let mut tree_inputs = vec![Vec::new(); (2 * ups) as usize];
        for (r, node) in nodes.iter().enumerate() {
            let Some(p) = node.0 else { continue };
            // Up: the chunk reduced from this rank's children.
            tree_inputs[(up_of[r] - base) as usize] = children_ups(r);
            // Down: the root sends what it reduced from its children; any other parent
            // forwards what came down to it.
            tree_inputs[(down_of[r] - base) as usize] = if nodes[p as usize].0.is_none() {
                children_ups(p as usize)
            } else {
                vec![down_of[p as usize]]
            };
        }
        inputs.extend(tree_inputs);
    }
    (pairs, Deps::from_inputs(&inputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btree_of_fourteen_is_ncclgetbtree_s_illustration() {
        // trees.cc's comment: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10, 13; 2 -> 1, 3; ...
        let want: [(u32, Option<u32>, [Option<u32>; 2]); 6] = [
            (0, None, [None, Some(8)]),
            (8, Some(0), [Some(4), Some(12)]),
            (12, Some(8), [Some(10), Some(13)]),
            (13, Some(12), [None, None]),
            (10, Some(12), [Some(9), Some(11)]),
            (6, Some(4), [Some(5), Some(7)]),
        ];
        for (r, up, down) in want {
            assert_eq!(btree(14, r), (up, down), "rank {r}");
        }
    }

    #[test]
    fn second_tree_mirrors_even_and_shifts_odd_as_the_illustrations() {
        // Mirror, 12 ranks: 3 -> 11 is the root edge; 11 -> 7; 7 -> 5, 9; 1 -> 0, 2.
        assert_eq!(dtree(12, 11, 1), (None, [None, Some(3)]));
        assert_eq!(dtree(12, 3, 1), (Some(11), [Some(7), Some(1)]));
        assert_eq!(dtree(12, 7, 1), (Some(3), [Some(9), Some(5)]));
        assert_eq!(dtree(12, 1, 1), (Some(3), [Some(2), Some(0)]));
        // Shift, 13 ranks: root 1 -> 9; 9 -> 5, 0; 0 -> 11; 11 -> 10, 12.
        assert_eq!(dtree(13, 1, 1), (None, [None, Some(9)]));
        assert_eq!(dtree(13, 9, 1), (Some(1), [Some(5), Some(0)]));
        assert_eq!(dtree(13, 0, 1), (Some(9), [Some(11), None]));
        assert_eq!(dtree(13, 11, 1), (Some(0), [Some(10), Some(12)]));
    }

    #[test]
    fn every_tree_spans_every_rank_and_parents_agree_with_children() {
        for n in 1..=300u32 {
            for t in 0..2 {
                let mut roots = 0;
                let mut as_child = vec![0u32; n as usize];
                for r in 0..n {
                    let (up, down) = dtree(n, r, t);
                    match up {
                        None => roots += 1,
                        Some(p) => {
                            assert!(p < n);
                            assert!(dtree(n, p, t).1.contains(&Some(r)), "n {n} t {t} r {r}");
                        }
                    }
                    for ch in down.iter().flatten() {
                        assert!(*ch < n);
                        as_child[*ch as usize] += 1;
                        assert_eq!(dtree(n, *ch, t).0, Some(r));
                    }
                }
                assert_eq!(roots, 1, "n {n} tree {t}");
                assert_eq!(as_child.iter().filter(|&&c| c == 1).count() as u32, n - 1);
            }
        }
    }

    #[test]
    fn double_tree_edges_and_their_dependencies() {
        // 4 ranks. Tree 0: 0 -> 2; 2 -> 1, 3. Tree 1 (mirror): 3 -> 1; 1 -> 2, 0.
        let (pairs, deps) = double_tree(4);
        assert_eq!(
            pairs,
            [
                (1, 2),
                (2, 0),
                (3, 2),
                (2, 1),
                (0, 2),
                (2, 3),
                (0, 1),
                (1, 3),
                (2, 1),
                (1, 0),
                (3, 1),
                (1, 2),
            ]
        );
        assert_eq!(deps.len(), 12);
        // Leaves' up edges wait for nothing; 2 -> 0 reduces 1 -> 2 and 3 -> 2.
        assert_eq!(deps.inputs(0), [] as [u32; 0]);
        assert_eq!(deps.inputs(1), [0, 2]);
        // Root 0 sends down what it reduced from its child 2; 2 forwards it to 1 and 3.
        assert_eq!(deps.inputs(4), [1]);
        assert_eq!(
            (deps.inputs(3), deps.inputs(5)),
            ([4].as_slice(), [4].as_slice())
        );
        // Consumers: 2 -> 0 is consumed by the root's down edge, 0 -> 2 by both of 2's.
        assert_eq!(deps.consumers(1), [4]);
        assert_eq!(deps.consumers(4), [3, 5]);
        assert_eq!(deps.consumers(3), [] as [u32; 0]);
        assert_eq!(deps.consumers(0), [1]);
        // Tree 1 the same, shifted by 6 edges.
        assert_eq!(deps.inputs(7), [8, 6]);
        assert_eq!(deps.inputs(10), [7]);
        assert_eq!(deps.consumers(10), [9, 11]);
    }
}
