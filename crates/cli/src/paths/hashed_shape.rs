//! ECMP-like shaping of the namespace's loopback: a u32 hash table picks one of M tc HTB
//! classes (paths) from bits 1..=log2(M) of a data stream's source port, as a switch hashes it.

use super::shape::{args, class_cmd, rate, TcArgs, DEFAULT_CLASS, DEFAULT_RATE, DEV};

/// Class id (minor) of bucket b is `BUCKET_CLASS_BASE + b` (tc reads minors as hex; the same
/// digits are written for the class and its flowid, so the ids only need to be distinct).
const BUCKET_CLASS_BASE: u32 = 100;
/// u32 hash table id of the buckets.
const TABLE: u32 = 2;
/// Largest bucket count (classes 100..=163 stay distinct, and the hash mask stays in the port).
pub(crate) const MAX_BUCKETS: usize = 64;
/// Offset of the TCP header in a loopback IPv4 packet (no IP options): its first 32-bit word is
/// source port << 16 | destination port.
const TCP_AT: u32 = 20;

/// Bucket of a source port: bits 1.. of the port, the same bits the hash key below masks. Bit 0
/// is skipped because Linux gives connect() even ephemeral ports (a replacement stream's port is
/// the kernel's pick, as in a real deployment).
#[cfg(test)]
pub(crate) fn bucket_of(port: u16, buckets: usize) -> usize {
    bucket_at(port, buckets, PORT_SHIFT)
}

/// Source-port bits skipped below the bucket bits in scenarios 6 and 7 (bit 0, see bucket_of).
pub(crate) const PORT_SHIFT: u32 = 1;

/// Bucket of a source port whose bits `shift..shift + log2(buckets)` the hash takes. With shift
/// 0 this is the low bits of the XOR fold of the source port alone (the pinned scenario's
/// switch hash, `engine::pinning::HashFamily::XorFold` over `[src-port]`, seed 0).
pub(crate) fn bucket_at(port: u16, buckets: usize, shift: u32) -> usize {
    (usize::from(port) >> shift) & (buckets - 1)
}

/// The hash key mask over the TCP header's first word for `buckets` buckets from port bit `shift`
/// (tc's u32 hash takes the masked bits from the mask's lowest set bit on).
fn hash_mask(buckets: usize, shift: u32) -> u32 {
    ((buckets as u32) - 1) << (16 + shift)
}

/// What the hashed plan shapes: data segments of one connection, found by destination port (the
/// listener for the first streams, the re-path listener for replacements); the control stream
/// is exempted by its source port.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HashPlan {
    pub rates_mbit: Vec<f64>,
    pub ctrl_sport: u16,
    pub dports: Vec<u16>,
    /// Source-port bits below the bucket bits (`bucket_at`).
    pub shift: u32,
}

fn bucket_class(b: usize) -> u32 {
    BUCKET_CLASS_BASE + b as u32
}

/// The tc commands of the plan: HTB root and fast default class, one class per bucket, the
/// control stream's exemption (prio 1), and the hash table with its buckets and links (prio 2).
pub(crate) fn install(plan: &HashPlan) -> Result<Vec<TcArgs>, String> {
    let m = plan.rates_mbit.len();
    if !(2..=MAX_BUCKETS).contains(&m) || !m.is_power_of_two() {
        return Err(format!(
            "{m} hash buckets: must be a power of two in 2..={MAX_BUCKETS}"
        ));
    }
    if plan.dports.is_empty() {
        return Err("hashed shaping needs at least one destination port".into());
    }
    if let Some(bad) = plan
        .rates_mbit
        .iter()
        .find(|r| !r.is_finite() || **r < 0.001)
    {
        return Err(format!("bucket rate {bad} Mbit/s: must be at least 0.001"));
    }
    let mut cmds = vec![
        args(&format!(
            "qdisc replace dev {DEV} root handle 1: htb default {DEFAULT_CLASS}"
        )),
        args(&format!(
            "class add dev {DEV} parent 1: classid 1:{DEFAULT_CLASS} htb rate {DEFAULT_RATE} ceil {DEFAULT_RATE} burst 1mb cburst 1mb quantum 200000"
        )),
    ];
    for (b, r) in plan.rates_mbit.iter().enumerate() {
        cmds.push(class_cmd("add", bucket_class(b), *r));
    }
    cmds.push(args(&format!(
        "filter add dev {DEV} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff match ip sport {} 0xffff flowid 1:{DEFAULT_CLASS}",
        plan.ctrl_sport
    )));
    cmds.push(args(&format!(
        "filter add dev {DEV} parent 1: protocol ip prio 2 handle {TABLE}: u32 divisor {m}"
    )));
    for b in 0..m {
        cmds.push(args(&format!(
            "filter add dev {DEV} parent 1: protocol ip prio 2 u32 ht {TABLE}:{b:x}: match u32 0 0 flowid 1:{}",
            bucket_class(b)
        )));
    }
    for p in &plan.dports {
        cmds.push(args(&format!(
            "filter add dev {DEV} parent 1: protocol ip prio 2 u32 ht 800:: match ip protocol 6 0xff match ip dport {p} 0xffff hashkey mask {:#010x} at {TCP_AT} link {TABLE}:",
            hash_mask(m, plan.shift)
        )));
    }
    Ok(cmds)
}

/// Kills bucket `b`: 1 kbit/s with a 2 KB bucket holds a 64 KiB loopback skb for minutes, so
/// the path carries nothing (this kernel has no drop action; the queue fills and tail-drops).
pub(crate) fn kill(b: usize) -> TcArgs {
    let r = rate(0.001);
    args(&format!(
        "class change dev {DEV} parent 1: classid 1:{} htb rate {r} ceil {r} burst 2kb cburst 2kb",
        bucket_class(b)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_come_from_port_bits_one_and_up() {
        assert_eq!(bucket_of(20000, 16), (20000 >> 1) & 15);
        // Ports spaced by 2 land on consecutive buckets; a pair of consecutive ports shares one.
        assert_eq!(bucket_of(20002, 16), (bucket_of(20000, 16) + 1) % 16);
        assert_eq!(bucket_of(20001, 16), bucket_of(20000, 16));
        assert_eq!(hash_mask(16, PORT_SHIFT), 0x001e_0000);
        assert_eq!(hash_mask(8, PORT_SHIFT), 0x000e_0000);
        // The pinned scenario's hash: the low bits of the port.
        assert_eq!(hash_mask(8, 0), 0x0007_0000);
        assert_eq!(bucket_at(0xC00B, 8, 0), 3);
    }

    #[test]
    fn plan_hashes_data_by_destination_port_and_exempts_control() {
        let plan = HashPlan {
            rates_mbit: vec![100.0, 10.0, 100.0, 100.0],
            ctrl_sport: 20000,
            dports: vec![40001, 40002],
            shift: PORT_SHIFT,
        };
        let text: Vec<String> = install(&plan)
            .unwrap()
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert_eq!(text.len(), 2 + 4 + 1 + 1 + 4 + 2);
        assert!(
            text[3].contains("classid 1:101 htb rate 10000000bit"),
            "{}",
            text[3]
        );
        assert!(
            text[6].ends_with("match ip sport 20000 0xffff flowid 1:2"),
            "{}",
            text[6]
        );
        assert!(
            text[7].ends_with("prio 2 handle 2: u32 divisor 4"),
            "{}",
            text[7]
        );
        assert!(
            text[11].ends_with("ht 2:3: match u32 0 0 flowid 1:103"),
            "{}",
            text[11]
        );
        assert!(
            text[12].ends_with("match ip dport 40001 0xffff hashkey mask 0x00060000 at 20 link 2:"),
            "{}",
            text[12]
        );
        assert!(text[13].contains("dport 40002"), "{}", text[13]);
        // Bucket 10 of a 16-bucket table is written in hex, as tc parses it.
        let big = HashPlan {
            rates_mbit: vec![1.0; 16],
            ..plan.clone()
        };
        let t: Vec<String> = install(&big).unwrap().iter().map(|c| c.join(" ")).collect();
        assert!(t
            .iter()
            .any(|c| c.contains("ht 2:a: match u32 0 0 flowid 1:110")));
    }

    #[test]
    fn bad_plans_are_refused() {
        let plan = |n: usize, dports: Vec<u16>| HashPlan {
            rates_mbit: vec![1.0; n],
            ctrl_sport: 1,
            dports,
            shift: PORT_SHIFT,
        };
        assert!(install(&plan(12, vec![1]))
            .unwrap_err()
            .contains("power of two"));
        assert!(install(&plan(128, vec![1])).unwrap_err().contains("2..=64"));
        assert!(install(&plan(4, vec![]))
            .unwrap_err()
            .contains("destination port"));
        let mut p = plan(4, vec![1]);
        p.rates_mbit[2] = 0.0;
        assert!(install(&p).unwrap_err().contains("at least 0.001"));
        assert!(kill(3).join(" ").contains("classid 1:103 htb rate 1000bit"));
    }
}
