//! Hostile clients for the listen port: junk bytes, a handshake with a wrong secret, an
//! immediate close and idle half-open connections; the real connect must still succeed after.

use super::abi::{self, HANDLE_BYTES};
use super::pattern::Rng;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Opens the hostile connections to the handle's address; returns the idle ones, which the
/// caller keeps open until its real transfer is over.
pub fn attack(handle: &[u8; HANDLE_BYTES]) -> Result<Vec<TcpStream>, String> {
    let info = abi::parse_handle(handle)?;
    let addr = SocketAddr::new(info.addr, info.port);
    let dial = || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))
    };
    let mut rng = Rng::new(0xbad);

    // 1. random junk, then close
    let mut s = dial()?;
    let junk: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
    let _ = s.write_all(&junk);
    drop(s);

    // 2. a copy of the handle with the secret flipped, as a plausible but wrong hello
    let mut s = dial()?;
    let mut fake = *handle;
    for b in &mut fake[30..46] {
        *b ^= 0x5a;
    }
    let _ = s.write_all(&fake);
    let _ = s.write_all(&junk[..200]);
    drop(s);

    // 3. connect and close at once
    drop(dial()?);

    // 4. a connection that claims a huge frame: all 0xff
    let mut s = dial()?;
    let _ = s.write_all(&[0xff; 64]);
    drop(s);

    // 5. two idle connections that never send anything and stay open
    let idle = vec![dial()?, dial()?];
    Ok(idle)
}
