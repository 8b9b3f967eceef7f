//! Path-failure isolation on verbs (protocol 6): the fence that keeps a failed data QP's late
//! writes out of buffers the receiver already handed back, its two frames on the bootstrap socket,
//! and the sender's bookkeeping between the failure and the resends.
//!
//! Why a fence: a write whose work request the sender saw flushed may still have landed (the
//! receiver acknowledged it, the sender's QP went to the error state before the ACK was
//! processed). If the receiver counted that sequence number and returned its message to NCCL, a
//! second copy of the bytes would overwrite the buffer's new contents. So the sender resends
//! nothing until the receiver has closed its end of the QP and said what it counted:
//!
//! 1. sender: a data QP reports an error completion (or a post fails). `Sender::path_failed`
//!    blocks it and moves its segments in flight to the engine's resend queue. The sender collects
//!    the immediate of every one of them from the completions (each work request's wr_id carries
//!    its immediate; after the first error every later request of that QP completes flushed), and
//!    posts nothing at all until the fence is answered (the engine serves resends first).
//! 2. sender -> receiver, bootstrap socket: FENCE (QP index, the immediates, the endpoint of a
//!    new QP created for that index, if any).
//! 3. receiver: moves its end of the QP to the error state (nothing sent through it can land any
//!    more), drains its receive CQ, answers for each immediate whether it already counted that
//!    sequence number (`Receiver::is_duplicate`), and how many receives the QP consumed from the
//!    SRQ since it was created. It connects a new QP of its own to the sender's new one and
//!    retires the old one: a completion that still shows up from it is dropped, uncounted.
//! 4. receiver -> sender: FENCED (the answers, the consumed count, its new endpoint).
//! 5. sender: connects its new QP (`path_replaced`), gives back the credit of writes the receiver
//!    never consumed, and resends: a segment the receiver has not counted goes out whole (its
//!    message is not complete, so its buffer is still posted); one it has counted goes out as a
//!    zero-length RDMA write without immediate (no byte is written, no receive consumed), which
//!    only completes it in order on its new QP for the engine.
//!
//! Frames are `kind u32 | body bytes u32 | body`, little-endian, on the bootstrap socket that
//! stays open for the comm's life (peer.rs).

use super::qp::QpEndpoint;
use crate::{NetError, NetResult};

/// FENCE, sender -> receiver.
pub(crate) const KIND_FENCE: u32 = u32::from_le_bytes(*b"FNCE");
/// FENCED, receiver -> sender.
pub(crate) const KIND_FENCED: u32 = u32::from_le_bytes(*b"FNCD");
/// Bytes of a frame header (kind, body length).
pub(crate) const FRAME_HEADER: usize = 8;
/// Largest body accepted (a FENCE of 65535 immediates and then some).
pub(crate) const MAX_BODY: usize = 8 + QpEndpoint::WIRE_LEN + 4 * 65_536;
/// Re-creations of one data QP index at most; after that a failed QP stays out of the comm.
pub(crate) const MAX_RECREATIONS: u32 = 3;
/// How long the sender waits for FENCED before the comm fails (the fence needs the receiver to
/// make progress: NCCL tests its receives while it has any posted).
pub(crate) const FENCE_TIMEOUT_NS: u64 = 30_000_000_000;

const FLAG_ENDPOINT: u8 = 1;

/// The sender's FENCE for data QP `qp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FenceMsg {
    pub qp: u16,
    /// Immediates of the segments that were in flight on the QP.
    pub imms: Vec<u32>,
    /// The sender's new QP for this index (None: no re-creation, the QP stays out).
    pub endpoint: Option<QpEndpoint>,
}

/// The receiver's FENCED answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FencedMsg {
    pub qp: u16,
    /// Per immediate of the FENCE, in its order: the receiver had already counted it.
    pub counted: Vec<bool>,
    /// Receives the old QP consumed from the SRQ since it was created (any status).
    pub consumed: u32,
    /// The receiver's new QP, connected to the sender's (None: none was made).
    pub endpoint: Option<QpEndpoint>,
}

fn header(kind: u32, body: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(FRAME_HEADER + body);
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&(body as u32).to_le_bytes());
    b
}

fn put_endpoint(b: &mut Vec<u8>, ep: &Option<QpEndpoint>) {
    match ep {
        Some(e) => b.extend_from_slice(&e.encode()),
        None => b.extend_from_slice(&[0u8; QpEndpoint::WIRE_LEN]),
    }
}

fn get_endpoint(flags: u8, b: &[u8], who: &str) -> NetResult<Option<QpEndpoint>> {
    if flags & FLAG_ENDPOINT == 0 {
        return Ok(None);
    }
    QpEndpoint::decode(b)
        .map(Some)
        .map_err(|e| NetError::remote(format!("{who}: {e}")))
}

impl FenceMsg {
    /// The whole frame, header included.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let body = 8 + QpEndpoint::WIRE_LEN + 4 * self.imms.len();
        let mut b = header(KIND_FENCE, body);
        b.extend_from_slice(&self.qp.to_le_bytes());
        b.extend_from_slice(&(self.imms.len() as u16).to_le_bytes());
        b.push(if self.endpoint.is_some() {
            FLAG_ENDPOINT
        } else {
            0
        });
        b.extend_from_slice(&[0u8; 3]);
        put_endpoint(&mut b, &self.endpoint);
        for i in &self.imms {
            b.extend_from_slice(&i.to_le_bytes());
        }
        b
    }

    /// Decodes a FENCE body (after the header).
    pub(crate) fn decode(b: &[u8], who: &str) -> NetResult<FenceMsg> {
        let fixed = 8 + QpEndpoint::WIRE_LEN;
        if b.len() < fixed {
            return Err(NetError::remote(format!(
                "{who}: FENCE of {} bytes",
                b.len()
            )));
        }
        let qp = u16::from_le_bytes([b[0], b[1]]);
        let n = usize::from(u16::from_le_bytes([b[2], b[3]]));
        if b.len() != fixed + 4 * n {
            return Err(NetError::remote(format!(
                "{who}: FENCE of {} bytes for {n} immediates",
                b.len()
            )));
        }
        let endpoint = get_endpoint(b[4], &b[8..fixed], who)?;
        let imms = b[fixed..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(FenceMsg { qp, imms, endpoint })
    }
}

impl FencedMsg {
    /// The whole frame, header included.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let bits = self.counted.len().div_ceil(8);
        let body = 12 + QpEndpoint::WIRE_LEN + bits;
        let mut b = header(KIND_FENCED, body);
        b.extend_from_slice(&self.qp.to_le_bytes());
        b.extend_from_slice(&(self.counted.len() as u16).to_le_bytes());
        b.push(if self.endpoint.is_some() {
            FLAG_ENDPOINT
        } else {
            0
        });
        b.extend_from_slice(&[0u8; 3]);
        b.extend_from_slice(&self.consumed.to_le_bytes());
        put_endpoint(&mut b, &self.endpoint);
        let mut map = vec![0u8; bits];
        for (k, c) in self.counted.iter().enumerate() {
            if *c {
                map[k / 8] |= 1 << (k % 8);
            }
        }
        b.extend_from_slice(&map);
        b
    }

    /// Decodes a FENCED body (after the header).
    pub(crate) fn decode(b: &[u8], who: &str) -> NetResult<FencedMsg> {
        let fixed = 12 + QpEndpoint::WIRE_LEN;
        if b.len() < fixed {
            return Err(NetError::remote(format!(
                "{who}: FENCED of {} bytes",
                b.len()
            )));
        }
        let qp = u16::from_le_bytes([b[0], b[1]]);
        let n = usize::from(u16::from_le_bytes([b[2], b[3]]));
        if b.len() != fixed + n.div_ceil(8) {
            return Err(NetError::remote(format!(
                "{who}: FENCED of {} bytes for {n} answers",
                b.len()
            )));
        }
        let consumed = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let endpoint = get_endpoint(b[4], &b[12..fixed], who)?;
        let map = &b[fixed..];
        let counted = (0..n).map(|k| map[k / 8] & (1 << (k % 8)) != 0).collect();
        Ok(FencedMsg {
            qp,
            counted,
            consumed,
            endpoint,
        })
    }
}

/// Splits the first complete frame off `buf`: Some((kind, body)) and the bytes it used.
pub(crate) fn split_frame(buf: &[u8], who: &str) -> NetResult<Option<(u32, Vec<u8>, usize)>> {
    if buf.len() < FRAME_HEADER {
        return Ok(None);
    }
    let kind = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if kind != KIND_FENCE && kind != KIND_FENCED {
        return Err(NetError::remote(format!(
            "{who}: bootstrap frame of unknown kind {kind:#010x}: mixed plugin versions?"
        )));
    }
    if len > MAX_BODY {
        return Err(NetError::remote(format!(
            "{who}: bootstrap frame of {len} bytes (at most {MAX_BODY})"
        )));
    }
    if buf.len() < FRAME_HEADER + len {
        return Ok(None);
    }
    Ok(Some((
        kind,
        buf[FRAME_HEADER..FRAME_HEADER + len].to_vec(),
        FRAME_HEADER + len,
    )))
}

/// Writes via QP `qp` that the receiver never consumed a receive for: the sender's running count
/// of WRITE_WITH_IMMs gives their credit back (wrapping counts).
pub(crate) fn unconsumed(posted_on_qp: u32, consumed: u32) -> u32 {
    posted_on_qp.wrapping_sub(consumed)
}

/// One failed QP between its failure and the receiver's answer.
#[derive(Debug, Clone)]
struct Pending {
    qp: usize,
    /// Segments the engine moved to its resend queue (their immediates are due).
    want: u32,
    imms: Vec<u32>,
    sent: bool,
    since: u64,
    /// A failed QP's fence holds every post until answered; a drained straggler's does not
    /// (nothing of it is in flight, the engine gives it nothing new).
    hold: bool,
}

/// The sender's fences: which failed QPs still owe immediates or an answer, and the verdicts for
/// the resends once every answer is in. No resend may go out while `holding()`.
#[derive(Debug, Default)]
pub(crate) struct SendFences {
    pending: Vec<Pending>,
    /// (immediate, receiver counted it) of resends the engine will hand out next.
    verdicts: Vec<(u32, bool)>,
}

impl SendFences {
    /// QP `qp` failed with `want` segments in flight (moved to the engine's resend queue).
    pub(crate) fn start(&mut self, qp: usize, want: u32, now: u64) {
        self.pending.push(Pending {
            qp,
            want,
            imms: Vec::with_capacity(want as usize),
            sent: false,
            since: now,
            hold: true,
        });
    }

    /// Drained straggler `qp` (nothing in flight) is to get a new QP pair: a fence with no
    /// immediates that does not hold the other QPs' posts.
    pub(crate) fn start_rehash(&mut self, qp: usize, now: u64) {
        self.pending.push(Pending {
            qp,
            want: 0,
            imms: Vec::new(),
            sent: false,
            since: now,
            hold: false,
        });
    }

    /// Whether `qp`'s pending fence is a straggler's re-hash.
    pub(crate) fn is_rehash(&self, qp: usize) -> bool {
        self.pending.iter().any(|p| p.qp == qp && !p.hold)
    }

    /// Whether any fence is waiting to be sent or answered.
    pub(crate) fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether `qp` failed and its fence is not answered yet.
    pub(crate) fn is_pending(&self, qp: usize) -> bool {
        self.pending.iter().any(|p| p.qp == qp)
    }

    /// The immediate of a segment of failed QP `qp` (from an error completion's wr_id, or a post
    /// that failed). False when no fence of `qp` expects one any more (a protocol slip: the
    /// caller reports it).
    pub(crate) fn collect(&mut self, qp: usize, imm: u32) -> bool {
        match self
            .pending
            .iter_mut()
            .find(|p| p.qp == qp && !p.sent && p.imms.len() < p.want as usize)
        {
            Some(p) => {
                p.imms.push(imm);
                true
            }
            None => false,
        }
    }

    /// A fence whose immediates are all in and that is not sent yet: (qp, immediates). The
    /// caller sends it and calls `sent`.
    pub(crate) fn ready(&self) -> Option<(usize, &[u32])> {
        self.pending
            .iter()
            .find(|p| !p.sent && p.imms.len() == p.want as usize)
            .map(|p| (p.qp, p.imms.as_slice()))
    }

    pub(crate) fn sent(&mut self, qp: usize) {
        if let Some(p) = self.pending.iter_mut().find(|p| p.qp == qp) {
            p.sent = true;
        }
    }

    /// The receiver's answer for `qp`: its verdicts join the resends'. Err when no sent fence of
    /// that QP waits for it or the answer does not match the immediates sent.
    pub(crate) fn answered(&mut self, qp: usize, counted: &[bool]) -> Result<(), String> {
        let Some(i) = self.pending.iter().position(|p| p.qp == qp && p.sent) else {
            return Err(format!("FENCED for data QP {qp}, which has no fence sent"));
        };
        let p = self.pending.swap_remove(i);
        if counted.len() != p.imms.len() {
            return Err(format!(
                "FENCED for data QP {qp} answers {} segments, the fence asked about {}",
                counted.len(),
                p.imms.len()
            ));
        }
        self.verdicts
            .extend(p.imms.iter().copied().zip(counted.iter().copied()));
        Ok(())
    }

    /// Nothing may be posted: a failed QP's segments wait for their fence.
    pub(crate) fn holding(&self) -> bool {
        self.pending.iter().any(|p| p.hold)
    }

    /// Resends whose verdict is known and that the engine has not handed out yet.
    pub(crate) fn resends_left(&self) -> usize {
        self.verdicts.len()
    }

    /// The verdict for a resend of `imm` (true: the receiver counted it, send no bytes), taken;
    /// None when `imm` is not a cleared resend.
    pub(crate) fn take_verdict(&mut self, imm: u32) -> Option<bool> {
        let i = self.verdicts.iter().position(|v| v.0 == imm)?;
        Some(self.verdicts.remove(i).1)
    }

    /// The failed QP whose fence has waited longest if that is `timeout` or more.
    pub(crate) fn overdue(&self, now: u64, timeout: u64) -> Option<usize> {
        self.pending
            .iter()
            .filter(|p| now.saturating_sub(p.since) >= timeout)
            .min_by_key(|p| p.since)
            .map(|p| p.qp)
    }

    /// One-line state for diagnostics.
    pub(crate) fn describe(&self) -> String {
        let p: Vec<String> = self
            .pending
            .iter()
            .map(|p| {
                format!(
                    "QP {}: {}/{} immediates{}",
                    p.qp,
                    p.imms.len(),
                    p.want,
                    if p.sent { ", asked" } else { "" }
                )
            })
            .collect();
        format!(
            "fences [{}], {} resends cleared",
            p.join("; "),
            self.verdicts.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(qpn: u32) -> QpEndpoint {
        QpEndpoint {
            qpn,
            psn: 77,
            gid: [3; 16],
            lid: 0,
            mtu: 1024,
        }
    }

    fn body(frame: &[u8]) -> (u32, Vec<u8>) {
        let (k, b, used) = split_frame(frame, "t").unwrap().unwrap();
        assert_eq!(used, frame.len());
        (k, b)
    }

    #[test]
    fn frames_round_trip() {
        for endpoint in [None, Some(ep(0x1234))] {
            let f = FenceMsg {
                qp: 2,
                imms: vec![5, 0x8000_0006, 7],
                endpoint,
            };
            let (k, b) = body(&f.encode());
            assert_eq!(k, KIND_FENCE);
            assert_eq!(FenceMsg::decode(&b, "t").unwrap(), f);
            for n in [0, 1, 8, 9, 17] {
                let a = FencedMsg {
                    qp: 3,
                    counted: (0..n).map(|i| i % 3 == 1).collect(),
                    consumed: 0xffff_fff0,
                    endpoint,
                };
                let (k, b) = body(&a.encode());
                assert_eq!(k, KIND_FENCED);
                assert_eq!(FencedMsg::decode(&b, "t").unwrap(), a);
            }
        }
    }

    #[test]
    fn frames_reject_garbage() {
        let f = FenceMsg {
            qp: 1,
            imms: vec![1, 2],
            endpoint: Some(ep(9)),
        }
        .encode();
        // incomplete frames wait, unknown kinds and oversized bodies fail
        assert!(split_frame(&f[..f.len() - 1], "t").unwrap().is_none());
        assert!(split_frame(&f[..5], "t").unwrap().is_none());
        let mut bad = f.clone();
        bad[0] ^= 0xff;
        assert!(split_frame(&bad, "t")
            .unwrap_err()
            .msg
            .contains("unknown kind"));
        let mut big = f.clone();
        big[4..8].copy_from_slice(&(MAX_BODY as u32 + 1).to_le_bytes());
        assert!(split_frame(&big, "t").is_err());
        // a body whose count disagrees with its length
        let (_, mut b) = body(&f);
        b.pop();
        assert!(FenceMsg::decode(&b, "t").is_err());
        assert!(FencedMsg::decode(&[0u8; 10], "t").is_err());
        // an endpoint flagged present must be a valid one
        let (_, mut b) = body(&f);
        b[8 + 26] = 0; // MTU 0
        b[8 + 27] = 0;
        assert!(FenceMsg::decode(&b, "t").is_err());
        // two frames back to back split one at a time
        let mut two = f.clone();
        two.extend_from_slice(&f);
        let (_, _, used) = split_frame(&two, "t").unwrap().unwrap();
        assert_eq!(used, f.len());
    }

    #[test]
    fn a_fence_holds_resends_until_answered() {
        let mut s = SendFences::default();
        assert!(!s.holding());
        s.start(2, 3, 100);
        assert!(s.holding() && s.is_pending(2) && !s.is_pending(1));
        assert!(s.ready().is_none(), "immediates still due");
        assert!(s.collect(2, 10));
        assert!(s.collect(2, 11));
        assert!(!s.collect(1, 99), "QP 1 did not fail");
        assert!(s.ready().is_none());
        assert!(s.collect(2, 0x8000_000c));
        assert!(!s.collect(2, 13), "QP 2 moved only 3 segments");
        assert_eq!(s.ready(), Some((2, &[10, 11, 0x8000_000c][..])));
        // an answer before the fence went out is refused
        assert!(s.answered(2, &[true, false, false]).is_err());
        s.sent(2);
        assert!(s.ready().is_none());
        assert!(s.holding(), "sent, not answered");
        assert!(s.answered(2, &[true, false]).is_err(), "wrong count");
        // the failed answer consumed the fence: start again and answer properly
        s.start(2, 3, 200);
        for i in [10, 11, 0x8000_000c] {
            assert!(s.collect(2, i));
        }
        s.sent(2);
        s.answered(2, &[true, false, false]).unwrap();
        assert!(!s.holding());
        assert_eq!(s.resends_left(), 3);
        // verdicts are found whatever order the engine hands the resends out in
        assert_eq!(s.take_verdict(0x8000_000c), Some(false));
        assert_eq!(s.take_verdict(10), Some(true));
        assert_eq!(s.take_verdict(10), None, "taken once");
        assert_eq!(s.take_verdict(11), Some(false));
        assert_eq!(s.resends_left(), 0);
    }

    #[test]
    fn two_failed_qps_hold_until_both_answer() {
        let mut s = SendFences::default();
        s.start(0, 1, 0);
        s.start(3, 0, 50); // failed with nothing in flight: ready at once
        assert_eq!(s.ready(), Some((3, &[][..])));
        s.sent(3);
        assert!(s.collect(0, 7));
        assert_eq!(s.ready(), Some((0, &[7][..])));
        s.sent(0);
        assert_eq!(s.overdue(40, 30), Some(0));
        assert_eq!(s.overdue(60, 30), Some(0), "the oldest first");
        assert_eq!(s.overdue(20, 30), None);
        s.answered(3, &[]).unwrap();
        assert!(s.holding(), "QP 0 still unanswered");
        s.answered(0, &[false]).unwrap();
        assert!(!s.holding());
        assert_eq!(s.take_verdict(7), Some(false));
        assert!(s.describe().contains("0 resends cleared"));
    }

    #[test]
    fn a_rehash_fence_asks_nothing_and_holds_nothing() {
        let mut f = SendFences::default();
        f.start_rehash(1, 10);
        assert!(f.any_pending() && f.is_rehash(1) && !f.holding());
        assert_eq!(f.ready(), Some((1, &[][..])));
        f.sent(1);
        assert_eq!(f.ready(), None);
        // A failure meanwhile holds, and is not a re-hash.
        f.start(3, 1, 20);
        assert!(f.holding() && !f.is_rehash(3));
        f.answered(1, &[]).unwrap();
        assert!(!f.is_rehash(1) && f.holding());
        assert_eq!(f.resends_left(), 0);
    }

    #[test]
    fn unconsumed_writes_survive_the_wrap() {
        assert_eq!(unconsumed(10, 7), 3);
        assert_eq!(unconsumed(2, u32::MAX - 1), 4);
        assert_eq!(unconsumed(5, 5), 0);
    }
}
