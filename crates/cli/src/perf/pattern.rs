//! Per-iteration data pattern of `dqplb perf`: the sender fills each message from (size,
//! iteration), the receiver counts the bytes that differ. Word-at-a-time, no allocation.

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn base(size: u64, iter: u64) -> u64 {
    let mut x = size.wrapping_mul(GOLDEN) ^ iter.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x5eed;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

#[inline(always)]
fn word(b: u64, j: u64) -> u64 {
    (b ^ j).wrapping_mul(GOLDEN)
}

/// Writes iteration `iter`'s pattern for a message of `buf.len()` bytes.
pub(crate) fn fill(buf: &mut [u8], iter: u64) {
    let b = base(buf.len() as u64, iter);
    let mut chunks = buf.chunks_exact_mut(8);
    let mut j = 0;
    for c in &mut chunks {
        c.copy_from_slice(&word(b, j).to_le_bytes());
        j += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&word(b, j).to_le_bytes()[..n]);
}

/// Number of bytes of `buf` that differ from iteration `iter`'s pattern for `buf.len()` bytes.
pub(crate) fn count_wrong(buf: &[u8], iter: u64) -> u64 {
    let b = base(buf.len() as u64, iter);
    let mut wrong = 0u64;
    let mut chunks = buf.chunks_exact(8);
    let mut j = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let diff = u64::from_le_bytes(w) ^ word(b, j);
        if diff != 0 {
            wrong += (0..8).filter(|k| (diff >> (8 * k)) & 0xff != 0).count() as u64;
        }
        j += 1;
    }
    let rest = chunks.remainder();
    let w = word(b, j).to_le_bytes();
    wrong + rest.iter().zip(w.iter()).filter(|(a, b)| a != b).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_is_clean_and_detects_each_change() {
        for len in [0usize, 1, 7, 8, 9, 4097] {
            let mut b = vec![0u8; len];
            fill(&mut b, 3);
            assert_eq!(count_wrong(&b, 3), 0, "len {len}");
            if len > 0 {
                assert_eq!(
                    count_wrong(&b, 4),
                    len as u64 - count_same(&b, len),
                    "len {len}"
                );
                b[len - 1] ^= 1;
                assert_eq!(count_wrong(&b, 3), 1, "len {len}");
                b[0] ^= 0x80;
                assert_eq!(
                    count_wrong(&b, 3),
                    if len == 1 { 1 } else { 2 },
                    "len {len}"
                );
            }
        }
    }

    fn count_same(b: &[u8], len: usize) -> u64 {
        let mut other = vec![0u8; len];
        fill(&mut other, 4);
        b.iter().zip(&other).filter(|(x, y)| x == y).count() as u64
    }

    #[test]
    fn iterations_and_sizes_differ() {
        let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
        fill(&mut a, 1);
        fill(&mut b, 2);
        assert_ne!(a, b);
        let mut c = vec![0u8; 65];
        fill(&mut c, 1);
        assert_ne!(&a[..], &c[..64]);
    }
}
