//! Test data: a deterministic byte pattern per (seed, message index, size) and absolute offset,
//! checked byte-exactly on receive together with a canary in the unused tail of oversized
//! receive buffers.

pub(crate) const CANARY: u8 = 0xA5;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn base(seed: u64, index: u64, size: u64) -> u64 {
    let mut x = seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ size.wrapping_mul(GOLDEN);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Word `j` (bytes 8j..8j+8) of the message whose base is `b`: the splitmix64 finalizer of
/// (message, absolute word offset), so no stretch repeats within a message (a segment misplaced
/// by any distance, including a multiple of the segment size or of the bytes in flight, is
/// caught) and messages never share bytes (one delivered into the wrong buffer is caught).
#[inline]
fn word(b: u64, j: u64) -> u64 {
    let mut x = b.wrapping_add(j.wrapping_mul(GOLDEN));
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Writes the pattern of message `index` (whose length is `buf.len()`) into `buf`.
pub(crate) fn fill(buf: &mut [u8], seed: u64, index: u64) {
    let b = base(seed, index, buf.len() as u64);
    let mut chunks = buf.chunks_exact_mut(8);
    let mut j = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(b, j).to_le_bytes());
        j += 1;
    }
    let rest = chunks.into_remainder();
    let w = word(b, j).to_le_bytes();
    let n = rest.len();
    rest.copy_from_slice(&w[..n]);
}

/// Checks that `buf[..len]` holds message `index`'s pattern and `buf[len..]` is still canary.
pub(crate) fn verify(buf: &[u8], len: usize, seed: u64, index: u64) -> Result<(), String> {
    let b = base(seed, index, len as u64);
    let data = &buf[..len];
    let mut j = 0u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = word(b, j).to_le_bytes();
        if c != w {
            let k = (0..8).find(|&k| c[k] != w[k]).unwrap_or(0);
            return Err(format!(
                "message {index} (size {len}): byte {} is {:#04x}, expected {:#04x}",
                j as usize * 8 + k,
                c[k],
                w[k]
            ));
        }
        j += 1;
    }
    let rest = chunks.remainder();
    let w = word(b, j).to_le_bytes();
    for (k, &v) in rest.iter().enumerate() {
        if v != w[k] {
            return Err(format!(
                "message {index} (size {len}): byte {} is {v:#04x}, expected {:#04x}",
                j as usize * 8 + k,
                w[k]
            ));
        }
    }
    if let Some(p) = buf[len..].iter().position(|&v| v != CANARY) {
        return Err(format!(
            "message {index} (size {len}): receive buffer overwritten past the message at byte {}",
            len + p
        ));
    }
    Ok(())
}

/// xorshift64*: the seeded generator for random sizes.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One message of a transfer plan: its size on the wire and the receive buffer's capacity.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    pub size: usize,
    pub capacity: usize,
}

/// The sizes every cycle sends, in order, interleaved with `random` seeded sizes up to 256 KiB;
/// every third receive buffer is larger than the message it gets.
pub(crate) fn plan(seed: u64, random: usize, with_big: bool) -> Vec<Msg> {
    let mut fixed: Vec<usize> = vec![0, 1, 3, 7, 127, 128, 129, 4095, 4096, 65537, (1 << 20) + 1];
    if with_big {
        fixed.push(64 << 20);
    }
    let mut rng = Rng::new(seed);
    let per = random.div_ceil(fixed.len());
    let mut left = random;
    let mut sizes = Vec::new();
    for s in fixed {
        sizes.push(s);
        for _ in 0..per.min(left) {
            let bits = rng.below(19) as u32;
            sizes.push(rng.below(1u64 << bits) as usize);
            left -= 1;
        }
    }
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, size)| Msg {
            size,
            capacity: size + [0, 61, 4096][i % 3],
        })
        .collect()
}
