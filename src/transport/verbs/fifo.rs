//! The receive announcement ("clear to send") a receiver RDMA-writes into the sender's FIFO on the
//! control QP: buffer address, rkey, capacity, tag, receive slot and a running sequence number.

use crate::transport::{NetError, NetResult};

/// Bytes of one FIFO entry.
pub const FIFO_ENTRY_BYTES: usize = 32;

/// One posted receive buffer as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoEntry {
    pub addr: u64,
    pub rkey: u32,
    /// Receiver's request slot (echoed nowhere; for logs).
    pub slot: u32,
    pub capacity: u64,
    pub tag: i32,
    /// Running count of announcements (the sender checks they arrive in order).
    pub seq: u32,
}

impl FifoEntry {
    pub fn encode(&self) -> [u8; FIFO_ENTRY_BYTES] {
        let mut b = [0u8; FIFO_ENTRY_BYTES];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        b[12..16].copy_from_slice(&self.slot.to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..28].copy_from_slice(&self.tag.to_le_bytes());
        b[28..32].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; FIFO_ENTRY_BYTES]) -> FifoEntry {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        FifoEntry {
            addr: u64_at(0),
            rkey: u32_at(8),
            slot: u32_at(12),
            capacity: u64_at(16),
            tag: u32_at(24) as i32,
            seq: u32_at(28),
        }
    }

    /// Checks the entry is the `expected_seq`-th announcement and describes a sane buffer.
    pub fn validate(&self, expected_seq: u32, who: &str) -> NetResult<()> {
        if self.seq != expected_seq {
            return Err(NetError::remote(format!(
                "{who}: receive announcement {} arrived where {expected_seq} was expected: FIFO out of sync",
                self.seq
            )));
        }
        if self.capacity > 0 && self.addr.checked_add(self.capacity).is_none() {
            return Err(NetError::remote(format!(
                "{who}: announced buffer {:#x}+{} wraps the address space",
                self.addr, self.capacity
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trips_and_validates() {
        let e = FifoEntry {
            addr: 0x7f00_1234_5000,
            rkey: 0xabcd,
            slot: 3,
            capacity: 1 << 20,
            tag: -2,
            seq: 41,
        };
        let d = FifoEntry::decode(&e.encode());
        assert_eq!(d, e);
        assert!(d.validate(41, "peer").is_ok());
        let err = d.validate(40, "peer").unwrap_err();
        assert!(err.msg.contains("out of sync"), "{}", err.msg);
        let wrap = FifoEntry {
            addr: u64::MAX - 2,
            capacity: 8,
            ..e
        };
        assert!(wrap.validate(41, "peer").is_err());
    }
}
