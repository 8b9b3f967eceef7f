//! Fixed-size little-endian frames of the TCP transport: stream hello, the control stream's frames
//! (buffer announcements, acknowledgements) and the segment header (data stream, payload follows).

use crate::slots::MAX_RECVS;
use crate::{NetError, NetResult};
use dqplb_engine::PolicyKind;

pub const HELLO_BYTES: usize = 64;
pub const ANNOUNCE_BYTES: usize = 24;
pub const SEG_HEADER_BYTES: usize = 24;

const HELLO_MAGIC: [u8; 4] = *b"DQPS";
/// Version 2 of the announce frame (grouped receives); version 1 ("1NNA") had no index/count.
const ANNOUNCE_KIND: u32 = 0x414e_4e32; // "2NNA"
/// Control frame (receiver to sender, once, first): the port of the receiver's re-path
/// listener, where the sender opens replacement data streams (protocol 4).
const REPATH_KIND: u32 = 0x5041_5452; // "RTAP"
/// Control frame (listener to connector, on a control stream whose hello it refused, then
/// close): why. A peer that predates it reads an unknown frame kind and says so.
const REFUSED_KIND: u32 = 0x5346_4552; // "REFS"
/// Control frame (receiver to sender): the oldest `count` segments written on one data stream
/// landed (the sender's "CQEs"). Acks ride the control stream so that one write carries them
/// with the announcements of the same progress pass.
const ACKS_KIND: u32 = 0x534b_4341; // "ACKS"
const SEG_MARK: u32 = 0x5345_4721; // "!GES"

/// Connection parameters the sender chose for this connection (from its class plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnParams {
    pub qps: u16,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub max_messages: u32,
    pub policy: PolicyKind,
    pub fabric_id: u32,
}

impl ConnParams {
    /// Bounds a receiver accepts from the network; everything else is a protocol error.
    pub fn validate(&self) -> NetResult<()> {
        let bad = |what: String| {
            Err(NetError::remote(format!(
                "peer sent bad connection parameters: {what}"
            )))
        };
        if self.qps == 0 || self.qps > 128 {
            return bad(format!("qps {} (accepted 1..=128)", self.qps));
        }
        if self.outstanding == 0 || self.outstanding > 256 {
            return bad(format!(
                "outstanding {} (accepted 1..=256)",
                self.outstanding
            ));
        }
        if self.segment_bytes < 128
            || !self.segment_bytes.is_multiple_of(128)
            || self.segment_bytes > (1 << 30)
        {
            return bad(format!(
                "segment {} bytes (accepted multiples of 128 up to 1 GiB)",
                self.segment_bytes
            ));
        }
        if self.max_messages < 1 || self.max_messages > 4096 {
            return bad(format!(
                "max messages {} (accepted 1..=4096)",
                self.max_messages
            ));
        }
        Ok(())
    }
}

fn policy_code(p: PolicyKind) -> u8 {
    match p {
        PolicyKind::Dqplb => 0,
        PolicyKind::StaticSplit => 1,
        PolicyKind::RoundRobinMessage => 2,
        PolicyKind::SingleQp => 3,
        PolicyKind::DqplbLed => 4,
    }
}

fn policy_from(code: u8) -> NetResult<PolicyKind> {
    Ok(match code {
        0 => PolicyKind::Dqplb,
        1 => PolicyKind::StaticSplit,
        2 => PolicyKind::RoundRobinMessage,
        3 => PolicyKind::SingleQp,
        4 => PolicyKind::DqplbLed,
        c => {
            return Err(NetError::remote(format!(
                "peer sent unknown policy code {c} (accepted 0..=4)"
            )))
        }
    })
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// First bytes on every stream of a connection, sent by the connecting (sending) side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub stream: u16,
    /// Which socket of this stream (0: the first; a replacement gets the sender's next number);
    /// acknowledgements name it, so those of a replaced socket are told apart.
    pub gen: u16,
    pub conn_id: u64,
    pub secret: [u8; 16],
    pub params: ConnParams,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..4].copy_from_slice(&HELLO_MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.stream.to_le_bytes());
        b[8..10].copy_from_slice(&self.params.qps.to_le_bytes());
        b[10..12].copy_from_slice(&self.gen.to_le_bytes());
        b[12..16].copy_from_slice(&self.params.outstanding.to_le_bytes());
        b[16..20].copy_from_slice(&self.params.segment_bytes.to_le_bytes());
        b[20..24].copy_from_slice(&self.params.max_messages.to_le_bytes());
        b[24..28].copy_from_slice(&self.params.fabric_id.to_le_bytes());
        b[28] = policy_code(self.params.policy);
        b[32..40].copy_from_slice(&self.conn_id.to_le_bytes());
        b[40..56].copy_from_slice(&self.secret);
        b
    }

    /// Parses a hello; magic and policy are checked here, version/secret by the listener.
    pub fn decode(b: &[u8; HELLO_BYTES]) -> NetResult<Hello> {
        if b[0..4] != HELLO_MAGIC {
            return Err(NetError::remote(format!(
                "stream opened with bytes {:02x?}, not the DQPLB hello magic \"DQPS\"",
                &b[0..4]
            )));
        }
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&b[40..56]);
        Ok(Hello {
            version: u16_at(b, 4),
            stream: u16_at(b, 6),
            gen: u16_at(b, 10),
            conn_id: u64_at(b, 32),
            secret,
            params: ConnParams {
                qps: u16_at(b, 8),
                outstanding: u32_at(b, 12),
                segment_bytes: u32_at(b, 16),
                max_messages: u32_at(b, 20),
                fabric_id: u32_at(b, 24),
                policy: policy_from(b[28])?,
            },
        })
    }
}

/// Receiver -> sender on the control stream: one buffer of a posted (grouped) receive, NCCL's
/// clear-to-send. A group of `count` buffers is announced as `count` consecutive frames with the
/// same `slot` and `index` 0, 1, ..; segments for buffer `index` name `slot * MAX_RECVS + index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announce {
    pub slot: u32,
    pub tag: i32,
    /// Position of this buffer in its group (0-based).
    pub index: u8,
    /// Buffers in the group (1..=MAX_RECVS).
    pub count: u8,
    pub capacity: u64,
}

/// The re-path frame: `port` of the receiver's listener for replacement data streams.
pub(crate) fn encode_repath(port: u16) -> [u8; ANNOUNCE_BYTES] {
    let mut b = [0u8; ANNOUNCE_BYTES];
    b[0..4].copy_from_slice(&REPATH_KIND.to_le_bytes());
    b[4..6].copy_from_slice(&port.to_le_bytes());
    b
}

/// Why a listener refused a control stream's hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Secret,
    Version,
    Params,
    /// A reason code this side does not know.
    Other(u8),
}

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::Secret => 1,
            Refusal::Version => 2,
            Refusal::Params => 3,
            Refusal::Other(c) => c,
        }
    }

    fn from_code(c: u8) -> Refusal {
        match c {
            1 => Refusal::Secret,
            2 => Refusal::Version,
            3 => Refusal::Params,
            c => Refusal::Other(c),
        }
    }

    /// What the connector's error says.
    pub fn describe(self) -> String {
        match self {
            Refusal::Secret => "secret mismatch (the listen handle is stale, or belongs to another listener that took over its address)".to_string(),
            Refusal::Version => "protocol version mismatch (mixed plugin versions across ranks)".to_string(),
            Refusal::Params => "connection parameters out of the receiver's bounds".to_string(),
            Refusal::Other(c) => format!("reason code {c}"),
        }
    }
}

/// The refusal frame: `why` the listener refused the hello on this control stream.
pub(crate) fn encode_refusal(why: Refusal) -> [u8; ANNOUNCE_BYTES] {
    let mut b = [0u8; ANNOUNCE_BYTES];
    b[0..4].copy_from_slice(&REFUSED_KIND.to_le_bytes());
    b[4] = why.code();
    b
}

/// A frame of the control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Announce(Announce),
    Repath { port: u16 },
    Refused(Refusal),
    Acks(Acks),
}

/// Receiver -> sender on the control stream: the oldest `count` segments the sender finished
/// writing on data stream `stream` (0-based), socket `gen`, arrived; the last of them is `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acks {
    pub stream: u16,
    pub gen: u16,
    pub count: u16,
    pub last: u32,
}

impl Acks {
    pub fn encode(&self) -> [u8; ANNOUNCE_BYTES] {
        let mut b = [0u8; ANNOUNCE_BYTES];
        b[0..4].copy_from_slice(&ACKS_KIND.to_le_bytes());
        b[4..6].copy_from_slice(&self.stream.to_le_bytes());
        b[6..8].copy_from_slice(&self.gen.to_le_bytes());
        b[8..10].copy_from_slice(&self.count.to_le_bytes());
        b[12..16].copy_from_slice(&self.last.to_le_bytes());
        b
    }

    fn decode(b: &[u8; ANNOUNCE_BYTES]) -> NetResult<Acks> {
        if b[10..12] != [0, 0] || b[16..].iter().any(|&x| x != 0) {
            return Err(NetError::remote(
                "acknowledgement frame with non-zero reserved bytes: stream out of sync"
                    .to_string(),
            ));
        }
        let a = Acks {
            stream: u16_at(b, 4),
            gen: u16_at(b, 6),
            count: u16_at(b, 8),
            last: u32_at(b, 12),
        };
        if a.count == 0 {
            return Err(NetError::remote(format!(
                "acknowledgement frame for data stream {} acknowledging 0 segments",
                a.stream
            )));
        }
        Ok(a)
    }
}

impl Control {
    pub fn decode(b: &[u8; ANNOUNCE_BYTES]) -> NetResult<Control> {
        if u32_at(b, 0) == REFUSED_KIND {
            return Ok(Control::Refused(Refusal::from_code(b[4])));
        }
        if u32_at(b, 0) == REPATH_KIND {
            if b[6..].iter().any(|&x| x != 0) {
                return Err(NetError::remote(
                    "re-path frame with non-zero reserved bytes: stream out of sync".to_string(),
                ));
            }
            let port = u16::from_le_bytes([b[4], b[5]]);
            if port == 0 {
                return Err(NetError::remote("re-path frame naming port 0".to_string()));
            }
            return Ok(Control::Repath { port });
        }
        if u32_at(b, 0) == ACKS_KIND {
            return Acks::decode(b).map(Control::Acks);
        }
        Announce::decode(b).map(Control::Announce)
    }
}

impl Announce {
    pub fn encode(&self) -> [u8; ANNOUNCE_BYTES] {
        let mut b = [0u8; ANNOUNCE_BYTES];
        b[0..4].copy_from_slice(&ANNOUNCE_KIND.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12] = self.index;
        b[13] = self.count;
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b
    }

    /// Parses a frame; kind, group shape (1 <= count <= MAX_RECVS, index < count) and the
    /// reserved bytes are checked here, the order of frames within a group by the sender.
    pub fn decode(b: &[u8; ANNOUNCE_BYTES]) -> NetResult<Announce> {
        let kind = u32_at(b, 0);
        if kind != ANNOUNCE_KIND {
            return Err(NetError::remote(format!(
                "control stream frame kind {kind:#x}, expected {ANNOUNCE_KIND:#x}: stream out of sync or a peer with another protocol version"
            )));
        }
        let a = Announce {
            slot: u32_at(b, 4),
            tag: u32_at(b, 8) as i32,
            index: b[12],
            count: b[13],
            capacity: u64_at(b, 16),
        };
        if a.count == 0 || usize::from(a.count) > MAX_RECVS || a.index >= a.count {
            return Err(NetError::remote(format!(
                "announcement of buffer {} of a {}-buffer receive group (accepted groups of 1..={MAX_RECVS})",
                a.index, a.count
            )));
        }
        if b[14..16] != [0, 0] {
            return Err(NetError::remote(
                "announcement with non-zero reserved bytes: stream out of sync".to_string(),
            ));
        }
        Ok(a)
    }

    /// The id segments use for this buffer (its group slot and position).
    pub fn buffer_id(&self) -> u32 {
        buffer_id(self.slot, self.index)
    }
}

/// Id of buffer `index` of receive group `slot` on the wire (segment headers).
pub fn buffer_id(slot: u32, index: u8) -> u32 {
    slot.wrapping_mul(MAX_RECVS as u32)
        .wrapping_add(u32::from(index))
}

/// Sender -> receiver on a data stream; `len` payload bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegHeader {
    pub imm: u32,
    pub slot: u32,
    pub offset: u64,
    pub len: u32,
}

impl SegHeader {
    pub fn encode(&self) -> [u8; SEG_HEADER_BYTES] {
        let mut b = [0u8; SEG_HEADER_BYTES];
        b[0..4].copy_from_slice(&self.imm.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&SEG_MARK.to_le_bytes());
        b
    }
    pub fn decode(b: &[u8; SEG_HEADER_BYTES]) -> NetResult<SegHeader> {
        if u32_at(b, 20) != SEG_MARK {
            return Err(NetError::remote(format!(
                "segment header mark {:#x}, expected {SEG_MARK:#x}: data stream out of sync",
                u32_at(b, 20)
            )));
        }
        Ok(SegHeader {
            imm: u32_at(b, 0),
            slot: u32_at(b, 4),
            offset: u64_at(b, 8),
            len: u32_at(b, 16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ConnParams {
        ConnParams {
            qps: 4,
            outstanding: 8,
            segment_bytes: 65536,
            max_messages: 32,
            policy: PolicyKind::StaticSplit,
            fabric_id: 9,
        }
    }

    #[test]
    fn frames_round_trip() {
        let h = Hello {
            version: 1,
            stream: 3,
            gen: 5,
            conn_id: 0xdead_beef_0102,
            secret: [5; 16],
            params: params(),
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let a = Announce {
            slot: 31,
            tag: -2,
            index: 7,
            count: 8,
            capacity: 1 << 33,
        };
        assert_eq!(Announce::decode(&a.encode()).unwrap(), a);
        assert_eq!(a.buffer_id(), 31 * 8 + 7);
        let s = SegHeader {
            imm: 0x8000_0001,
            slot: 7,
            offset: 1 << 20,
            len: 4096,
        };
        assert_eq!(SegHeader::decode(&s.encode()).unwrap(), s);
        let k = Acks {
            stream: 3,
            gen: 2,
            count: 7,
            last: 0x00ff_ffff,
        };
        assert_eq!(Control::decode(&k.encode()).unwrap(), Control::Acks(k));
    }

    #[test]
    fn garbage_is_rejected_with_reason() {
        assert!(Hello::decode(&[0x47; HELLO_BYTES])
            .unwrap_err()
            .msg
            .contains("hello magic"));
        assert!(Announce::decode(&[1; ANNOUNCE_BYTES])
            .unwrap_err()
            .msg
            .contains("out of sync"));
        let good = Announce {
            slot: 1,
            tag: 0,
            index: 0,
            count: 1,
            capacity: 0,
        };
        for (index, count) in [(0u8, 0u8), (0, 9), (2, 2), (8, 8)] {
            let e = Announce::decode(
                &Announce {
                    index,
                    count,
                    ..good
                }
                .encode(),
            )
            .unwrap_err();
            assert!(e.msg.contains("receive group"), "{index}/{count}: {e}");
        }
        let mut v1 = good.encode();
        v1[0..4].copy_from_slice(&0x414e_4e31u32.to_le_bytes());
        assert!(Announce::decode(&v1)
            .unwrap_err()
            .msg
            .contains("protocol version"));
        let mut rsv = good.encode();
        rsv[15] = 1;
        assert!(Announce::decode(&rsv).unwrap_err().msg.contains("reserved"));
        assert_eq!(
            Control::decode(&encode_repath(4242)).unwrap(),
            Control::Repath { port: 4242 }
        );
        assert!(Control::decode(&encode_repath(0)).is_err());
        let mut odd = encode_repath(7);
        odd[20] = 1;
        assert!(Control::decode(&odd).unwrap_err().msg.contains("reserved"));
        assert!(SegHeader::decode(&[0; SEG_HEADER_BYTES])
            .unwrap_err()
            .msg
            .contains("out of sync"));
        let k = Acks {
            stream: 0,
            gen: 0,
            count: 0,
            last: 1,
        };
        assert!(Control::decode(&k.encode())
            .unwrap_err()
            .msg
            .contains("acknowledging 0 segments"));
        let mut k = Acks { count: 1, ..k }.encode();
        k[20] = 1;
        assert!(Control::decode(&k).unwrap_err().msg.contains("reserved"));
        let mut h = Hello {
            version: 1,
            stream: 0,
            gen: 0,
            conn_id: 1,
            secret: [0; 16],
            params: params(),
        }
        .encode();
        h[28] = 9;
        assert!(Hello::decode(&h).unwrap_err().msg.contains("policy code 9"));
    }

    #[test]
    fn params_bounds() {
        assert!(params().validate().is_ok());
        assert!(ConnParams { qps: 0, ..params() }
            .validate()
            .unwrap_err()
            .msg
            .contains("qps 0"));
        assert!(ConnParams {
            outstanding: 257,
            ..params()
        }
        .validate()
        .is_err());
        assert!(ConnParams {
            segment_bytes: 100,
            ..params()
        }
        .validate()
        .is_err());
        assert!(ConnParams {
            max_messages: 0,
            ..params()
        }
        .validate()
        .is_err());
    }
}
