//! The plugin's listen handle as the harness reads it: its fields (layout in the plugin's
//! contract) and the hex form in which the harness relays it between processes.

use dqplb_test_support::nccl::HANDLE_BYTES;

/// Parsed fields of the plugin's 128-byte listen handle (layout in the plugin's contract).
#[derive(Debug, Clone)]
pub(crate) struct HandleInfo {
    pub version: u16,
    pub family: u16,
    pub port: u16,
    pub addr: std::net::IpAddr,
    pub fabric_id: u32,
}

/// Decodes a listen handle; `Err` names the first field that is wrong.
pub(crate) fn parse_handle(h: &[u8; HANDLE_BYTES]) -> Result<HandleInfo, String> {
    if &h[0..4] != b"DQPL" {
        return Err(format!(
            "handle magic is {:02x?}, expected b\"DQPL\"",
            &h[0..4]
        ));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    let family = u16::from_le_bytes([h[6], h[7]]);
    let port = u16::from_be_bytes([h[8], h[9]]);
    let addr = match family {
        2 => std::net::IpAddr::from([h[10], h[11], h[12], h[13]]),
        10 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[10..26]);
            std::net::IpAddr::from(a)
        }
        f => {
            return Err(format!(
                "handle address family {f} is neither 2 (IPv4) nor 10 (IPv6)"
            ))
        }
    };
    if port == 0 {
        return Err("handle TCP port is 0".into());
    }
    let fabric_id = u32::from_le_bytes([h[26], h[27], h[28], h[29]]);
    Ok(HandleInfo {
        version,
        family,
        port,
        addr,
        fabric_id,
    })
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn from_hex(s: &str) -> Result<[u8; HANDLE_BYTES], String> {
    let s = s.trim();
    if s.len() != 2 * HANDLE_BYTES {
        return Err(format!(
            "handle hex has {} chars, expected {}",
            s.len(),
            2 * HANDLE_BYTES
        ));
    }
    let mut out = [0u8; HANDLE_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        *o =
            u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| format!("handle hex: {e}"))?;
    }
    Ok(out)
}
