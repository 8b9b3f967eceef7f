//! The receive announcement ("clear to send") a receiver RDMA-writes into the sender's FIFO on the
//! control QP: one entry per grouped receive (NCCL's irecv of up to MAX_RECVS buffers), with a
//! running sequence number, the receive slot, the receive credit, the buffer count and, per
//! buffer, address, rkey, capacity and tag; and the credit word after the entries.
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
//! | 12..16 | credit: running count of receives the receiver has posted to its shared receive queue |
//! | 16 + 24 k .. | buffer k: addr u64, capacity u64, rkey u32, tag i32 |
//! | 16 + 24 count .. +4 | trailer: !seq (bitwise not), the last bytes written |
//!
//! The announcement is a plain RDMA write (no immediate, no receive consumed): the sender finds
//! entry `seq % fifo_len` complete by reading memory, once the header's seq is the one it expects,
//! the version is non-zero and the trailer is `!seq` (a zeroed slot never matches, and the trailer
//! covers a write whose bytes land out of order). The sender zeroes an entry after reading it.
//!
//! Receive credit: every WRITE_WITH_IMM consumes one receive of the receiver's SRQ, so the sender
//! posts one only while its running count of them is below the latest credit (u32, wrapping).
//! Each announcement carries the credit; when the receiver replenishes without an announcement to
//! carry it, it RDMA-writes the credit word at `credit_offset(fifo_len)` of the sender's FIFO
//! region: credit u32, then !credit u32 (a torn or unwritten word fails that check and is
//! ignored until the next one). The sender takes the newest credit it has seen from either.

use crate::slots::MAX_RECVS;
use crate::{NetError, NetResult};

/// Layout version of a FIFO entry (1: one buffer per entry, no count; 2: groups, announced by
/// WRITE_WITH_IMM; 3: trailer, announced by a plain write the sender finds in memory; 4: receive
/// credit in bytes 12..16 and the credit word after the entries).
pub(crate) const FIFO_VERSION: u8 = 4;
/// Bytes before the per-buffer records.
pub(crate) const FIFO_HEADER_BYTES: usize = 16;
/// Bytes of one buffer record.
pub(crate) const FIFO_BUF_BYTES: usize = 24;
/// Bytes of the trailer (!seq) after the last buffer record.
pub(crate) const FIFO_TRAILER_BYTES: usize = 4;
/// Bytes of one FIFO entry (room for MAX_RECVS buffers and the trailer, 8-byte aligned).
pub(crate) const FIFO_ENTRY_BYTES: usize =
    (FIFO_HEADER_BYTES + MAX_RECVS * FIFO_BUF_BYTES + FIFO_TRAILER_BYTES).div_ceil(8) * 8;
/// Offset of the sequence number in an entry (stamped when the entry is announced).
pub(crate) const FIFO_SEQ_OFFSET: usize = 0;
/// Offset of the receive credit in an entry (stamped when the entry is announced).
pub(crate) const FIFO_CREDIT_OFFSET: usize = 12;

/// Bytes of the credit word (credit, !credit).
pub(crate) const CREDIT_WORD_BYTES: usize = 8;

/// Offset of the credit word in a FIFO region of `fifo_len` entries.
pub(crate) fn credit_offset(fifo_len: u32) -> usize {
    fifo_len as usize * FIFO_ENTRY_BYTES
}

/// Bytes of a FIFO region of `fifo_len` entries and its credit word.
pub(crate) fn region_bytes(fifo_len: u32) -> usize {
    credit_offset(fifo_len) + CREDIT_WORD_BYTES
}

/// The credit word announcing `credit`.
pub(crate) fn encode_credit(credit: u32) -> [u8; CREDIT_WORD_BYTES] {
    let mut b = [0u8; CREDIT_WORD_BYTES];
    b[0..4].copy_from_slice(&credit.to_le_bytes());
    b[4..8].copy_from_slice(&(!credit).to_le_bytes());
    b
}

/// The credit a word `(lo, hi)` carries, None when it is unwritten or torn (hi != !lo).
pub(crate) fn decode_credit(lo: u32, hi: u32) -> Option<u32> {
    (hi == !lo).then_some(lo)
}

/// Whether credit `new` is ahead of `cur` (running u32 counts that may wrap; they never differ
/// by 2^31 or more).
pub(crate) fn credit_newer(new: u32, cur: u32) -> bool {
    (new.wrapping_sub(cur) as i32) > 0
}

/// Bytes of an entry announcing `count` buffers (header, records, trailer).
pub(crate) fn wire_len(count: usize) -> usize {
    trailer_offset(count) + FIFO_TRAILER_BYTES
}

/// Offset of the trailer of an entry announcing `count` buffers.
pub(crate) fn trailer_offset(count: usize) -> usize {
    FIFO_HEADER_BYTES + count.min(MAX_RECVS) * FIFO_BUF_BYTES
}

/// The trailer value of the `seq`-th announcement.
pub(crate) fn trailer(seq: u32) -> u32 {
    !seq
}

/// One posted receive buffer as the sender sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FifoBuf {
    pub addr: u64,
    pub rkey: u32,
    pub capacity: u64,
    pub tag: i32,
}

/// One grouped receive as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FifoEntry {
    /// Receiver's request slot (echoed nowhere; for logs).
    pub slot: u32,
    /// Running count of announcements.
    pub seq: u32,
    /// Receives the receiver had posted to its SRQ, in total, when it announced this entry.
    pub credit: u32,
    /// Buffers in the group (valid: 1..=MAX_RECVS).
    pub count: u8,
    pub version: u8,
    /// `bufs[..count]` are the group's buffers.
    pub bufs: [FifoBuf; MAX_RECVS],
}

impl FifoEntry {
    /// An entry for the group `bufs` (at most MAX_RECVS; the caller checks).
    pub(crate) fn new(slot: u32, bufs: &[FifoBuf]) -> FifoEntry {
        let n = bufs.len().min(MAX_RECVS);
        let mut all = [FifoBuf::default(); MAX_RECVS];
        all[..n].copy_from_slice(&bufs[..n]);
        FifoEntry {
            slot,
            seq: 0,
            credit: 0,
            count: n as u8,
            version: FIFO_VERSION,
            bufs: all,
        }
    }

    /// The group's buffers (never more than MAX_RECVS, whatever `count` says).
    pub(crate) fn buffers(&self) -> &[FifoBuf] {
        &self.bufs[..usize::from(self.count).min(MAX_RECVS)]
    }

    pub(crate) fn encode(&self) -> [u8; FIFO_ENTRY_BYTES] {
        let mut b = [0u8; FIFO_ENTRY_BYTES];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = self.count;
        b[5] = self.version;
        b[8..12].copy_from_slice(&self.slot.to_le_bytes());
        b[FIFO_CREDIT_OFFSET..FIFO_CREDIT_OFFSET + 4].copy_from_slice(&self.credit.to_le_bytes());
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

    pub(crate) fn decode(b: &[u8; FIFO_ENTRY_BYTES]) -> FifoEntry {
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
            credit: u32_at(FIFO_CREDIT_OFFSET),
            bufs,
        }
    }

    /// Checks the entry is the `expected_seq`-th announcement and describes sane buffers.
    pub(crate) fn validate(&self, expected_seq: u32, who: &str) -> NetResult<()> {
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
            e.credit = 0xfffe_0000 + n as u32;
            let d = FifoEntry::decode(&e.encode());
            assert_eq!(d, e);
            assert_eq!(d.buffers(), &bufs[..n]);
            assert!(d.validate(41, "peer").is_ok());
            // Only the header and n records go on the wire; the rest of the entry is zero.
            assert!(e.encode()[wire_len(n)..].iter().all(|b| *b == 0));
            let t = trailer_offset(n);
            assert_eq!(e.encode()[t..t + 4], (!41u32).to_le_bytes());
            assert_eq!(e.encode()[12..16], (0xfffe_0000 + n as u32).to_le_bytes());
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
        let mut v3 = e.encode();
        v3[5] = 3;
        assert!(FifoEntry::decode(&v3)
            .validate(41, "peer")
            .unwrap_err()
            .msg
            .contains("layout version 3"));
        let mut v1 = e.encode();
        v1[5] = 1;
        assert!(FifoEntry::decode(&v1)
            .validate(41, "peer")
            .unwrap_err()
            .msg
            .contains("layout version 1"));
    }

    #[test]
    fn credit_word_round_trips_and_rejects_torn_words() {
        for c in [0u32, 1, 128, 0x8000_0000, u32::MAX] {
            let w = encode_credit(c);
            let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            assert_eq!(decode_credit(lo, hi), Some(c));
        }
        // an unwritten (zeroed) word and a torn one (halves of credits 128 and 256)
        assert_eq!(decode_credit(0, 0), None);
        assert_eq!(decode_credit(128, !256), None);
        assert_eq!(credit_offset(8), 8 * FIFO_ENTRY_BYTES);
        assert_eq!(region_bytes(8), 8 * FIFO_ENTRY_BYTES + 8);
        assert_eq!(credit_offset(8) % 8, 0, "the word is 8-byte aligned");
    }

    #[test]
    fn credit_order_survives_the_wrap() {
        assert!(credit_newer(5, 4));
        assert!(!credit_newer(4, 4));
        assert!(!credit_newer(3, 4));
        assert!(
            credit_newer(2, u32::MAX - 1),
            "2 follows 2^32 - 2 across the wrap"
        );
        assert!(!credit_newer(u32::MAX - 1, 2));
    }
}
