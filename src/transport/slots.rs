//! Request slots shared by every transport comm: a fixed table (allocated once) of requests that
//! are free, in flight with their transport data, or done with their size, plus the free list.

use crate::transport::{NetError, NetResult};

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

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Takes a free slot for `v`; None when every slot is in use.
    pub fn alloc(&mut self, v: T) -> Option<u32> {
        let i = self.free.pop()?;
        self.table[i as usize] = State::Active(v);
        Some(i)
    }

    /// Returns a slot taken by `alloc` that never reached the wire.
    pub fn cancel(&mut self, i: u32) {
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
    pub fn active_mut(&mut self, i: u32) -> Option<&mut T> {
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
    pub fn take_done(&mut self, i: u32) -> Option<usize> {
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

/// NCCL's matching rule for a send against the receive the peer posted next: the receive buffer
/// must hold the send and carry the same tag. Shared by every transport's isend.
pub fn check_send_matches(
    peer: &dyn std::fmt::Display,
    len: usize,
    tag: i32,
    capacity: u64,
    posted_tag: i32,
) -> NetResult<()> {
    if len as u64 > capacity {
        return Err(NetError::invalid_usage(format!(
            "isend of {len} bytes to {peer} exceeds the receive buffer of {capacity} bytes the peer posted (tag {posted_tag}): NCCL requires receive >= send"
        )));
    }
    if posted_tag != tag {
        return Err(NetError::invalid_usage(format!(
            "isend tag {tag} to {peer} does not match the tag {posted_tag} of the receive the peer posted next"
        )));
    }
    Ok(())
}

/// The first fatal error of a comm, returned by every later call (a failed comm stays failed).
#[derive(Debug, Default)]
pub struct Sticky(Option<NetError>);

impl Sticky {
    pub fn check(&self) -> NetResult<()> {
        match &self.0 {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Records `e` (logging it once, naming `who`) and hands it back.
    pub fn fail(&mut self, who: &str, e: NetError) -> NetError {
        tracing::warn!(target: "dqplb::net", "{who} failed: {}", e.msg);
        self.0 = Some(e.clone());
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

    #[test]
    fn send_matching_rule() {
        let peer = "10.0.0.1:5";
        assert!(check_send_matches(&peer, 10, 3, 10, 3).is_ok());
        let big = check_send_matches(&peer, 11, 3, 10, 3).unwrap_err();
        assert!(
            big.msg.contains("11 bytes") && big.msg.contains("10 bytes"),
            "{big}"
        );
        let tag = check_send_matches(&peer, 1, 3, 10, 4).unwrap_err();
        assert!(
            tag.msg.contains("tag 3") && tag.msg.contains("tag 4"),
            "{tag}"
        );
        assert_eq!(tag.code, crate::transport::ErrorCode::InvalidUsage);
    }

    #[test]
    fn sticky_keeps_the_first_error() {
        let mut st = Sticky::default();
        assert!(st.check().is_ok());
        let e = st.fail("comm", NetError::remote("gone"));
        assert_eq!(e.msg, "gone");
        assert_eq!(st.check().unwrap_err().msg, "gone");
    }
}
