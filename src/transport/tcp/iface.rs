//! Network interface selection with NCCL_SOCKET_IFNAME semantics (comma list of prefixes, `^`
//! excludes, `=` exact; default: interfaces that are up, non-loopback first, loopback last).

use std::net::IpAddr;

use crate::transport::{NetError, NetResult};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub addr: IpAddr,
    /// Link speed in Mbps from /sys/class/net/<name>/speed (10000 when unknown, as NCCL's socket transport).
    pub speed_mbps: u32,
}

/// An NCCL_SOCKET_IFNAME filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfFilter {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl IfFilter {
    pub fn parse(spec: &str) -> NetResult<IfFilter> {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names: Vec<String> = s.split(',').map(|n| n.trim().to_string()).collect();
        if names.iter().any(|n| n.is_empty()) {
            return Err(NetError::invalid_argument(format!(
                "NCCL_SOCKET_IFNAME='{spec}': empty interface name in the list (expected e.g. 'eth0,ib' or '^docker' or '=lo')"
            )));
        }
        Ok(IfFilter {
            exclude,
            exact,
            names,
        })
    }

    pub fn matches(&self, ifname: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                ifname == n
            } else {
                ifname.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Interfaces that are up with an address, filtered; without a filter, non-loopback interfaces
/// (docker bridges excluded, as NCCL does) and loopback only when nothing else is up.
pub fn select(all: &[(String, IpAddr, bool)], filter: Option<&IfFilter>) -> Vec<(String, IpAddr)> {
    let keep = |n: &str, lo: bool| match filter {
        Some(f) => f.matches(n),
        None => !lo && !n.starts_with("docker"),
    };
    let mut seen: Vec<(String, IpAddr)> = Vec::new();
    for (n, a, lo) in all {
        if keep(n, *lo) && !seen.iter().any(|(s, _)| s == n) {
            seen.push((n.clone(), *a));
        }
    }
    if seen.is_empty() && filter.is_none() {
        for (n, a, lo) in all {
            if *lo && !seen.iter().any(|(s, _)| s == n) {
                seen.push((n.clone(), *a));
            }
        }
    }
    seen
}

/// Lists (name, address, is_loopback) for interfaces that are up, IPv4 addresses before IPv6.
pub fn system_interfaces() -> NetResult<Vec<(String, IpAddr, bool)>> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(NetError::io("getifaddrs", &std::io::Error::last_os_error()));
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned and has not been freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & (libc::IFF_UP as u32) != 0;
        if !up || ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let lo = ifa.ifa_flags & (libc::IFF_LOOPBACK as u32) != 0;
        // SAFETY: ifa_addr is non-null; its family says which sockaddr it is.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        if family == libc::AF_INET {
            // SAFETY: AF_INET addresses are sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            v4.push((
                name,
                IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()),
                lo,
            ));
        } else if family == libc::AF_INET6 {
            // SAFETY: AF_INET6 addresses are sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            // Link-local addresses need a scope id to connect to; skip them.
            if (ip.segments()[0] & 0xffc0) != 0xfe80 {
                v6.push((name, IpAddr::V6(ip), lo));
            }
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    v4.extend(v6);
    Ok(v4)
}

pub fn link_speed_mbps(ifname: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|s| *s > 0 && *s <= i32::MAX as i64)
        .map(|s| s as u32)
        .unwrap_or(10_000)
}

/// The interfaces this plugin offers as TCP devices, honouring NCCL_SOCKET_IFNAME when given.
pub fn find(filter_spec: Option<&str>) -> NetResult<Vec<Iface>> {
    let filter = filter_spec.map(IfFilter::parse).transpose()?;
    let all = system_interfaces()?;
    let chosen = select(&all, filter.as_ref());
    if chosen.is_empty() {
        return Err(NetError::system(match filter_spec {
            Some(s) => format!("no network interface that is up matches NCCL_SOCKET_IFNAME='{s}'"),
            None => "no network interface with an address is up".to_string(),
        }));
    }
    Ok(chosen
        .into_iter()
        .map(|(name, addr)| Iface {
            speed_mbps: link_speed_mbps(&name),
            name,
            addr,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<(String, IpAddr, bool)> {
        vec![
            ("lo".into(), "127.0.0.1".parse().unwrap(), true),
            ("eth0".into(), "10.0.0.2".parse().unwrap(), false),
            ("docker0".into(), "172.17.0.1".parse().unwrap(), false),
            ("eth1".into(), "10.0.1.2".parse().unwrap(), false),
            ("eth0".into(), "fd00::2".parse().unwrap(), false),
        ]
    }

    fn names(v: Vec<(String, IpAddr)>) -> Vec<String> {
        v.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn default_prefers_real_interfaces_then_loopback() {
        assert_eq!(names(select(&table(), None)), ["eth0", "eth1"]);
        let lo_only = vec![("lo".to_string(), "127.0.0.1".parse().unwrap(), true)];
        assert_eq!(names(select(&lo_only, None)), ["lo"]);
    }

    #[test]
    fn nccl_socket_ifname_semantics() {
        let f = |s: &str| IfFilter::parse(s).unwrap();
        assert_eq!(names(select(&table(), Some(&f("eth")))), ["eth0", "eth1"]);
        assert_eq!(
            names(select(&table(), Some(&f("=eth")))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(select(&table(), Some(&f("=eth1,lo")))),
            ["lo", "eth1"]
        );
        assert_eq!(names(select(&table(), Some(&f("^eth,docker")))), ["lo"]);
        assert!(IfFilter::parse("eth0,,lo")
            .unwrap_err()
            .msg
            .contains("empty interface name"));
    }

    #[test]
    fn loopback_is_found_on_this_machine() {
        let found = find(Some("lo")).expect("lo is up");
        assert_eq!(found[0].name, "lo");
        assert!(found[0].addr.is_loopback());
    }
}
