//! A priority queue of `(time, queue id)` for the event core: a radix heap over the time (one
//! bucket per highest bit in which a key differs from the last minimum) with ties by queue id.

// Pops come in exactly the order of a binary heap of `(time, id)` pairs (smallest time, then
// smallest id), so swapping it in changes no result. A simulation pushes times at or after the
// last one popped, which keeps every key in a bucket at most as high as the previous minimum's
// (the radix heap's monotone case: each key moves down at most 64 times, usually a handful).
// Keys below the last minimum, rare (P mode pushes at a timer's time after peeking past it), go
// to a small binary heap that pops first. Keys equal to the minimum wait in a heap by id.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::topology::Ps;

/// Buckets 1 ..= 64: bucket b holds keys whose highest bit differing from `last` is bit b - 1.
const BUCKETS: usize = 65;

#[derive(Debug)]
pub(crate) struct RadixQueue {
    /// The key of the last minimum taken into `at_last`; every bucketed key is above it.
    last: Ps,
    /// Ids whose key is `last`.
    at_last: BinaryHeap<Reverse<u32>>,
    buckets: [Vec<(Ps, u32)>; BUCKETS],
    /// Smallest key in each bucket (`Ps::MAX` when empty).
    mins: [Ps; BUCKETS],
    /// Bit b set: bucket b is not empty.
    full: u128,
    /// Keys below `last`, ordered as the binary heap would.
    below: BinaryHeap<Reverse<(Ps, u32)>>,
}

impl RadixQueue {
    pub(crate) fn with_capacity(n: usize) -> RadixQueue {
        RadixQueue {
            last: 0,
            at_last: BinaryHeap::with_capacity(n.min(1 << 16)),
            buckets: std::array::from_fn(|_| Vec::new()),
            mins: [Ps::MAX; BUCKETS],
            full: 0,
            below: BinaryHeap::new(),
        }
    }

    #[cfg(test)]
    /// Keys held (counts every bucket: for tests and reports, not the event loop).
    pub(crate) fn len(&self) -> usize {
        self.below.len() + self.at_last.len() + self.buckets.iter().map(Vec::len).sum::<usize>()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.full == 0 && self.at_last.is_empty() && self.below.is_empty()
    }

    /// The bucket of `key` (> `last`).
    #[inline]
    fn bucket(&self, key: Ps) -> usize {
        (64 - (key ^ self.last).leading_zeros()) as usize
    }

    #[inline]
    pub(crate) fn push(&mut self, key: Ps, id: u32) {
        if key == self.last {
            self.at_last.push(Reverse(id));
        } else if key > self.last {
            let b = self.bucket(key);
            self.buckets[b].push((key, id));
            self.mins[b] = self.mins[b].min(key);
            self.full |= 1 << b;
        } else {
            self.below.push(Reverse((key, id)));
        }
    }

    /// The smallest time, without taking it.
    #[inline]
    pub(crate) fn peek_time(&self) -> Option<Ps> {
        if let Some(Reverse((t, _))) = self.below.peek() {
            return Some(*t);
        }
        if !self.at_last.is_empty() {
            return Some(self.last);
        }
        if self.full == 0 {
            return None;
        }
        Some(self.mins[self.full.trailing_zeros() as usize])
    }

    /// Takes the smallest `(time, id)`.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<(Ps, u32)> {
        if let Some(Reverse(e)) = self.below.pop() {
            return Some(e);
        }
        if self.at_last.is_empty() {
            if self.full == 0 {
                return None;
            }
            let b = self.full.trailing_zeros() as usize;
            if self.buckets[b].len() == 1 {
                // The only key of the lowest bucket is the minimum: no spreading needed.
                let (key, id) = self.buckets[b].pop()?;
                self.last = key;
                self.mins[b] = Ps::MAX;
                self.full &= !(1 << b);
                return Some((key, id));
            }
            self.redistribute(b);
        }
        let Reverse(id) = self.at_last.pop()?;
        Some((self.last, id))
    }

    /// Makes bucket `b`'s smallest key the new `last` and spreads the bucket below it.
    #[inline(never)]
    fn redistribute(&mut self, b: usize) {
        let mut moving = std::mem::take(&mut self.buckets[b]);
        self.last = self.mins[b];
        self.mins[b] = Ps::MAX;
        self.full &= !(1 << b);
        for &(key, id) in &moving {
            if key == self.last {
                self.at_last.push(Reverse(id));
            } else {
                let nb = self.bucket(key);
                self.buckets[nb].push((key, id));
                self.mins[nb] = self.mins[nb].min(key);
                self.full |= 1 << nb;
            }
        }
        moving.clear();
        // Keep the buffer: the bucket fills again later without allocating.
        self.buckets[b] = moving;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn ties_by_id_and_keys_below_the_minimum_first() {
        let mut q = RadixQueue::with_capacity(4);
        q.push(10, 3);
        q.push(10, 1);
        q.push(7, 9);
        q.push(12, 0);
        assert_eq!(q.peek_time(), Some(7));
        assert_eq!(q.pop(), Some((7, 9)));
        assert_eq!(q.pop(), Some((10, 1)));
        // Pushed at the current minimum with a lower id: it comes next, as in a binary heap.
        q.push(10, 0);
        // Below the last minimum (a timer fired before it): it comes first.
        q.push(8, 5);
        assert_eq!(q.len(), 4);
        assert_eq!(q.pop(), Some((8, 5)));
        assert_eq!(q.pop(), Some((10, 0)));
        assert_eq!(q.pop(), Some((10, 3)));
        assert_eq!(q.peek_time(), Some(12));
        assert_eq!(q.pop(), Some((12, 0)));
        assert_eq!((q.pop(), q.peek_time(), q.is_empty()), (None, None, true));
    }

    #[test]
    fn pops_exactly_as_a_binary_heap_of_time_and_id() {
        // A simulation's pattern: most keys a little after the last pop, some equal to it, a few
        // far ahead, a few below it; every pop and peek compared with the binary heap's.
        let mut rng = Rng::new(7);
        let mut q = RadixQueue::with_capacity(16);
        let mut h: BinaryHeap<Reverse<(Ps, u32)>> = BinaryHeap::new();
        let mut now: Ps = 0;
        let mut pops = 0;
        for i in 0..200_000u32 {
            let r = rng.below(100);
            let key = match r {
                0..=9 => now,
                10..=11 => now.saturating_sub(rng.below(1000)),
                12..=13 => now + (1 << 40) + rng.below(1 << 30),
                _ => now + rng.below(8_000_000),
            };
            let id = rng.below(5000) as u32;
            q.push(key, id);
            h.push(Reverse((key, id)));
            if i % 3 != 0 {
                assert_eq!(q.peek_time(), h.peek().map(|Reverse((t, _))| *t));
                let got = q.pop();
                assert_eq!(got, h.pop().map(|Reverse(e)| e));
                now = got.unwrap().0.max(now);
                pops += 1;
            }
        }
        while let Some(Reverse(e)) = h.pop() {
            assert_eq!(q.pop(), Some(e));
        }
        assert!(q.is_empty() && q.pop().is_none());
        assert_eq!(pops, 133_333);
    }
}
