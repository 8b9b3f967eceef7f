//! The receive announcement ("clear to send") a receiver RDMA-writes into the sender's FIFO on the
//! control QP: one entry per grouped receive (NCCL's irecv of up to MAX_RECVS buffers), with a
//! running sequence number, the receive slot, the buffer count and, per buffer, address, rkey,
//! capacity and tag.
//!
//! Layout (little-endian), FIFO_ENTRY_BYTES per entry, of which `wire_len(count)` are written:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | seq: running count of announcements (the sender checks they arrive in order) |
//! | 4 | count: buffers in the group, 1..=MAX_RECVS |
//! | 5 | version: FIFO_VERSION |
//! | 6..8 | reserved, zero |
//! | 8..12 | receiver's request slot (for logs) |
//! | 12..16 | reserved, zero |
//! | 16 + 24 k .. | buffer k: addr u64, capacity u64, rkey u32, tag i32 |
//! | 16 + 24 count .. +4 | trailer: !seq (bitwise not), the last bytes written |
//!
//! The announcement is a plain RDMA write (no immediate, no receive consumed): the sender finds
//! entry `seq % fifo_len` complete by reading memory, once the header's seq is the one it expects,
//! the version is non-zero and the trailer is `!seq` (a zeroed slot never matches, and the trailer
//! covers a write whose bytes land out of order). The sender zeroes an entry after reading it.

use crate::transport::slots::MAX_RECVS;
use crate::transport::{NetError, NetResult};

/// Layout version of a FIFO entry (1: one buffer per entry, no count; 2: groups, announced by
/// WRITE_WITH_IMM; 3: trailer, announced by a plain write the sender finds in memory).
pub const FIFO_VERSION: u8 = 3;
/// Bytes before the per-buffer records.
pub const FIFO_HEADER_BYTES: usize = 16;
/// Bytes of one buffer record.
pub const FIFO_BUF_BYTES: usize = 24;
/// Bytes of the trailer (!seq) after the last buffer record.
pub const FIFO_TRAILER_BYTES: usize = 4;
/// Bytes of one FIFO entry (room for MAX_RECVS buffers and the trailer, 8-byte aligned).
pub const FIFO_ENTRY_BYTES: usize =
    (FIFO_HEADER_BYTES + MAX_RECVS * FIFO_BUF_BYTES + FIFO_TRAILER_BYTES).div_ceil(8) * 8;
/// Offset of the sequence number in an entry (stamped when the entry is announced).
pub const FIFO_SEQ_OFFSET: usize = 0;

/// Bytes of an entry announcing `count` buffers (header, records, trailer).
pub fn wire_len(count: usize) -> usize {
    trailer_offset(count) + FIFO_TRAILER_BYTES
}

/// Offset of the trailer of an entry announcing `count` buffers.
pub fn trailer_offset(count: usize) -> usize {
    FIFO_HEADER_BYTES + count.min(MAX_RECVS) * FIFO_BUF_BYTES
}

/// The trailer value of the `seq`-th announcement.
pub fn trailer(seq: u32) -> u32 {
    !seq
}

/// One posted receive buffer as the sender sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FifoBuf {
    pub addr: u64,
    pub rkey: u32,
    pub capacity: u64,
    pub tag: i32,
}

/// One grouped receive as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoEntry {
    /// Receiver's request slot (echoed nowhere; for logs).
    pub slot: u32,
    /// Running count of announcements.
    pub seq: u32,
    /// Buffers in the group (valid: 1..=MAX_RECVS).
    pub count: u8,
    pub version: u8,
    /// `bufs[..count]` are the group's buffers.
    pub bufs: [FifoBuf; MAX_RECVS],
}

impl FifoEntry {
    /// An entry for the group `bufs` (at most MAX_RECVS; the caller checks).
    pub fn new(slot: u32, bufs: &[FifoBuf]) -> FifoEntry {
        let n = bufs.len().min(MAX_RECVS);
        let mut all = [FifoBuf::default(); MAX_RECVS];
        all[..n].copy_from_slice(&bufs[..n]);
        FifoEntry {
            slot,
            seq: 0,
            count: n as u8,
            version: FIFO_VERSION,
            bufs: all,
        }
    }

    /// The group's buffers (never more than MAX_RECVS, whatever `count` says).
    pub fn buffers(&self) -> &[FifoBuf] {
        &self.bufs[..usize::from(self.count).min(MAX_RECVS)]
    }

    pub fn encode(&self) -> [u8; FIFO_ENTRY_BYTES] {
        let mut b = [0u8; FIFO_ENTRY_BYTES];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = self.count;
        b[5] = self.version;
        b[8..12].copy_from_slice(&self.slot.to_le_bytes());
        for (k, f) in self.buffers().iter().enumerate() {
            let o = FIFO_HEADER_BYTES + k * FIFO_BUF_BYTES;
            b[o..o + 8].copy_from_slice(&f.addr.to_le_bytes());
            b[o + 8..o + 16].copy_from_slice(&f.capacity.to_le_bytes());
            b[o + 16..o + 20].copy_from_slice(&f.rkey.to_le_bytes());
            b[o + 20..o + 24].copy_from_slice(&f.tag.to_le_bytes());
        }
        let t = trailer_offset(self.buffers().len());
        b[t..t + 4].copy_from_slice(&trailer(self.seq).to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; FIFO_ENTRY_BYTES]) -> FifoEntry {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let mut bufs = [FifoBuf::default(); MAX_RECVS];
        let n = usize::from(b[4]).min(MAX_RECVS);
        for (k, f) in bufs.iter_mut().enumerate().take(n) {
            let o = FIFO_HEADER_BYTES + k * FIFO_BUF_BYTES;
            *f = FifoBuf {
                addr: u64_at(o),
                capacity: u64_at(o + 8),
                rkey: u32_at(o + 16),
                tag: u32_at(o + 20) as i32,
            };
        }
        FifoEntry {
            seq: u32_at(0),
            count: b[4],
            version: b[5],
            slot: u32_at(8),
            bufs,
        }
    }

    /// Checks the entry is the `expected_seq`-th announcement and describes sane buffers.
    pub fn validate(&self, expected_seq: u32, who: &str) -> NetResult<()> {
        if self.version != FIFO_VERSION {
            return Err(NetError::remote(format!(
                "{who}: receive announcement of layout version {}, this plugin speaks {FIFO_VERSION}: mixed plugin versions or FIFO out of sync",
                self.version
            )));
        }
        if self.seq != expected_seq {
            return Err(NetError::remote(format!(
                "{who}: receive announcement {} arrived where {expected_seq} was expected: FIFO out of sync",
                self.seq
            )));
        }
        if self.count == 0 || usize::from(self.count) > MAX_RECVS {
            return Err(NetError::remote(format!(
                "{who}: receive announcement of a {}-buffer group (accepted 1..={MAX_RECVS})",
                self.count
            )));
        }
        for f in self.buffers() {
            if f.capacity > 0 && f.addr.checked_add(f.capacity).is_none() {
                return Err(NetError::remote(format!(
                    "{who}: announced buffer {:#x}+{} wraps the address space",
                    f.addr, f.capacity
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(k: u64) -> FifoBuf {
        FifoBuf {
            addr: 0x7f00_1234_5000 + (k << 20),
            rkey: 0xabcd + k as u32,
            capacity: (1 << 20) + k,
            tag: -2 + k as i32,
        }
    }

    #[test]
    fn entry_round_trips_and_validates() {
        let bufs: Vec<FifoBuf> = (0..MAX_RECVS as u64).map(buf).collect();
        for n in 1..=MAX_RECVS {
            let mut e = FifoEntry::new(3, &bufs[..n]);
            e.seq = 41;
            let d = FifoEntry::decode(&e.encode());
            assert_eq!(d, e);
            assert_eq!(d.buffers(), &bufs[..n]);
            assert!(d.validate(41, "peer").is_ok());
            // Only the header and n records go on the wire; the rest of the entry is zero.
            assert!(e.encode()[wire_len(n)..].iter().all(|b| *b == 0));
            let t = trailer_offset(n);
            assert_eq!(e.encode()[t..t + 4], (!41u32).to_le_bytes());
        }
        let mut e = FifoEntry::new(3, &bufs[..1]);
        e.seq = 41;
        let err = e.validate(40, "peer").unwrap_err();
        assert!(err.msg.contains("out of sync"), "{}", err.msg);
        let mut wrap = e;
        wrap.bufs[0] = FifoBuf {
            addr: u64::MAX - 2,
            capacity: 8,
            ..buf(0)
        };
        assert!(wrap.validate(41, "peer").is_err());
        let mut raw = e.encode();
        raw[4] = 9;
        let nine = FifoEntry::decode(&raw);
        assert_eq!(nine.buffers().len(), MAX_RECVS);
        assert!(nine
            .validate(41, "peer")
            .unwrap_err()
            .msg
            .contains("9-buffer"));
        raw[4] = 0;
        assert!(FifoEntry::decode(&raw).validate(41, "peer").is_err());
        let mut v1 = e.encode();
        v1[5] = 1;
        assert!(FifoEntry::decode(&v1)
            .validate(41, "peer")
            .unwrap_err()
            .msg
            .contains("layout version 1"));
    }
}
