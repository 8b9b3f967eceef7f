//! P mode's lossy fabric: a finite buffer per switch egress (tail drop), and RoCE's go-back-N
//! recovery in the NICs: one NAK per gap, a rewind on NAK, a rewind on the local ACK timeout.

// A packet is admitted when the bytes its egress holds at its arrival, plus its own, fit the
// buffer. The core queues a packet when the previous hop sends it (its arrival lies one hop
// latency ahead), so the occupancy at arrival is computed then, from the departure time every
// admitted packet will have: a FIFO link serves in push order, each packet from
// max(arrival, previous departure) for its serialization time, and not before its tail
// crossed the hop (cut-through), exactly what the event loop does later. Without PFC nothing
// stops a link, so these departures are exact; PFC and a finite buffer are refused together
// (PFC's class is lossless). Recovery follows the InfiniBand RC rules as ConnectX applies them
// to RoCE: the responder accepts only the next expected PSN, NAKs the first packet past a gap
// once and discards the rest until the gap is filled; the requester resends from the NAKed PSN;
// with no acknowledgement for 4.096 us x 2^timeout (NCCL_IB_TIMEOUT, 20 by default) it resends
// from the first PSN the responder has not taken. Every packet taken counts as acknowledged
// one return trip later (the timer's progress; no ACK event per packet), a segment's CQE comes
// with its last packet as in lossless runs. The retry limit (NCCL_IB_RETRY_CNT) is not modelled.

use std::collections::VecDeque;

use super::error::SimError;
use super::nic::QpTx;
use super::topology::Ps;

/// NCCL's default `NCCL_IB_TIMEOUT` (src/transport/net_ib/connect.cc, `NCCL_PARAM(IbTimeout,
/// "IB_TIMEOUT", 20)`), the QP's local ACK timeout exponent.
pub const NCCL_IB_TIMEOUT: u32 = 20;

/// The local ACK timeout of exponent `t`: 4.096 us x 2^t (InfiniBand spec, QP attribute
/// `timeout`), in picoseconds.
pub fn ack_timeout_ps(t: u32) -> Ps {
    4_096_000u64 << t.min(31)
}

/// The lossy-fabric parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossSpec {
    /// Bytes each switch egress may hold (0: unbounded, lossless).
    pub buffer_bytes: u64,
    /// The QP's local ACK timeout exponent (`NCCL_IB_TIMEOUT`), 0 ..= 31.
    pub ib_timeout: u32,
}

impl Default for LossSpec {
    fn default() -> Self {
        LossSpec {
            buffer_bytes: 0,
            ib_timeout: NCCL_IB_TIMEOUT,
        }
    }
}

impl LossSpec {
    pub fn lossy(&self) -> bool {
        self.buffer_bytes > 0
    }

    pub fn validate(&self, mtu: u32, pfc: bool) -> Result<(), SimError> {
        if self.ib_timeout > 31 {
            return Err(SimError::Config(format!(
                "--ib-timeout {}: the QP timeout exponent is 0 ..= 31",
                self.ib_timeout
            )));
        }
        if self.lossy() && self.buffer_bytes < u64::from(mtu) {
            return Err(SimError::Config(format!(
                "--buffer-kb: {} B holds no {mtu}-byte packet",
                self.buffer_bytes
            )));
        }
        if self.lossy() && pfc {
            return Err(SimError::Config(
                "--buffer-kb with --pfc: PFC's class is lossless; a finite buffer models a fabric without PFC"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The switch egress buffers: occupancy at arrival and drops, per link.
#[derive(Debug, Default)]
pub struct Buffers {
    limit: u64,
    /// Admitted packets not known to have left: (departure time, link's byte count after it).
    ahead: Vec<VecDeque<(Ps, u64)>>,
    /// Byte count of the link after the last packet known to have left.
    gone: Vec<u64>,
    /// Departure of the link's last admitted packet.
    last_out: Vec<Ps>,
    /// Packets dropped at each link.
    pub drops: Vec<u64>,
}

impl Buffers {
    /// `limit` bytes per egress of `links` links (no state at all when `limit` is 0).
    pub fn new(limit: u64, links: usize) -> Buffers {
        let n = if limit > 0 { links } else { 0 };
        Buffers {
            limit,
            ahead: (0..n).map(|_| VecDeque::new()).collect(),
            gone: vec![0; n],
            last_out: vec![0; n],
            drops: vec![0; n],
        }
    }

    /// A packet of `len` bytes reaches `link` at `at`; `queued` is the link's byte count before
    /// it (`SwitchQueues::cum`), `ser` its serialization there and `not_before` the earliest
    /// departure cut-through allows. True: admitted (its departure recorded); false: dropped.
    #[inline]
    pub fn admit(
        &mut self,
        link: u32,
        at: Ps,
        len: u32,
        queued: u64,
        ser: Ps,
        not_before: Ps,
    ) -> bool {
        let l = link as usize;
        let ahead = &mut self.ahead[l];
        while let Some(&(t, cum)) = ahead.front() {
            if t > at {
                break;
            }
            self.gone[l] = cum;
            ahead.pop_front();
        }
        if queued - self.gone[l] + u64::from(len) > self.limit {
            self.drops[l] += 1;
            return false;
        }
        let out = (at.max(self.last_out[l]) + ser).max(not_before);
        self.last_out[l] = out;
        ahead.push_back((out, queued + u64::from(len)));
        true
    }
}

/// Go-back-N counters (summed into `PacketSummary`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Packets the NICs put on the wire, first sends and resends.
    pub sent: u64,
    /// Packets sent again after a NAK or a timeout.
    pub resent: u64,
    /// NAKs the receivers returned (one per gap).
    pub naks: u64,
    /// Local ACK timeouts that fired with data unacknowledged.
    pub timeouts: u64,
    /// Packets a receiver NIC discarded: past a gap, or already received.
    pub discarded: u64,
}

/// The PSN QP `q` sends next; `range(seg)` is a segment's first PSN and packet count.
pub(crate) fn send_point(q: &QpTx, mtu: u32, range: impl Fn(u32) -> (u32, u32)) -> u32 {
    match q.segs.front() {
        Some(&f) => range(f).0 + q.off / mtu,
        None => q.next_psn,
    }
}

/// Whether QP `q` sent packets its receiver has not taken yet (on the wire, or lost).
pub fn in_flight(q: &QpTx) -> bool {
    q.high_psn > q.expect_psn
}

/// Moves QP `q`'s send point back to `psn` (go-back-N): the fully sent segments that reach it
/// go back in front of the unsent ones, the first of them resumes at `psn`; returns the packets
/// that will go out again (0 when `psn` is not behind the send point).
pub fn rewind(q: &mut QpTx, psn: u32, mtu: u32, range: impl Fn(u32) -> (u32, u32)) -> u32 {
    let at = send_point(q, mtu, &range);
    if psn >= at {
        return 0;
    }
    while let Some(&b) = q.wire.back() {
        let (first, n) = range(b);
        if first + n <= psn {
            break;
        }
        q.wire.pop_back();
        q.segs.push_front(b);
    }
    let Some(&f) = q.segs.front() else {
        return 0;
    };
    let first = range(f).0;
    let from = psn.max(first);
    q.off = (from - first) * mtu;
    at - from
}

/// Segment `seg` of QP `q` was acknowledged: it leaves the QP (from the wire, or from the front
/// of the unsent ones after a timeout sent it again).
pub fn acked(q: &mut QpTx, seg: u32) {
    if q.wire.front() == Some(&seg) {
        q.wire.pop_front();
    } else if q.segs.front() == Some(&seg) {
        q.segs.pop_front();
        q.off = 0;
    } else {
        // Acknowledgements come in PSN order, so this is not reached; stay consistent anyway.
        q.wire.retain(|&s| s != seg);
        q.segs.retain(|&s| s != seg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dqplb_dcqcn::RpParams;

    #[test]
    fn rewind_puts_sent_segments_back_in_order() {
        let mut n = super::super::nic::Nics::new(1, &[0], &RpParams::firmware_defaults(), 400e3, 4);
        let q = &mut n.qps[0];
        // Segments 7, 8, 9 of 3 packets each: PSNs 0-2, 3-5, 6-8. 7 and 8 are on the wire,
        // 9 is one packet in.
        let range = |s: u32| ((s - 7) * 3, 3);
        q.wire.extend([7, 8]);
        q.segs.push_back(9);
        q.off = 100;
        q.next_psn = 9;
        assert_eq!(send_point(q, 100, range), 7);
        q.high_psn = 7;
        assert!(in_flight(q));
        assert_eq!(rewind(q, 7, 100, range), 0, "not behind the send point");
        // A NAK for PSN 4: segment 8 goes back, from its second packet; 9 restarts whole.
        assert_eq!(rewind(q, 4, 100, range), 3);
        assert_eq!(
            (q.wire.iter().copied().collect::<Vec<_>>(), q.off),
            (vec![7], 100)
        );
        assert_eq!(q.segs.iter().copied().collect::<Vec<_>>(), [8, 9]);
        // A timeout: back to the oldest unacknowledged, 7, from its start.
        assert_eq!(rewind(q, 0, 100, range), 4);
        assert_eq!(q.segs.iter().copied().collect::<Vec<_>>(), [7, 8, 9]);
        assert_eq!((q.wire.len(), q.off), (0, 0));
        q.expect_psn = 7;
        assert!(!in_flight(q), "the receiver took all 7");
    }

    #[test]
    fn timeout_exponent_as_the_ib_spec_has_it() {
        assert_eq!(ack_timeout_ps(0), 4_096_000);
        // NCCL's default 20: 4.096 us x 2^20 = 4.295 s.
        assert_eq!(ack_timeout_ps(NCCL_IB_TIMEOUT), 4_294_967_296_000);
    }

    #[test]
    fn tail_drop_at_the_occupancy_on_arrival() {
        // Two 100-byte packets fit a 200-byte buffer, a third at the same time does not; once
        // the first has left (at 10 + 50), one more fits.
        let mut b = Buffers::new(200, 1);
        assert!(b.admit(0, 10, 100, 0, 50, 0));
        assert!(b.admit(0, 10, 100, 100, 50, 0));
        assert!(!b.admit(0, 10, 100, 200, 50, 0));
        assert_eq!(b.drops[0], 1);
        assert!(!b.admit(0, 59, 100, 200, 50, 0), "the first leaves at 60");
        assert!(b.admit(0, 60, 100, 200, 50, 0));
        // Its departure queues behind the second's (110) and the cut-through floor.
        assert_eq!(b.last_out[0], 160);
        assert!(b.admit(0, 500, 100, 300, 50, 900));
        assert_eq!(b.last_out[0], 900);
        assert_eq!(b.drops[0], 2);
    }

    #[test]
    fn spec_checks() {
        let ok = LossSpec {
            buffer_bytes: 1 << 20,
            ..LossSpec::default()
        };
        assert!(ok.validate(4096, false).is_ok());
        assert!(LossSpec::default().validate(4096, true).is_ok());
        assert!(ok
            .validate(4096, true)
            .unwrap_err()
            .to_string()
            .contains("lossless"));
        assert!(LossSpec {
            buffer_bytes: 1000,
            ..ok
        }
        .validate(4096, false)
        .unwrap_err()
        .to_string()
        .contains("holds no 4096-byte packet"));
        assert!(LossSpec {
            ib_timeout: 32,
            ..ok
        }
        .validate(4096, false)
        .is_err());
    }
}
