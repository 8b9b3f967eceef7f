//! Request slots shared by every transport comm: a fixed table (allocated once) of requests that
//! are free, in flight with their transport data, or done with their size, plus the free list.

use std::collections::VecDeque;

use crate::{NetError, NetResult};

/// Most buffers in one grouped receive: NCCL's net_ib value (NCCL_NET_IB_MAX_RECVS), reported
/// as maxRecvs in every device's properties.
pub const MAX_RECVS: usize = 8;

/// Received sizes of a completed grouped receive, one per buffer in posting order.
pub type RecvSizes = arrayvec::ArrayVec<usize, MAX_RECVS>;

#[derive(Debug, Clone, Copy)]
enum State<T> {
    Free,
    Active(T),
    Done(usize),
}

#[derive(Debug)]
pub struct Slots<T: Copy> {
    table: Vec<State<T>>,
    free: Vec<u32>,
}

impl<T: Copy> Slots<T> {
    pub fn new(n: usize) -> Slots<T> {
        Slots {
            table: vec![State::Free; n],
            free: (0..n as u32).rev().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Bytes of the table and free list (allocated once).
    pub(crate) fn footprint_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<State<T>>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Takes a free slot for `v`; None when every slot is in use.
    pub fn alloc(&mut self, v: T) -> Option<u32> {
        let i = self.free.pop()?;
        self.table[i as usize] = State::Active(v);
        Some(i)
    }

    #[cfg(test)]
    /// Returns a slot taken by `alloc` that never reached the wire.
    pub(crate) fn cancel(&mut self, i: u32) {
        if let Some(s @ State::Active(_)) = self.table.get_mut(i as usize) {
            *s = State::Free;
            self.free.push(i);
        }
    }

    /// The data of an in-flight slot.
    pub fn active(&self, i: u32) -> Option<T> {
        match self.table.get(i as usize) {
            Some(State::Active(v)) => Some(*v),
            _ => None,
        }
    }

    /// Mutable data of an in-flight slot.
    pub(crate) fn active_mut(&mut self, i: u32) -> Option<&mut T> {
        match self.table.get_mut(i as usize) {
            Some(State::Active(v)) => Some(v),
            _ => None,
        }
    }

    /// Marks an in-flight slot complete with `size` bytes (ignored for other states).
    pub fn finish(&mut self, i: u32, size: usize) {
        if let Some(s @ State::Active(_)) = self.table.get_mut(i as usize) {
            *s = State::Done(size);
        }
    }

    /// Some(size) and frees the slot if it is done; None otherwise (no error for any state).
    pub(crate) fn take_done(&mut self, i: u32) -> Option<usize> {
        match self.table.get(i as usize) {
            Some(State::Done(size)) => {
                let size = *size;
                self.table[i as usize] = State::Free;
                self.free.push(i);
                Some(size)
            }
            _ => None,
        }
    }

    /// NCCL's test(): Some(size) once done (the slot is then free again), None while in flight.
    pub fn test(&mut self, i: u32, what: &str) -> NetResult<Option<usize>> {
        match self.table.get(i as usize) {
            Some(State::Done(size)) => {
                let size = *size;
                self.table[i as usize] = State::Free;
                self.free.push(i);
                Ok(Some(size))
            }
            Some(State::Active(_)) => Ok(None),
            _ => Err(NetError::invalid_usage(format!(
                "test on {what} request {i} that is not in flight"
            ))),
        }
    }
}

/// One buffer of a grouped receive as the sender sees it: tag, capacity and where it lives on
/// the receiver (`R`: a buffer id for TCP, address and rkey for verbs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Target<R> {
    pub tag: i32,
    pub capacity: u64,
    pub remote: R,
}

/// Marks a buffer of a group that no isend has matched yet.
const UNMATCHED: u32 = u32::MAX;

/// A grouped receive the receiver announced, and the send requests matched to its buffers.
#[derive(Debug, Clone, Copy)]
pub struct Group<R> {
    n: usize,
    targets: [Target<R>; MAX_RECVS],
    sends: [u32; MAX_RECVS],
    matched: usize,
}

impl<R: Copy> Group<R> {
    /// The send request of each buffer, in buffer order (complete groups only).
    pub fn sends(&self) -> &[u32] {
        &self.sends[..self.n]
    }

    pub fn targets(&self) -> &[Target<R>] {
        &self.targets[..self.n]
    }
}

/// Where an isend goes, by [`GroupMatcher::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Buffer `.0` of the first incomplete group, carrying `.1` bytes: the send's size, cut to
    /// the buffer's when larger (net_ib's `if (size > slots[r].size) size = slots[r].size;`).
    Buffer(usize, usize),
    /// No group is announced yet.
    NoGroup,
    /// The first incomplete group has no unmatched buffer with this tag (every buffer with it is
    /// matched, or none carries it): the send belongs to a later group. NCCL's answer is a NULL
    /// request; its proxy offers the send again later.
    Busy,
}

/// The sender's queue of announced groups, matched strictly in order: an isend goes to the
/// unmatched buffer with its tag in the first group not yet complete; a group is handed to the
/// engine (in buffer order) once every buffer has its isend, as net_ib's multi-send does.
#[derive(Debug)]
pub(crate) struct GroupMatcher<R> {
    queue: VecDeque<Group<R>>,
    cap: usize,
}

impl<R: Copy + Default> GroupMatcher<R> {
    /// Room for `groups` announced groups (allocated once).
    pub(crate) fn new(groups: usize) -> GroupMatcher<R> {
        GroupMatcher {
            queue: VecDeque::with_capacity(groups),
            cap: groups,
        }
    }

    /// Bytes of the announced-group queue (allocated once).
    pub(crate) fn footprint_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<Group<R>>()
    }

    /// Groups announced and not yet complete.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Queues a group of 1..=MAX_RECVS buffers that `peer` announced; anything else is the
    /// peer's protocol error (ncclRemoteError, naming it).
    pub(crate) fn push(
        &mut self,
        peer: &dyn std::fmt::Display,
        targets: &[Target<R>],
    ) -> NetResult<()> {
        if targets.is_empty() || targets.len() > MAX_RECVS {
            return Err(NetError::remote(format!(
                "{peer}: peer announced a receive group of {} buffers (accepted 1..={MAX_RECVS})",
                targets.len()
            )));
        }
        if self.queue.len() >= self.cap {
            return Err(NetError::remote(format!(
                "{peer}: peer announced more than {} receive groups at once",
                self.cap
            )));
        }
        let mut g = Group {
            n: targets.len(),
            targets: [Target::default(); MAX_RECVS],
            sends: [UNMATCHED; MAX_RECVS],
            matched: 0,
        };
        g.targets[..targets.len()].copy_from_slice(targets);
        self.queue.push_back(g);
        Ok(())
    }

    /// Where a send of `len` bytes with `tag` goes, as net_ib's isend decides (ncclIbIsend,
    /// src/transport/net_ib.cc 2.20.3-2.28.9, src/transport/net_ib/p2p.cc 2.29.2-2.30.7): the
    /// first unmatched buffer with the tag in the head receive group takes it, cut to the
    /// buffer's size when larger; with none, the request is NULL and NCCL's proxy retries
    /// (sendProxyProgress, src/transport/net.cc), so the send matches a later group. O(n) in
    /// the group's buffers, no allocation.
    pub(crate) fn find(&self, len: usize, tag: i32) -> Match {
        let Some(g) = self.queue.front() else {
            return Match::NoGroup;
        };
        match (0..g.n).find(|&i| g.sends[i] == UNMATCHED && g.targets[i].tag == tag) {
            Some(i) => {
                let cap = usize::try_from(g.targets[i].capacity).unwrap_or(usize::MAX);
                Match::Buffer(i, len.min(cap))
            }
            None => Match::Busy,
        }
    }

    /// The buffer `find` chose.
    pub(crate) fn target(&self, i: usize) -> Option<Target<R>> {
        self.queue.front().filter(|g| i < g.n).map(|g| g.targets[i])
    }

    /// Records send request `slot` for buffer `i` of the first group; hands the group back once
    /// every buffer has its send (it then leaves the queue).
    pub(crate) fn assign(&mut self, i: usize, slot: u32) -> Option<Group<R>> {
        let g = self.queue.front_mut()?;
        if i >= g.n || g.sends[i] != UNMATCHED {
            return None;
        }
        g.sends[i] = slot;
        g.matched += 1;
        if g.matched < g.n {
            return None;
        }
        self.queue.pop_front()
    }
}

/// The first fatal error of a comm, returned by every later call (a failed comm stays failed).
#[derive(Debug)]
pub(crate) struct Sticky {
    /// The comm in the failure's log line ("send comm to 10.0.0.2:4000").
    who: String,
    first: Option<NetError>,
}

impl Sticky {
    pub(crate) fn new(who: String) -> Sticky {
        Sticky { who, first: None }
    }

    pub(crate) fn check(&self) -> NetResult<()> {
        match &self.first {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Records `e` (logging it once, naming the comm) and hands it back.
    pub(crate) fn fail(&mut self, e: NetError) -> NetError {
        tracing::warn!(target: "dqplb::net", "{} failed: {}", self.who, e.msg);
        self.first = Some(e.clone());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cycle_and_refuse_unknown_tests() {
        let mut s: Slots<u8> = Slots::new(2);
        let a = s.alloc(1).unwrap();
        let b = s.alloc(2).unwrap();
        assert_eq!(s.alloc(3), None);
        assert_eq!(s.active(b), Some(2));
        assert_eq!(s.test(a, "send").unwrap(), None);
        s.finish(a, 10);
        assert_eq!(s.test(a, "send").unwrap(), Some(10));
        assert!(s.test(a, "send").unwrap_err().msg.contains("not in flight"));
        s.cancel(b);
        assert_eq!(s.active(b), None);
        assert!(s.alloc(4).is_some() && s.alloc(5).is_some());
    }

    fn t(tag: i32, capacity: u64, remote: u32) -> Target<u32> {
        Target {
            tag,
            capacity,
            remote,
        }
    }

    #[test]
    fn groups_match_by_tag_in_order_and_complete_in_buffer_order() {
        let peer = "10.0.0.1:5";
        let mut m: GroupMatcher<u32> = GroupMatcher::new(2);
        assert_eq!(m.find(1, 1), Match::NoGroup);
        m.push(&peer, &[t(1, 10, 100), t(2, 20, 101)]).unwrap();
        m.push(&peer, &[t(1, 5, 200)]).unwrap();
        let over = m.push(&peer, &[t(1, 5, 300)]).unwrap_err();
        assert!(over.msg.contains("more than 2"), "{over}");
        // Sends come in any tag order within the first group.
        assert_eq!(m.find(20, 2), Match::Buffer(1, 20));
        assert_eq!(m.target(1).unwrap().remote, 101);
        assert!(m.assign(1, 7).is_none());
        // Tag 2 is taken in the first group, tag 3 is in none: both wait for a later group.
        assert_eq!(m.find(1, 2), Match::Busy);
        assert_eq!(m.find(1, 3), Match::Busy);
        assert_eq!(m.find(10, 1), Match::Buffer(0, 10));
        let g = m.assign(0, 9).expect("group complete");
        assert_eq!(
            g.sends(),
            &[9, 7],
            "sends in buffer order, not posting order"
        );
        assert_eq!(g.targets()[1].remote, 101);
        assert_eq!(m.len(), 1);
        // The next group is matched only now; a one-buffer receive with another tag waits too.
        assert_eq!(m.find(0, 1), Match::Buffer(0, 0));
        assert_eq!(m.find(0, 8), Match::Busy);
        assert!(m.push(&peer, &[]).is_err());
        assert!(m.push(&peer, &[t(0, 0, 0); MAX_RECVS + 1]).is_err());
    }

    /// A send larger than the buffer it matches is cut to the buffer's size, as net_ib's isend
    /// does in every NCCL from 2.20.3 to 2.30.7 (`if (size > slots[r].size) size = ...`).
    #[test]
    fn oversized_send_is_cut_to_the_posted_buffer() {
        let peer = "10.0.0.1:5";
        let mut m: GroupMatcher<u32> = GroupMatcher::new(1);
        m.push(&peer, &[t(4, 1024, 0)]).unwrap();
        assert_eq!(m.find(4096, 4), Match::Buffer(0, 1024));
        assert_eq!(m.find(1024, 4), Match::Buffer(0, 1024));
        assert_eq!(m.find(3, 4), Match::Buffer(0, 3));
    }

    /// aws-ofi-nccl's "Grouped Recv Multi-Tag": recv(n=1, tag 8), then recv(n=8, tags 0-7); the
    /// sends come as tags 0..=8. A send with tag 0 against the head group {8} is not an error: it
    /// waits (NULL request) and matches the 8-buffer group once tag 8 has completed the first.
    #[test]
    fn multi_tag_sends_wait_for_their_group() {
        let peer = "10.0.0.1:5";
        let mut m: GroupMatcher<u32> = GroupMatcher::new(2);
        m.push(&peer, &[t(8, 64, 800)]).unwrap();
        let eight: Vec<Target<u32>> = (0..8).map(|k| t(k, 64, 900 + k as u32)).collect();
        m.push(&peer, &eight).unwrap();
        let mut pending: Vec<i32> = (0..=8).collect();
        let mut done = Vec::new();
        let mut slot = 0;
        // The proxy offers every pending send in order, again and again, as NCCL's does.
        while !pending.is_empty() {
            let before = pending.len();
            pending.retain(|&tag| match m.find(64, tag) {
                Match::Buffer(i, 64) => {
                    if let Some(g) = m.assign(i, slot) {
                        done.push(g.targets().iter().map(|t| t.remote).collect::<Vec<_>>());
                    }
                    slot += 1;
                    false
                }
                Match::Busy => true,
                other => panic!("tag {tag}: {other:?}"),
            });
            assert!(pending.len() < before, "no progress: {pending:?}");
        }
        assert_eq!(done.len(), 2);
        assert_eq!(done[0], vec![800]);
        assert_eq!(done[1], (900..908).collect::<Vec<_>>());
    }

    #[test]
    fn sticky_keeps_the_first_error() {
        let mut st = Sticky::new("comm".to_string());
        assert!(st.check().is_ok());
        let e = st.fail(NetError::remote("gone"));
        assert_eq!(e.msg, "gone");
        assert_eq!(st.check().unwrap_err().msg, "gone");
    }
}
