//! The 32-bit immediate carried by every segment: a 24-bit wrapping sequence number and a
//! last-segment flag; bits 24-30 are reserved and must be zero.

use super::ProtocolError;

/// Width of the sequence number in bits.
pub(crate) const SEQ_BITS: u32 = 24;
/// Mask selecting the sequence number (bits 0-23).
pub const SEQ_MASK: u32 = (1 << SEQ_BITS) - 1;
/// Bit 31: this segment is the last one of its message.
pub(crate) const LAST_FLAG: u32 = 1 << 31;
/// Bits 24-30: reserved, must be zero on the wire.
pub const RESERVED_MASK: u32 = !(SEQ_MASK | LAST_FLAG);

/// Builds an immediate; `seq` is taken modulo 2^24.
#[inline]
pub fn encode(seq: u32, last: bool) -> u32 {
    (seq & SEQ_MASK) | if last { LAST_FLAG } else { 0 }
}

/// Splits an immediate into (sequence number, last flag); reserved bits set is an error.
#[inline]
pub fn decode(imm: u32) -> Result<(u32, bool), ProtocolError> {
    if imm & RESERVED_MASK != 0 {
        return Err(ProtocolError::ReservedBits { imm });
    }
    Ok((imm & SEQ_MASK, imm & LAST_FLAG != 0))
}

/// The sequence number of an immediate (its reserved bits ignored).
#[inline]
pub(crate) fn seq_of(imm: u32) -> u32 {
    imm & SEQ_MASK
}

/// `seq + n` in the 24-bit sequence space.
#[inline]
pub fn seq_add(seq: u32, n: u32) -> u32 {
    seq.wrapping_add(n) & SEQ_MASK
}

/// How far `to` lies ahead of `from` in the 24-bit sequence space (0 ..= 2^24 - 1).
#[inline]
pub fn seq_distance(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from) & SEQ_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_reserved_bits() {
        assert_eq!(encode(5, false), 5);
        assert_eq!(encode(SEQ_MASK, true), 0x80FF_FFFF);
        assert_eq!(encode(SEQ_MASK + 3, false), 2);
        assert_eq!(decode(0x80FF_FFFF), Ok((SEQ_MASK, true)));
        assert_eq!(decode(7), Ok((7, false)));
        for bit in 24..31 {
            assert_eq!(
                decode(1 << bit),
                Err(ProtocolError::ReservedBits { imm: 1 << bit })
            );
        }
        assert_eq!(seq_add(SEQ_MASK, 2), 1);
        assert_eq!(seq_distance(SEQ_MASK, 1), 2);
        assert_eq!(seq_distance(1, SEQ_MASK), SEQ_MASK - 1);
    }
}
