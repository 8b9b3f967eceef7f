//! Hostile clients for the listen port: junk bytes, a well-formed handshake with a wrong secret,
//! an immediate close and idle half-open connections; the real connect must still succeed after.

use super::listen_handle;
use super::pattern::Rng;
use dqplb_test_support::nccl::HANDLE_BYTES;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Opens the hostile connections to the handle's address; returns the idle ones, which the
/// caller keeps open until its real transfer is over.
pub(crate) fn attack(handle: &[u8; HANDLE_BYTES]) -> Result<Vec<TcpStream>, String> {
    let info = listen_handle::parse_handle(handle)?;
    let addr = SocketAddr::new(info.addr, info.port);
    let dial = || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))
    };
    let mut rng = Rng::new(0xbad);
    let mut wrong_secret = Vec::new();

    // 1. random junk, then close
    let mut s = dial()?;
    let junk: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
    let _ = s.write_all(&junk);
    drop(s);

    // 2. a complete, well-formed connection (control stream + one data stream) whose hellos are
    //    right in every field but the secret: the listener must drop both streams for the secret
    //    alone (one WARN each), never hand this connection to accept()
    let mut secret = [0u8; 16];
    secret.copy_from_slice(&handle[30..46]);
    for b in &mut secret {
        *b ^= 0x5a;
    }
    let fabric = u32::from_le_bytes([handle[26], handle[27], handle[28], handle[29]]);
    // The listen handle carries the protocol version the listener speaks (bytes 4..6).
    let version = u16::from_le_bytes([handle[4], handle[5]]);
    for stream in 0..WRONG_SECRET_STREAMS {
        let mut s = dial()?;
        s.write_all(&hello(
            stream,
            version,
            0x0bad_5ec7_0bad_5ec7,
            fabric,
            &secret,
        ))
        .map_err(|e| format!("writing the wrong-secret hello: {e}"))?;
        wrong_secret.push(s);
    }

    // 3. connect and close at once
    drop(dial()?);

    // 4. a connection that claims a huge frame: all 0xff
    let mut s = dial()?;
    let _ = s.write_all(&[0xff; 64]);
    drop(s);

    // 5. two idle connections that never send anything and stay open; the wrong-secret streams
    //    stay open too, so they are dropped for their hello, not for a close
    let mut idle = vec![dial()?, dial()?];
    idle.extend(wrong_secret);
    Ok(idle)
}

/// Streams of the wrong-secret connection (qps 1: control + one data stream).
pub(crate) const WRONG_SECRET_STREAMS: u16 = 2;

/// The 64-byte stream hello of the TCP transport (crates/transport/src/tcp/wire.rs `Hello::encode`),
/// written out here independently: "DQPS", the protocol version of the listen handle,
/// stream index, qps 1, 8 outstanding, 64 KiB segments, 32 messages, fabricId, policy 0 (dqplb),
/// connection id, secret. Every field passes the listener's checks except, here, the secret.
pub(crate) fn hello(
    stream: u16,
    version: u16,
    conn_id: u64,
    fabric_id: u32,
    secret: &[u8; 16],
) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(b"DQPS");
    b[4..6].copy_from_slice(&version.to_le_bytes());
    b[6..8].copy_from_slice(&stream.to_le_bytes());
    b[8..10].copy_from_slice(&1u16.to_le_bytes());
    b[12..16].copy_from_slice(&8u32.to_le_bytes());
    b[16..20].copy_from_slice(&65536u32.to_le_bytes());
    b[20..24].copy_from_slice(&32u32.to_le_bytes());
    b[24..28].copy_from_slice(&fabric_id.to_le_bytes());
    b[28] = 0;
    b[32..40].copy_from_slice(&conn_id.to_le_bytes());
    b[40..56].copy_from_slice(secret);
    b
}
