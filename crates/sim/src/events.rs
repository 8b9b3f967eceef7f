//! The discrete-event core: one FIFO of pending events per queue (a link, a host's arrivals, the
//! acknowledgements) and a radix heap over queues (radix.rs): one entry per busy queue, not per event.

// Each queue's pushes must come in non-decreasing time order (a link serves FIFO, and every
// producer pushes at `now + a constant`), so its head is its earliest event. A queue may also
// carry a `not_before` time (a link busy serializing): its head fires at `max(head, not_before)`.
// Ties break by queue id, so a run is a pure function of its inputs. `push_inlined` and
// `pop_inlined` are `push` and `pop` always inlined: for B and F mode, which have two copies of
// their loop (with and without a time series) and would otherwise call them out of line.

use std::collections::VecDeque;

use super::radix::RadixQueue;

use super::topology::Ps;

/// One queue: its head event apart from the rest, next to its `not_before`, so that serving a
/// queue of one event (most links, most of the time) touches one cache line, not the FIFO's
/// buffer as well.
#[derive(Debug)]
#[repr(align(64))]
struct Queue<T: Copy> {
    head: Option<(Ps, T)>,
    not_before: Ps,
    /// The events after `head`, in order.
    rest: VecDeque<(Ps, T)>,
}

/// Per-queue FIFOs of `(time, item)` and the priority queue that orders their heads.
#[derive(Debug)]
pub(crate) struct Core<T: Copy> {
    queues: Vec<Queue<T>>,
    heap: RadixQueue,
    /// The queue popped last: re-armed at the next `pop`, after its owner updated `not_before`.
    rearm: Option<u32>,
    /// The pushed time of the item popped last (for `hold`).
    popped_at: Ps,
    pending: u64,
    pub events: u64,
}

impl<T: Copy> Core<T> {
    pub(crate) fn new(queues: usize) -> Core<T> {
        Core {
            queues: (0..queues)
                .map(|_| Queue {
                    head: None,
                    not_before: 0,
                    rest: VecDeque::new(),
                })
                .collect(),
            heap: RadixQueue::with_capacity(queues),
            rearm: None,
            popped_at: 0,
            pending: 0,
            events: 0,
        }
    }

    /// Pre-sizes queue `q` (call at set-up so the event loop does not grow it).
    pub(crate) fn reserve(&mut self, q: u32, n: usize) {
        self.queues[q as usize].rest.reserve(n);
    }

    /// Adds an event at time `t` to queue `q`; `t` must not precede the queue's last push.
    #[inline]
    pub(crate) fn push(&mut self, q: u32, t: Ps, item: T) {
        self.push_inlined(q, t, item)
    }

    /// [`Core::push`], always inlined.
    #[inline(always)]
    pub(crate) fn push_inlined(&mut self, q: u32, t: Ps, item: T) {
        let queue = &mut self.queues[q as usize];
        self.pending += 1;
        if queue.head.is_some() {
            debug_assert!(
                queue
                    .rest
                    .back()
                    .or(queue.head.as_ref())
                    .is_none_or(|&(b, _)| b <= t),
                "queue {q} out of order"
            );
            queue.rest.push_back((t, item));
            return;
        }
        queue.head = Some((t, item));
        if self.rearm != Some(q) {
            let key = t.max(queue.not_before);
            self.heap.push(key, q);
        }
    }

    /// Queue `q` may not fire before `t` (its server is busy until then).
    #[inline]
    pub(crate) fn set_not_before(&mut self, q: u32, t: Ps) {
        self.queues[q as usize].not_before = t;
    }

    /// Puts the queue popped last back into the heap if it has an event left.
    #[inline]
    fn rearm(&mut self) {
        if let Some(q) = self.rearm.take() {
            let queue = &self.queues[q as usize];
            if let Some((t, _)) = queue.head {
                self.heap.push(t.max(queue.not_before), q);
            }
        }
    }

    /// Earliest event over all queues: `(time, queue, item)`.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<(Ps, u32, T)> {
        self.pop_inlined()
    }

    /// [`Core::pop`], always inlined.
    #[inline(always)]
    pub(crate) fn pop_inlined(&mut self) -> Option<(Ps, u32, T)> {
        self.rearm();
        let (t, q) = self.heap.pop()?;
        let queue = &mut self.queues[q as usize];
        let (at, item) = queue.head.take()?;
        queue.head = queue.rest.pop_front();
        self.popped_at = at;
        self.rearm = Some(q);
        self.pending -= 1;
        self.events += 1;
        Some((t, q, item))
    }

    /// Time of the earliest pending event (always inlined: P mode's loop calls it per event).
    #[inline(always)]
    pub(crate) fn peek_time(&mut self) -> Option<Ps> {
        self.rearm();
        self.heap.peek_time()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Longest queue now (for reports).
    pub(crate) fn len(&self, q: u32) -> usize {
        let queue = &self.queues[q as usize];
        usize::from(queue.head.is_some()) + queue.rest.len()
    }

    /// Puts the item `pop` just returned back at the head of its queue `q` and leaves the queue
    /// unarmed: nothing of `q` fires until [`Core::release`] (P mode's PFC pause of a link).
    pub(crate) fn hold(&mut self, q: u32, item: T) {
        debug_assert_eq!(self.rearm, Some(q), "hold right after popping queue {q}");
        let queue = &mut self.queues[q as usize];
        if let Some(next) = queue.head.replace((self.popped_at, item)) {
            queue.rest.push_front(next);
        }
        self.rearm = None;
        self.pending += 1;
        self.events -= 1;
    }

    /// A held queue `q` may fire again, not before `t`.
    pub(crate) fn release(&mut self, q: u32, t: Ps) {
        let queue = &mut self.queues[q as usize];
        queue.not_before = queue.not_before.max(t);
        if let Some((h, _)) = queue.head {
            self.heap.push(h.max(queue.not_before), q);
        }
    }

    /// The head of queue `q` (its earliest pending event), if any.
    #[inline]
    pub(crate) fn front(&self, q: u32) -> Option<(Ps, T)> {
        self.queues[q as usize].head
    }

    /// The pending items of queue `q` whose time is at or before `t`, in order (B mode's time
    /// series: the segments that reached a link and wait for it).
    pub(crate) fn due_items(&self, q: u32, t: Ps) -> impl Iterator<Item = T> + '_ {
        let queue = &self.queues[q as usize];
        queue
            .head
            .iter()
            .chain(queue.rest.iter())
            .take_while(move |&&(x, _)| x <= t)
            .map(|&(_, item)| item)
    }

    /// The latest pending item of queue `q` whose time is at or before `t` (binary search: the
    /// queue is in time order). P mode uses it for a switch queue's backlog at time `t`.
    #[inline]
    pub(crate) fn last_due(&self, q: u32, t: Ps) -> Option<T> {
        let queue = &self.queues[q as usize];
        let i = queue.rest.partition_point(|&(x, _)| x <= t);
        if i > 0 {
            return Some(queue.rest[i - 1].1);
        }
        queue.head.filter(|&(x, _)| x <= t).map(|(_, item)| item)
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
    fn a_queue_popped_last_is_rearmed_with_its_next_event() {
        let mut c: Core<u32> = Core::new(2);
        c.push(0, 1, 10);
        c.push(0, 2, 20);
        c.push(0, 3, 30);
        c.push(1, 2, 11);
        assert_eq!(c.len(0), 3);
        assert_eq!(c.pop().unwrap(), (1, 0, 10));
        assert_eq!(c.len(0), 2);
        // Queue 0's next head comes back at the next pop: it ties with queue 1 and wins by id.
        assert_eq!(c.pop().unwrap(), (2, 0, 20));
        assert_eq!(c.pop().unwrap(), (2, 1, 11));
        // Queue 1, empty and popped last, gets an event: it waits for the re-arm.
        c.push(1, 4, 12);
        assert_eq!((c.len(1), c.peek_time()), (1, Some(3)));
        assert_eq!(c.pop().unwrap(), (3, 0, 30));
        assert_eq!(c.pop().unwrap(), (4, 1, 12));
        assert!(c.pop().is_none() && c.is_empty());
        assert_eq!(c.events, 5);
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
        assert_eq!(c.due_items(0, 9).count(), 0);
        assert_eq!(c.due_items(0, 20).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(c.due_items(0, 99).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }
}
