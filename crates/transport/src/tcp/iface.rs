//! Network interface selection with NCCL_SOCKET_IFNAME semantics (comma list of prefixes, `^`
//! excludes, `=` exact; default: interfaces that are up, non-loopback first, loopback last).

use std::net::IpAddr;

use crate::{NetError, NetResult};

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
    /// Reads a list as NCCL's ncclOsFindInterfaces does (src/os/linux.cc and src/misc/utils.cc
    /// parseStringList, 2.20-2.30): leading `^` and `=`, comma-separated names, empty entries
    /// skipped, anything after a ':' in an entry ignored. An empty list matches every name (and,
    /// with `^`, none).
    pub fn parse(spec: &str) -> IfFilter {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s
            .split(',')
            .filter_map(|n| n.split(':').next())
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        IfFilter {
            exclude,
            exact,
            names,
        }
    }

    pub fn matches(&self, ifname: &str) -> bool {
        let hit = self.names.is_empty()
            || self.names.iter().any(|n| {
                if self.exact {
                    ifname == n
                } else {
                    ifname.starts_with(n.as_str())
                }
            });
        hit != self.exclude
    }
}

/// NCCL_SOCKET_FAMILY: `AF_INET` or `AF_INET6` forces the address family; anything else (or
/// unset) lets the first address of each interface through, as NCCL's ncclEnvSocketFamily does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Any,
    V4,
    V6,
}

impl Family {
    /// The family for an NCCL_SOCKET_FAMILY value; Err(value) for a value NCCL ignores.
    pub fn parse(v: Option<&str>) -> Result<Family, String> {
        match v {
            None => Ok(Family::Any),
            Some("AF_INET") => Ok(Family::V4),
            Some("AF_INET6") => Ok(Family::V6),
            Some(other) => Err(other.to_string()),
        }
    }

    fn admits(self, a: &IpAddr) -> bool {
        match self {
            Family::Any => true,
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
        }
    }
}

fn pick(
    all: &[(String, IpAddr, bool)],
    filter: &IfFilter,
    family: Family,
) -> Vec<(String, IpAddr)> {
    let mut seen: Vec<(String, IpAddr)> = Vec::new();
    for (n, a, _) in all {
        if family.admits(a) && filter.matches(n) && !seen.iter().any(|(s, _)| s == n) {
            seen.push((n.clone(), *a));
        }
    }
    seen
}

/// Interfaces with an address, one address each (the first), as NCCL's ncclFindInterfaces
/// (src/misc/socket.cc, 2.20-2.30) picks them: NCCL_SOCKET_IFNAME when it is longer than one
/// character ("find or fail"); otherwise `ib*`, then anything but docker/lo/virbr, then docker,
/// then lo, then virbr — the first of these that finds any.
pub fn select(
    all: &[(String, IpAddr, bool)],
    filter: Option<&IfFilter>,
    family: Family,
) -> Vec<(String, IpAddr)> {
    if let Some(f) = filter {
        return pick(all, f, family);
    }
    ["ib", "^docker,lo,virbr", "docker", "lo", "virbr"]
        .iter()
        .map(|spec| pick(all, &IfFilter::parse(spec), family))
        .find(|found| !found.is_empty())
        .unwrap_or_default()
}

/// Lists (name, address, is_loopback) for interfaces that are up, IPv4 addresses before IPv6.
pub(crate) fn system_interfaces() -> NetResult<Vec<(String, IpAddr, bool)>> {
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
        // NCCL considers running interfaces only (up and physically attached).
        let running = ifa.ifa_flags & (libc::IFF_UP | libc::IFF_RUNNING) as u32
            == (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        if !running || ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
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
            // NCCL skips IPv6 loopback; link-local addresses need a scope id to connect to, which
            // the handle does not carry, so they are skipped too.
            if !ip.is_loopback() && (ip.segments()[0] & 0xffc0) != 0xfe80 {
                v6.push((name, IpAddr::V6(ip), lo));
            }
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    v4.extend(v6);
    Ok(v4)
}

pub(crate) fn link_speed_mbps(ifname: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|s| *s > 0 && *s <= i32::MAX as i64)
        .map(|s| s as u32)
        .unwrap_or(10_000)
}

/// The interfaces this plugin offers as TCP devices, honouring NCCL_SOCKET_IFNAME (`filter_spec`)
/// and NCCL_SOCKET_FAMILY (read from the environment) as NCCL does.
pub fn find(filter_spec: Option<&str>) -> NetResult<Vec<Iface>> {
    let fam_env = std::env::var("NCCL_SOCKET_FAMILY").ok();
    let family = Family::parse(fam_env.as_deref()).unwrap_or_else(|v| {
        tracing::warn!(target: "dqplb::init", "NCCL_SOCKET_FAMILY='{v}' is neither AF_INET nor AF_INET6: ignored (as NCCL does)");
        Family::Any
    });
    find_with(filter_spec, family)
}

/// `find` with the family given.
pub(crate) fn find_with(filter_spec: Option<&str>, family: Family) -> NetResult<Vec<Iface>> {
    // NCCL ignores NCCL_SOCKET_IFNAME values of one character or less.
    let spec = filter_spec.filter(|s| s.len() > 1);
    let filter = spec.map(IfFilter::parse);
    let all = system_interfaces()?;
    let chosen = select(&all, filter.as_ref(), family);
    if chosen.is_empty() {
        return Err(NetError::system(match spec {
            Some(s) => format!(
                "no running network interface matches NCCL_SOCKET_IFNAME='{s}' (family {family:?})"
            ),
            None => format!("no running network interface with an address (family {family:?})"),
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
    fn default_order_is_ncclfindinterfaces() {
        let any = Family::Any;
        assert_eq!(names(select(&table(), None, any)), ["eth0", "eth1"]);
        let mut with_ib = table();
        with_ib.push(("ib0".into(), "10.9.0.1".parse().unwrap(), false));
        assert_eq!(names(select(&with_ib, None, any)), ["ib0"]);
        let lo_docker = vec![
            ("lo".to_string(), "127.0.0.1".parse().unwrap(), true),
            ("docker0".to_string(), "172.17.0.1".parse().unwrap(), false),
        ];
        assert_eq!(names(select(&lo_docker, None, any)), ["docker0"]);
        assert_eq!(names(select(&lo_docker[..1], None, any)), ["lo"]);
    }

    #[test]
    fn nccl_socket_ifname_and_family_semantics() {
        let f = IfFilter::parse;
        let any = Family::Any;
        assert_eq!(
            names(select(&table(), Some(&f("eth")), any)),
            ["eth0", "eth1"]
        );
        assert!(select(&table(), Some(&f("=eth")), any).is_empty());
        assert_eq!(
            names(select(&table(), Some(&f("=eth1,lo")), any)),
            ["lo", "eth1"]
        );
        assert_eq!(
            names(select(&table(), Some(&f("^eth,docker")), any)),
            ["lo"]
        );
        // Empty entries and ':port' suffixes are skipped, as parseStringList does.
        assert_eq!(
            names(select(&table(), Some(&f("eth0,,lo:1,")), any)),
            ["lo", "eth0"]
        );
        // One address per interface: the first, unless the family is forced.
        let eth0 = select(&table(), Some(&f("=eth0")), Family::V6);
        assert_eq!(eth0, [("eth0".to_string(), "fd00::2".parse().unwrap())]);
        let eth0 = select(&table(), Some(&f("=eth0")), any);
        assert_eq!(eth0[0].1, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(Family::parse(Some("AF_INET6")), Ok(Family::V6));
        assert_eq!(Family::parse(Some("inet")), Err("inet".to_string()));
    }

    #[test]
    fn loopback_is_found_on_this_machine() {
        let found = find(Some("lo")).expect("lo is up");
        assert_eq!(found[0].name, "lo");
        assert!(found[0].addr.is_loopback());
    }
}
