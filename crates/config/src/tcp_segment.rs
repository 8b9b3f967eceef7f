//! The segment of TCP connections: larger than a verbs segment, because each TCP segment costs
//! syscalls, a wake-up and an acknowledgement on both sides, yet small enough that DQPLB steers.

use super::pinning::PathPinning;
use super::plan::{ClassPlan, ConnClass};
use super::schema::{SiteConfig, NCCL_STEPS, NCCL_STEP_BYTES};

/// `[tcp] segment-bytes` by default; the window cap makes it 256 KiB for 4 streams x 2 and keeps
/// 1 MiB for one stream, where no segment moves between streams anyway. On a 2-core loopback
/// (`scripts/tcp-bench.sh`) 256 KiB segments move 1.26x (64 MiB messages) to 1.49x (1 MiB) the
/// bytes per second of 64 KiB ones, and one stream moves 64 MiB messages 1.2x faster in 1 MiB
/// segments than in 256 KiB ones (docs/records/benchmarks.md, "TCP segment size").
pub const DEFAULT_TCP_SEGMENT_BYTES: u64 = 1024 * 1024;

/// The window (data QPs x outstanding x segment) a larger TCP segment may reach: half of what
/// NCCL keeps in flight per connection (NCCL_STEPS x 512 KiB = 4 MiB), so a slow stream's window
/// still fills while the others have work and the engine moves segments off it.
pub const TCP_WINDOW_CAP_BYTES: u64 = NCCL_STEPS * NCCL_STEP_BYTES / 2;

/// TCP segments are multiples of this (a page).
const TCP_SEGMENT_ALIGN: u64 = 4096;

impl SiteConfig {
    /// The segment a TCP connection of `class` uses: the class's own `segment-bytes` or pinned
    /// segment when it has one, else `[tcp] segment-bytes` (0: the engine's segment) lowered to
    /// keep the class's window (at the depth it is sized for, see `ClassSpec::depth_bound`) within
    /// [`TCP_WINDOW_CAP_BYTES`], and never below the engine's.
    pub fn tcp_segment_bytes_for(&self, class: ConnClass) -> u64 {
        let spec = self.class.get(class);
        let base = self.segment_bytes_for(class);
        if spec.segment_bytes.is_some()
            || spec.path_pinning != PathPinning::Off
            || self.tcp.segment_bytes == 0
        {
            return base;
        }
        let p = self.plan(class);
        // The window at the depth the connection is sized for (the depth rule's raised depth).
        let slots = u64::from(p.qps)
            .saturating_mul(u64::from(spec.depth_bound(p.outstanding)))
            .max(1);
        let window = TCP_WINDOW_CAP_BYTES.min(self.engine.inflight_budget_bytes);
        let cap = window / slots / TCP_SEGMENT_ALIGN * TCP_SEGMENT_ALIGN;
        base.max(self.tcp.segment_bytes.min(cap))
    }

    /// The plan of a TCP connection of `class`: the class's plan (QPs and outstanding depth as
    /// over verbs: a TCP stream needs at least as many segments in flight to stay busy while
    /// acknowledgements come back) with the TCP segment.
    pub fn tcp_plan(&self, class: ConnClass) -> ClassPlan {
        let mut p = self.plan(class);
        p.segment_bytes = self.tcp_segment_bytes_for(class);
        p.inflight_bytes = u64::from(p.qps)
            .saturating_mul(u64::from(p.outstanding))
            .saturating_mul(p.segment_bytes);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_str;

    #[test]
    fn the_embedded_default_gets_256k_same_rail_and_capped_other_classes() {
        let c = SiteConfig::default();
        // same-rail 4 QPs x 2: 2 MiB / 8 = 256 KiB.
        assert_eq!(c.tcp_segment_bytes_for(ConnClass::SameRail), 262_144);
        // cross-rail 8 QPs x 2: 2 MiB / 16 = 128 KiB.
        assert_eq!(c.tcp_segment_bytes_for(ConnClass::CrossRail), 131_072);
        // cross-dc 16 QPs x 3: 2 MiB / 48 = 43,690 -> 40,960, below the engine's 64 KiB.
        assert_eq!(c.tcp_segment_bytes_for(ConnClass::CrossDc), 65_536);
        for class in ConnClass::ALL {
            let p = c.tcp_plan(class);
            assert_eq!(p.segment_bytes, c.tcp_segment_bytes_for(class));
            assert_eq!(p.outstanding, c.plan(class).outstanding);
            assert_eq!(p.qps, c.plan(class).qps);
            let window = u64::from(p.qps) * u64::from(p.outstanding) * p.segment_bytes;
            assert!(
                window <= TCP_WINDOW_CAP_BYTES || p.segment_bytes == 65_536,
                "{class:?}: window {window}"
            );
            // Verbs connections keep the class's segment.
            assert_eq!(c.plan(class).segment_bytes, 65_536);
        }
    }

    #[test]
    fn fewer_streams_get_larger_segments_up_to_the_tcp_key() {
        let one = parse_str("[class.same-rail]\nqps = 1\n", "t.toml").unwrap();
        // 1 stream x 2: 2 MiB / 2 = 1 MiB, the [tcp] default itself.
        assert_eq!(one.tcp_segment_bytes_for(ConnClass::SameRail), 1 << 20);
        let two = parse_str("[class.same-rail]\nqps = 2\n", "t.toml").unwrap();
        assert_eq!(two.tcp_segment_bytes_for(ConnClass::SameRail), 512 << 10);
        let capped = parse_str(
            "[class.same-rail]\nqps = 1\n[tcp]\nsegment-bytes = 262144\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(capped.tcp_segment_bytes_for(ConnClass::SameRail), 256 << 10);
    }

    #[test]
    fn a_class_segment_pinning_or_zero_keeps_the_class_segment() {
        let own = parse_str("[class.same-rail]\nsegment-bytes = 131072\n", "t.toml").unwrap();
        assert_eq!(own.tcp_segment_bytes_for(ConnClass::SameRail), 131_072);
        let off = parse_str("[tcp]\nsegment-bytes = 0\n", "t.toml").unwrap();
        assert_eq!(off.tcp_segment_bytes_for(ConnClass::SameRail), 65_536);
        let small = parse_str("[tcp]\nsegment-bytes = 4096\n", "t.toml").unwrap();
        assert_eq!(small.tcp_segment_bytes_for(ConnClass::SameRail), 65_536);
        // A depth rule on the class: the cap counts its raised depth, 2 MiB / (4 x 3) -> 172 KiB.
        let deep = parse_str("[class.same-rail]\ndepth-raised = 3\n", "t.toml").unwrap();
        assert_eq!(deep.tcp_segment_bytes_for(ConnClass::SameRail), 172_032);
        let pinned = parse_str(
            "[class.same-rail]\npath-pinning = \"relative\"\necmp-width = 8\nqps = 8\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            pinned.tcp_segment_bytes_for(ConnClass::SameRail),
            pinned.segment_bytes_for(ConnClass::SameRail)
        );
    }

    #[test]
    fn a_segment_not_a_page_multiple_is_refused() {
        let e = parse_str("[tcp]\nsegment-bytes = 100000\n", "t.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("tcp.segment-bytes"));
    }
}
