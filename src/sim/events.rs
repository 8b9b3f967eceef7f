//! The discrete-event core: one FIFO of pending events per queue (a link, a host's arrivals, the
//! acknowledgements) and a heap over queues, so the heap holds one entry per busy queue, not per event.

// Each queue's pushes must come in non-decreasing time order (a link serves FIFO, and every
// producer pushes at `now + a constant`), so its head is its earliest event. A queue may also
// carry a `not_before` time (a link busy serializing): its head fires at `max(head, not_before)`.
// Ties break by queue id, so a run is a pure function of its inputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::topology::Ps;

/// Per-queue FIFOs of `(time, item)` and the heap that orders their heads.
#[derive(Debug)]
pub struct Core<T: Copy> {
    queues: Vec<VecDeque<(Ps, T)>>,
    not_before: Vec<Ps>,
    heap: BinaryHeap<Reverse<(Ps, u32)>>,
    /// The queue popped last: re-armed at the next `pop`, after its owner updated `not_before`.
    rearm: Option<u32>,
    /// The pushed time of the item popped last (for `hold`).
    popped_at: Ps,
    pending: u64,
    pub events: u64,
}

impl<T: Copy> Core<T> {
    pub fn new(queues: usize) -> Core<T> {
        Core {
            queues: (0..queues).map(|_| VecDeque::new()).collect(),
            not_before: vec![0; queues],
            heap: BinaryHeap::with_capacity(queues),
            rearm: None,
            popped_at: 0,
            pending: 0,
            events: 0,
        }
    }

    /// Pre-sizes queue `q` (call at set-up so the event loop does not grow it).
    pub fn reserve(&mut self, q: u32, n: usize) {
        self.queues[q as usize].reserve(n);
    }

    /// Adds an event at time `t` to queue `q`; `t` must not precede the queue's last push.
    #[inline]
    pub fn push(&mut self, q: u32, t: Ps, item: T) {
        let queue = &mut self.queues[q as usize];
        debug_assert!(
            queue.back().is_none_or(|&(b, _)| b <= t),
            "queue {q} out of order"
        );
        queue.push_back((t, item));
        self.pending += 1;
        if queue.len() == 1 && self.rearm != Some(q) {
            let key = t.max(self.not_before[q as usize]);
            self.heap.push(Reverse((key, q)));
        }
    }

    /// Queue `q` may not fire before `t` (its server is busy until then).
    #[inline]
    pub fn set_not_before(&mut self, q: u32, t: Ps) {
        self.not_before[q as usize] = t;
    }

    /// Earliest event over all queues: `(time, queue, item)`.
    #[inline]
    pub fn pop(&mut self) -> Option<(Ps, u32, T)> {
        if let Some(q) = self.rearm.take() {
            if let Some(&(t, _)) = self.queues[q as usize].front() {
                let key = t.max(self.not_before[q as usize]);
                self.heap.push(Reverse((key, q)));
            }
        }
        let Reverse((t, q)) = self.heap.pop()?;
        let (at, item) = self.queues[q as usize].pop_front()?;
        self.popped_at = at;
        self.rearm = Some(q);
        self.pending -= 1;
        self.events += 1;
        Some((t, q, item))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&mut self) -> Option<Ps> {
        if let Some(q) = self.rearm.take() {
            if let Some(&(t, _)) = self.queues[q as usize].front() {
                let key = t.max(self.not_before[q as usize]);
                self.heap.push(Reverse((key, q)));
            }
        }
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Longest queue now (for reports).
    pub fn len(&self, q: u32) -> usize {
        self.queues[q as usize].len()
    }

    /// Puts the item `pop` just returned back at the head of its queue `q` and leaves the queue
    /// unarmed: nothing of `q` fires until [`Core::release`] (P mode's PFC pause of a link).
    pub fn hold(&mut self, q: u32, item: T) {
        debug_assert_eq!(self.rearm, Some(q), "hold right after popping queue {q}");
        self.queues[q as usize].push_front((self.popped_at, item));
        self.rearm = None;
        self.pending += 1;
        self.events -= 1;
    }

    /// A held queue `q` may fire again, not before `t`.
    pub fn release(&mut self, q: u32, t: Ps) {
        let nb = &mut self.not_before[q as usize];
        *nb = (*nb).max(t);
        if let Some(&(h, _)) = self.queues[q as usize].front() {
            self.heap.push(Reverse((h.max(*nb), q)));
        }
    }

    /// The head of queue `q` (its earliest pending event), if any.
    #[inline]
    pub fn front(&self, q: u32) -> Option<(Ps, T)> {
        self.queues[q as usize].front().copied()
    }

    /// The latest pending item of queue `q` whose time is at or before `t` (binary search: the
    /// queue is in time order). P mode uses it for a switch queue's backlog at time `t`.
    #[inline]
    pub fn last_due(&self, q: u32, t: Ps) -> Option<T> {
        let queue = &self.queues[q as usize];
        let i = queue.partition_point(|&(x, _)| x <= t);
        if i == 0 {
            None
        } else {
            Some(queue[i - 1].1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_in_time_order_with_not_before() {
        let mut c: Core<u32> = Core::new(3);
        c.push(0, 5, 50);
        c.push(0, 6, 60);
        c.push(1, 1, 10);
        c.push(2, 5, 51);
        let (t, q, v) = c.pop().unwrap();
        assert_eq!((t, q, v), (1, 1, 10));
        let (t, q, _) = c.pop().unwrap();
        assert_eq!((t, q), (5, 0));
        c.set_not_before(0, 9); // queue 0 busy until 9: its next event waits
        assert_eq!(c.pop().unwrap(), (5, 2, 51));
        assert_eq!(c.pop().unwrap(), (9, 0, 60));
        assert!(c.pop().is_none() && c.is_empty());
    }

    #[test]
    fn a_held_queue_fires_only_after_release_in_its_order() {
        let mut c: Core<u32> = Core::new(2);
        c.push(0, 10, 1);
        c.push(0, 12, 2);
        c.push(1, 11, 9);
        c.set_not_before(0, 0);
        let (t, q, v) = c.pop().unwrap();
        assert_eq!((t, q, v), (10, 0, 1));
        c.hold(0, v);
        assert_eq!(c.front(0), Some((10, 1)));
        assert_eq!(c.last_due(0, 12), Some(2));
        assert_eq!(c.pop().unwrap(), (11, 1, 9));
        assert!(c.pop().is_none(), "queue 0 is held");
        c.push(0, 13, 3); // pushes to a held queue do not arm it either
        assert!(c.pop().is_none());
        c.release(0, 20);
        assert_eq!(c.pop().unwrap(), (20, 0, 1));
        assert_eq!(c.pop().unwrap(), (20, 0, 2));
        assert_eq!(c.pop().unwrap(), (20, 0, 3));
        assert!(c.is_empty() && c.events == 4);
    }

    #[test]
    fn front_and_last_due_see_only_what_has_arrived() {
        let mut c: Core<u32> = Core::new(1);
        assert_eq!((c.front(0), c.last_due(0, 100)), (None, None));
        for (t, v) in [(10, 1), (20, 2), (20, 3), (30, 4)] {
            c.push(0, t, v);
        }
        assert_eq!(c.front(0), Some((10, 1)));
        assert_eq!(c.last_due(0, 9), None);
        assert_eq!(c.last_due(0, 10), Some(1));
        assert_eq!(c.last_due(0, 25), Some(3));
        assert_eq!(c.last_due(0, 30), Some(4));
    }
}
