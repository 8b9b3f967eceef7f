//! What the emulated GPU kernels hand to the proxy: per connection, the sizes and offsets of every
//! network message of a ring all-reduce or an all-to-all, and the byte pattern each one carries.

/// NCCL_STEPS (src/include/device.h, 8 in 2.20-2.30); net.cc asserts NCCL_STEPS <=
/// NCCL_NET_MAX_REQUESTS, which the emulator's depth limits also respect.
pub(crate) const NCCL_STEPS: u64 = 8;
const _: () = assert!(NCCL_STEPS as usize <= dqplb_test_support::nccl::MAX_REQUESTS);
/// NCCL_PROXY_MAX_SUBS = MAXCHANNELS (src/include/proxy.h): the `sizes` array recvProxyProgress
/// hands to test() has this many entries, zeroed first. MAXCHANNELS (src/include/device.h) is 32
/// in 2.20-2.27 and 64 in 2.28-2.30: the larger array is used (test() must only write `n` of them).
pub(crate) const PROXY_MAX_SUBS: usize = 64;
/// NCCL_SHARED_STEPS (src/transport/net.cc, 16 in 2.20-2.30).
pub(crate) const SHARED_STEPS: u64 = 16;
/// NCCL_P2P_NET_CHUNKSIZE default (src/init.cc, 128 KiB in 2.20-2.30): p2p step size over NET.
pub(crate) const P2P_CHUNK: usize = 128 * 1024;

/// NCCL_PROTO_LL / LL128 / SIMPLE, in NCCL's index order (src/include/device.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    Ll = 0,
    Ll128 = 1,
    Simple = 2,
}

impl Proto {
    pub(crate) const ALL: [Proto; 3] = [Proto::Ll, Proto::Ll128, Proto::Simple];

    /// comm->buffSizes defaults (src/init.cc DEFAULT_LL_BUFFSIZE = 8 lines x 512 threads x
    /// NCCL_STEPS x 16 B; DEFAULT_LL128_BUFFSIZE = 120 elems x 640 threads x NCCL_STEPS x 8 B;
    /// DEFAULT_BUFFSIZE = 4 MiB; 2.20-2.30).
    pub(crate) fn buff_size(self) -> usize {
        match self {
            Proto::Ll => 8 * 512 * 8 * 16,
            Proto::Ll128 => 120 * 640 * 8 * 8,
            Proto::Simple => 4 << 20,
        }
    }

    /// stepSize = buffSize / NCCL_STEPS (sendProxyProgress/recvProxyProgress).
    pub(crate) fn step_size(self) -> usize {
        self.buff_size() / NCCL_STEPS as usize
    }

    /// (sliceSteps, chunkSteps) of a ring collective: ALLREDUCE_SLICESTEPS = NCCL_STEPS/4 and
    /// ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2 for SIMPLE, 1 and 1 for LL/LL128 (src/enqueue.cc
    /// computeColl / proxyOp setup; src/include/collectives.h; 2.20-2.30).
    pub(crate) fn ring_steps(self) -> (u64, u64) {
        match self {
            Proto::Simple => (NCCL_STEPS / 4, NCCL_STEPS / 2),
            _ => (1, 1),
        }
    }

    /// User bytes of one chunk, and the wire bytes the proxy sends for `data` user bytes.
    fn chunk_data(self) -> usize {
        match self {
            // chunkSize = stepSize * chunkSteps
            Proto::Simple => self.step_size() * 4,
            // LL: 8 data bytes per 16-byte line; LL128: 120 data bytes per 128-byte line
            Proto::Ll => self.step_size() / 2,
            Proto::Ll128 => self.step_size() / 128 * 120,
        }
    }

    fn wire(self, data: usize) -> usize {
        match self {
            Proto::Simple => data,
            Proto::Ll => data.div_ceil(8) * 16,
            Proto::Ll128 => data.div_ceil(120) * 128,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Proto> {
        match s {
            "LL" => Some(Proto::Ll),
            "LL128" => Some(Proto::Ll128),
            "SIMPLE" => Some(Proto::Simple),
            _ => None,
        }
    }
}

/// One network message: its size and the absolute offset (in the collective's buffer) that
/// seeds its pattern.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Msg {
    pub size: usize,
    pub abs: u64,
}

/// Sizes of the ring all-reduce messages rank `sender` sends on channel `ch` (one message per
/// sliceSteps steps), following runRing in src/device/all_reduce.h (2.20-2.30): per loop of
/// nChannels*nranks*chunkSize bytes, realChunkSize = min(chunkSize, divUp(rest, nChannels*nranks))
/// (rounded up here to 4 KiB: the kernel rounds to its thread count), then the sends
/// chunk r-1, chunk r-j for j = 2..n-1, chunk r, chunk r-j for j = 1..n-2. SIMPLE splits each chunk
/// into SlicePerChunk = 2 slices of max(divUp(nelem, 32)*16, sliceSize/32) bytes (genericOp in
/// src/device/prims_simple.h), so a slice can be empty: NCCL then posts a 0-byte isend.
pub(crate) fn ring_allreduce(
    proto: Proto,
    nranks: usize,
    nch: usize,
    ch: usize,
    sender: usize,
    bytes: usize,
) -> Vec<Msg> {
    let chunk = proto.chunk_data();
    let loop_size = nch * nranks * chunk;
    let mut out = Vec::new();
    let mut grid = 0usize;
    while grid < bytes {
        let real = chunk
            .min((bytes - grid).div_ceil(nch * nranks))
            .div_ceil(4096)
            * 4096;
        let real = real.min(chunk);
        let r = sender;
        let m = |j: usize| (r + nranks - j) % nranks;
        let mut order = vec![m(1)];
        order.extend((2..nranks).map(m));
        order.push(r);
        order.extend((1..nranks - 1).map(m));
        for c in order {
            let off = grid + ch * nranks * real + c * real;
            let nelem = if off >= bytes {
                0
            } else {
                real.min(bytes - off)
            };
            match proto {
                Proto::Simple => {
                    let (slice_steps, _) = proto.ring_steps();
                    let slice_max = proto.step_size() * slice_steps as usize;
                    let slice = (nelem.div_ceil(32) * 16).max(slice_max / 32);
                    for k in 0..2 {
                        let size = nelem.saturating_sub(k * slice).min(slice);
                        out.push(Msg {
                            size,
                            abs: (off + k * slice) as u64,
                        });
                    }
                }
                _ => out.push(Msg {
                    size: proto.wire(nelem),
                    abs: off as u64,
                }),
            }
        }
        grid += loop_size;
    }
    out
}

/// Bytes one (peer, channel, sub) p2p stream of an all-to-all carries: `bytes` per peer split over
/// channels and subs; every fifth stream is an empty p2p operation (NCCL still runs one 0-byte
/// step for it: nsteps = max(1, divUp(nbytes, chunk)), src/enqueue.cc p2p proxy ops).
pub(crate) fn a2a_stream_bytes(
    bytes: usize,
    nch: usize,
    nsub: usize,
    delta: usize,
    ch: usize,
    g: usize,
) -> usize {
    if (ch + g + delta) % 5 == 4 {
        return 0;
    }
    (bytes / (nch * nsub)) / 4 * 4 + 4 * ((ch + g) % 3)
}

/// The p2p messages of one stream: steps of P2P_CHUNK bytes, the last one shorter, at least one.
pub(crate) fn p2p_msgs(total: usize, base_abs: u64) -> Vec<Msg> {
    if total == 0 {
        return vec![Msg {
            size: 0,
            abs: base_abs,
        }];
    }
    (0..total.div_ceil(P2P_CHUNK))
        .map(|i| Msg {
            size: P2P_CHUNK.min(total - i * P2P_CHUNK),
            abs: base_abs + (i * P2P_CHUNK) as u64,
        })
        .collect()
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The seed of a message: sender rank (virtual), channel, message index, communicator.
pub(crate) fn seed(sender: usize, ch: usize, msg: usize, comm: usize) -> u64 {
    mix(((sender as u64) << 48) ^ ((ch as u64) << 40) ^ ((comm as u64) << 36) ^ msg as u64)
}

/// Byte `i` of a message is a function of its seed and absolute offset `abs + i`.
fn word(seed: u64, abs_word: u64) -> u64 {
    mix(seed ^ abs_word.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn byte_at(seed: u64, abs: u64) -> u8 {
    word(seed, abs / 8).to_le_bytes()[(abs % 8) as usize]
}

pub(crate) fn fill(buf: &mut [u8], seed: u64, abs: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(seed, abs + i as u64);
    }
}

/// `Err` names the first wrong byte.
pub(crate) fn check(buf: &[u8], seed: u64, abs: u64) -> Result<(), String> {
    for (i, b) in buf.iter().enumerate() {
        let want = byte_at(seed, abs + i as u64);
        if *b != want {
            return Err(format!(
                "byte {i} of {} (absolute offset {}) is {b:#04x}, expected {want:#04x}",
                buf.len(),
                abs + i as u64
            ));
        }
    }
    Ok(())
}
