//! P mode's sender NICs: every data QP's packets paced at the rate of its own DCQCN reaction
//! point (`dcqcn::ReactionPoint`), and one transmitter per NIC serving the QPs the pacer allows.

// The transmitter of host h is free at `free_at[h]`; when it is, it sends one MTU of the QP
// (among h's QPs with data) whose pacer opens earliest (`next_ok`), ties in round-robin order
// from the QP after the last one served. After a packet of L bytes at rate R, the QP's pacer
// opens L / R after the packet started (a rate limiter per QP, as the NIC's is), re-evaluated
// at each of the transmitter's decisions, so a rate raised by DCQCN's timers applies from the
// next decision. A NIC whose QPs with data are all paced waits for the earliest opening or the
// earliest increase timer among them, whichever is first: a QP cut to the minimum rate (1 Mb/s:
// 33 ms per 4 KiB packet) resumes at its first raise, as a hardware rate limiter re-reads its
// rate, rather than at the opening its old rate set. The NIC wakes through a timer heap that
// holds at most one live entry per host (`wake_at` drops the stale).

use std::collections::VecDeque;

use dqplb_dcqcn::{ReactionPoint, RpParams};

use super::topology::Ps;

/// One data QP's send side (and its receiver's notification-point state).
#[derive(Debug, Clone)]
pub struct QpTx {
    /// Segments handed to this QP by the engine and not yet fully on the wire (head first).
    pub segs: VecDeque<u32>,
    /// Bytes of the head segment already sent.
    pub off: u32,
    /// Earliest start of this QP's next packet (its pacer).
    pub next_ok: Ps,
    last_start: Ps,
    last_len: u32,
    pub rp: ReactionPoint,
    /// Payload bytes put on the wire.
    pub bytes: u64,
    /// CNPs that reached this QP's sender.
    pub cnps: u64,
    /// CE-marked packets that reached this QP's receiver.
    pub marked: u64,
    /// Lossy runs: this QP's packets tail-dropped at a switch, and packets it sent again.
    pub drops: u64,
    pub resent: u64,
    /// When the receiver NIC last sent a CNP for this QP.
    pub np_last_cnp: Option<Ps>,
    /// Go-back-N (loss.rs; lossy runs only): the PSN the next segment handed over starts at,
    /// the segments fully sent and not acknowledged (oldest first), the receiver's next
    /// expected PSN and whether it NAKed the gap before it, the ACK timer's state and the last
    /// acknowledgement (or NAK, or first send after an idle spell).
    pub next_psn: u32,
    /// One past the highest PSN sent: a packet below it is a resend.
    pub high_psn: u32,
    pub wire: VecDeque<u32>,
    pub expect_psn: u32,
    pub nak_sent: bool,
    pub timer_armed: bool,
    pub progress_at: Ps,
}

impl QpTx {
    /// Picoseconds the pacer holds this QP after a packet of `len` bytes at its current rate.
    #[inline]
    pub(crate) fn gap_ps(&self, len: u32) -> Ps {
        let mbps = self.rp.rate_mbps().max(1e-3);
        (f64::from(len) * 8e6 / mbps).ceil() as Ps
    }

    /// Records a packet of `len` bytes started at `now`: DCQCN's byte counter, then the pacer.
    #[inline]
    pub fn sent(&mut self, now: Ps, len: u32) {
        self.rp.on_bytes_sent(now / 1000, u64::from(len));
        self.last_start = now;
        self.last_len = len;
        self.next_ok = now + self.gap_ps(len);
        self.bytes += u64::from(len);
    }

    /// Applies the reaction point's timers due by `now` (they only raise the rate) and moves the
    /// pacer's next opening to the current rate: a QP held by a long gap at a low rate does not
    /// wait out the old gap after a recovery step.
    #[inline]
    pub fn refresh(&mut self, now: Ps) {
        self.rp.advance_to(now / 1000);
        if self.last_len > 0 {
            self.next_ok = self.last_start + self.gap_ps(self.last_len);
        }
    }

    /// A CNP reached the sender at `now`: the reaction point cuts (or ignores it), and the
    /// pacer's next opening moves to the new rate.
    pub fn cnp(&mut self, now: Ps) {
        self.cnps += 1;
        self.rp.on_cnp(now / 1000);
        if self.last_len > 0 {
            self.next_ok = self.last_start + self.gap_ps(self.last_len);
        }
    }
}

/// What a NIC's transmitter can do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Nothing to send.
    Idle,
    /// Every QP with data is paced: wake at this time.
    Wait(Ps),
    /// Send from this QP (global index).
    Send(u32),
}

/// Every host's NIC on one rail.
#[derive(Debug)]
pub(crate) struct Nics {
    pub qps: Vec<QpTx>,
    /// Host h's QPs are `list[start[h] .. start[h + 1]]` (global QP indices).
    start: Vec<u32>,
    list: Vec<u32>,
    /// Position in h's list after the QP served last (round-robin tie break).
    rr: Vec<u32>,
    pub free_at: Vec<Ps>,
    /// The pending wake of each host's transmitter (`Ps::MAX`: none).
    pub wake_at: Vec<Ps>,
}

impl Nics {
    /// `owner[g]`: the sending host of global QP g; every QP starts at `line_mbps`.
    pub(crate) fn new(
        hosts: usize,
        owner: &[u32],
        rp: &RpParams,
        line_mbps: f64,
        depth: usize,
    ) -> Nics {
        let mut count = vec![0u32; hosts + 1];
        for &h in owner {
            count[h as usize + 1] += 1;
        }
        for h in 0..hosts {
            count[h + 1] += count[h];
        }
        let start = count.clone();
        let mut fill = count;
        let mut list = vec![0u32; owner.len()];
        for (g, &h) in owner.iter().enumerate() {
            list[fill[h as usize] as usize] = g as u32;
            fill[h as usize] += 1;
        }
        let qps = owner
            .iter()
            .map(|_| QpTx {
                segs: VecDeque::with_capacity(depth),
                off: 0,
                next_ok: 0,
                last_start: 0,
                last_len: 0,
                rp: ReactionPoint::new(rp.clone(), line_mbps),
                bytes: 0,
                cnps: 0,
                marked: 0,
                np_last_cnp: None,
                next_psn: 0,
                high_psn: 0,
                drops: 0,
                resent: 0,
                wire: VecDeque::new(),
                expect_psn: 0,
                nak_sent: false,
                timer_armed: false,
                progress_at: 0,
            })
            .collect();
        Nics {
            qps,
            start,
            list,
            rr: vec![0; hosts],
            free_at: vec![0; hosts],
            wake_at: vec![Ps::MAX; hosts],
        }
    }

    /// Asks for host h's transmitter to run at `t`; true when the caller must add a timer
    /// (no earlier or equal wake is pending).
    #[inline]
    pub(crate) fn want_wake(&mut self, h: u32, t: Ps) -> bool {
        let w = &mut self.wake_at[h as usize];
        if t < *w {
            *w = t;
            true
        } else {
            false
        }
    }

    /// The QP host h's transmitter serves at `now` (free by then), or when to look again; a
    /// paced QP's opening is first brought to its current rate (`QpTx::refresh`).
    pub(crate) fn pick(&mut self, h: u32, now: Ps) -> Pick {
        let (a, b) = (
            self.start[h as usize] as usize,
            self.start[h as usize + 1] as usize,
        );
        let n = b - a;
        if n == 0 {
            return Pick::Idle;
        }
        let first = self.rr[h as usize] as usize % n;
        let mut best: Option<(Ps, usize)> = None;
        // The earliest increase timer of a paced QP with data: its rate may rise then.
        let mut raise = Ps::MAX;
        for i in 0..n {
            let pos = (first + i) % n;
            let q = &mut self.qps[self.list[a + pos] as usize];
            if q.segs.is_empty() {
                continue;
            }
            if q.next_ok > now {
                q.refresh(now);
                if let Some(ns) = q.rp.next_increase_ns() {
                    raise = raise.min(ns.saturating_mul(1000));
                }
            }
            if best.is_none_or(|(t, _)| q.next_ok < t) {
                best = Some((q.next_ok, pos));
            }
        }
        match best {
            None => Pick::Idle,
            Some((t, _)) if t > now => Pick::Wait(t.min(raise.max(now + 1))),
            Some((_, pos)) => {
                self.rr[h as usize] = (pos + 1) as u32;
                Pick::Send(self.list[a + pos])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nics() -> Nics {
        // Host 0 owns QPs 0 and 2, host 1 owns QP 1.
        Nics::new(2, &[0, 1, 0], &RpParams::firmware_defaults(), 400_000.0, 4)
    }

    #[test]
    fn round_robin_among_ready_qps_and_pacing_waits() {
        let mut n = nics();
        assert_eq!(n.pick(0, 0), Pick::Idle);
        n.qps[0].segs.push_back(7);
        n.qps[2].segs.push_back(8);
        assert_eq!(n.pick(0, 0), Pick::Send(0));
        // At line rate (400 Gb/s = 20 ps per byte) a 4096-byte packet holds the pacer 81920 ps.
        n.qps[0].sent(0, 4096);
        assert_eq!(n.qps[0].next_ok, 81_920);
        assert_eq!(n.pick(0, 81_920), Pick::Send(2));
        n.qps[2].sent(81_920, 4096);
        assert_eq!(n.pick(0, 81_920), Pick::Send(0));
        n.qps[0].sent(81_920, 4096);
        assert_eq!(n.pick(0, 100_000), Pick::Wait(163_840));
        assert_eq!(n.pick(1, 0), Pick::Idle);
    }

    #[test]
    fn a_cnp_cuts_the_rate_and_stretches_the_gap() {
        let mut n = nics();
        let q = &mut n.qps[1];
        q.segs.push_back(1);
        q.sent(0, 4096);
        q.cnp(10_000);
        // Firmware defaults: alpha 1023/1024 and gd 11, so the cut is by 1023/2048 (above the
        // 50% floor); the gap of the 4096-byte packet sent at 0 follows the new rate.
        let want = 400_000.0 * (1.0 - 1023.0 / 2048.0);
        let r = q.rp.rate_mbps();
        assert!((r - want).abs() < 1e-6, "{r}");
        assert_eq!(q.next_ok, (4096.0 * 8e6 / want).ceil() as Ps);
        assert_eq!(q.cnps, 1);
    }

    #[test]
    fn a_qp_at_the_minimum_rate_wakes_its_nic_at_the_increase_timer() {
        let mut n = nics();
        n.qps[1].segs.push_back(1);
        n.qps[1].sent(0, 4096);
        // A CNP every rate-reduce period (4 us) halves the rate 30 times: 1 Mb/s, the floor.
        let mut t = 0;
        for _ in 0..30 {
            t += 4_000_000;
            n.qps[1].cnp(t);
        }
        let q = &n.qps[1];
        assert_eq!(q.rp.rate_mbps(), 1.0);
        // At 1 Mb/s the next 4096-byte packet opens 32.768 ms after the last one started ...
        assert_eq!(q.next_ok, 32_768_000_000);
        // ... but the NIC looks again at the increase timer, 300 us after the last cut.
        let raise = q.rp.next_increase_ns().unwrap() * 1000;
        assert_eq!(raise, t + 300_000_000);
        assert_eq!(n.pick(1, t + 1), Pick::Wait(raise));
        // There the rate has risen and the opening follows it.
        let p = n.pick(1, raise);
        let q = &n.qps[1];
        assert!(q.rp.rate_mbps() > 1.0, "{}", q.rp.rate_mbps());
        assert!(q.next_ok < 32_768_000_000, "{}", q.next_ok);
        match p {
            Pick::Send(1) => assert!(q.next_ok <= raise),
            Pick::Wait(w) => assert_eq!(w, q.next_ok.min(raise + 300_000_000)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wake_requests_keep_the_earliest() {
        let mut n = nics();
        assert!(n.want_wake(0, 100));
        assert!(!n.want_wake(0, 200));
        assert!(n.want_wake(0, 50));
        assert_eq!(n.wake_at[0], 50);
    }
}
