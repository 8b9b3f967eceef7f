//! The 128-byte listen handle NCCL carries between ranks: magic, protocol version, listener address,
//! the listener's fabricId and a random connection secret; bytes 112..128 belong to connect().

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::{NetError, NetResult};

pub const HANDLE_BYTES: usize = 128;
pub(crate) const MAGIC: [u8; 4] = *b"DQPL";
/// Version of the handle and wire protocol: 2 since grouped receives (announce frames "2NNA"), 3
/// since the verbs clear-to-send is a plain RDMA write found in memory (FIFO entry layout 3), 4
/// since TCP receivers announce a re-path listener for replacement data streams, 5 since verbs
/// receives come from a shared receive queue under a receive credit (FIFO entry layout 4), 6 since
/// a failed or drained verbs data QP is fenced and re-created over the bootstrap socket, 7 since
/// TCP acknowledgements ride the control stream (frame "ACKS", several per frame, naming the data
/// stream and its socket number from the hello). Peers of another version are refused at connect with a clear message, in both directions.
pub const PROTOCOL_VERSION: u16 = 7;
/// Bytes of the handle reserved for the connect state id (see plugin::connect).
pub(crate) const STAGE_OFFSET: usize = 112;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenHandle {
    pub addr: SocketAddr,
    pub fabric_id: u32,
    pub secret: [u8; 16],
}

impl ListenHandle {
    pub fn encode(&self, out: &mut [u8; HANDLE_BYTES]) {
        out[..STAGE_OFFSET].fill(0);
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        let (family, ip): (u16, [u8; 16]) = match self.addr.ip() {
            IpAddr::V4(v4) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&v4.octets());
                (2, b)
            }
            IpAddr::V6(v6) => (10, v6.octets()),
        };
        out[6..8].copy_from_slice(&family.to_le_bytes());
        out[8..10].copy_from_slice(&self.addr.port().to_be_bytes());
        out[10..26].copy_from_slice(&ip);
        out[26..30].copy_from_slice(&self.fabric_id.to_le_bytes());
        out[30..46].copy_from_slice(&self.secret);
    }

    pub fn decode(b: &[u8; HANDLE_BYTES]) -> NetResult<ListenHandle> {
        if b[0..4] != MAGIC {
            return Err(NetError::invalid_argument(format!(
                "connect handle has magic {:02x?}, expected {:02x?} (\"DQPL\"): not a DQPLB listen handle",
                &b[0..4],
                MAGIC
            )));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != PROTOCOL_VERSION {
            return Err(NetError::invalid_argument(format!(
                "connect handle has protocol version {version}, this plugin speaks {PROTOCOL_VERSION}: mixed plugin versions across ranks"
            )));
        }
        let family = u16::from_le_bytes([b[6], b[7]]);
        let port = u16::from_be_bytes([b[8], b[9]]);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[10..26]);
        let addr = match family {
            2 => IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])),
            10 => IpAddr::V6(Ipv6Addr::from(ip)),
            other => {
                return Err(NetError::invalid_argument(format!(
                    "connect handle has address family {other}, expected 2 (IPv4) or 10 (IPv6)"
                )))
            }
        };
        if port == 0 {
            return Err(NetError::invalid_argument("connect handle has port 0"));
        }
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&b[30..46]);
        Ok(ListenHandle {
            addr: SocketAddr::new(addr, port),
            fabric_id: u32::from_le_bytes([b[26], b[27], b[28], b[29]]),
            secret,
        })
    }
}

/// 16 random bytes from the kernel (getrandom), for the connection secret.
pub fn random_secret() -> NetResult<[u8; 16]> {
    use std::io::Read;
    let mut s = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut s))
        .map_err(|e| NetError::io("reading /dev/urandom for the connection secret", &e))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_v4_and_v6() {
        for addr in ["127.0.0.1:4242", "[::1]:9"] {
            let h = ListenHandle {
                addr: addr.parse().unwrap(),
                fabric_id: 17,
                secret: [7; 16],
            };
            let mut b = [0xAAu8; HANDLE_BYTES];
            h.encode(&mut b);
            assert_eq!(b[STAGE_OFFSET], 0xAA, "connect-state bytes are left alone");
            assert_eq!(ListenHandle::decode(&b).unwrap(), h);
        }
    }

    #[test]
    fn rejects_foreign_handles() {
        let mut b = [0u8; HANDLE_BYTES];
        let e = ListenHandle::decode(&b).unwrap_err();
        assert!(e.msg.contains("magic"), "{e}");
        let h = ListenHandle {
            addr: "127.0.0.1:1".parse().unwrap(),
            fabric_id: 0,
            secret: [0; 16],
        };
        h.encode(&mut b);
        b[4] = 9;
        assert!(ListenHandle::decode(&b)
            .unwrap_err()
            .msg
            .contains("version 9"));
        h.encode(&mut b);
        b[6] = 3;
        assert!(ListenHandle::decode(&b)
            .unwrap_err()
            .msg
            .contains("family 3"));
    }
}
