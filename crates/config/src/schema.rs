//! The site-config schema: one serde type per TOML table, kebab-case keys, unknown keys rejected.
//! Defaults live here; ranges and cross-field rules live in `keys` and `validate`.

use serde::{Deserialize, Deserializer, Serialize};

use super::dcqcn::DcqcnSection;
use super::pinning::{PathPinning, PathsSection};
use super::plan::ConnClass;

/// One KiB, for readable defaults.
const KIB: u64 = 1024;

/// NCCL's Simple-protocol step per connection: NCCL_BUFFSIZE (default 4 MiB, src/init.cc
/// `DEFAULT_BUFFSIZE`) over `NCCL_STEPS` (8, src/include/device.h); the net proxy keeps at most
/// `NCCL_STEPS` steps in flight per connection (src/transport/net.cc `sendProxyProgress`,
/// `sub->transmitted < sub->done + NCCL_STEPS`; NCCL 2.30.7, master 5067397).
pub const NCCL_STEP_BYTES: u64 = 512 * KIB;
/// Steps NCCL keeps in flight per connection (`NCCL_STEPS`).
pub const NCCL_STEPS: u64 = 8;
/// NCCL's p2p step over the network (`NCCL_P2P_NET_CHUNKSIZE`, default 128 KiB, src/init.cc).
pub const NCCL_P2P_CHUNK_BYTES: u64 = 128 * KIB;
/// The default segment: half NCCL's p2p chunk, an eighth of its Simple step.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * KIB;

/// The whole site configuration (`/etc/nccl-dqplb.toml` or the embedded default).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SiteConfig {
    pub fabric: FabricSection,
    pub engine: EngineSection,
    pub patterns: PatternsSection,
    pub class: ClassSections,
    pub paths: PathsSection,
    pub tcp: TcpSection,
    pub stats: StatsSection,
    pub log: LogSection,
    pub dcqcn: DcqcnSection,
}

/// How the third field of an `NCCL_IB_HCA` entry is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum HcaThirdField {
    /// `dev:port:fabricId`, fabricId = dc * max-rails + rail (NCCL's cross-DC branch).
    #[default]
    #[serde(rename = "fabric-id")]
    FabricId,
    /// `dev:port:rail[:plane]` (NCCL 2.30.7+).
    #[serde(rename = "rail:plane")]
    RailPlane,
}

impl HcaThirdField {
    /// The spelling used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            HcaThirdField::FabricId => "fabric-id",
            HcaThirdField::RailPlane => "rail:plane",
        }
    }
}

/// `[fabric]`: how the cluster's rails and data centres are described.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct FabricSection {
    pub hca_third_field: HcaThirdField,
    pub max_rails: u32,
    /// Which transport carries data: RDMA ports when present (`auto`), or one forced.
    pub transport: TransportKind,
    /// Traffic class of the verbs control (clear-to-send) QP; -1: NCCL_IB_TC. NCCL_IB_FIFO_TC,
    /// when set, wins (a job's own setting over the site's).
    pub control_traffic_class: i32,
    /// `[fabric.sim]`: the simulator's section (`dqplb sim --config`), accepted and ignored here.
    #[serde(skip_serializing)]
    pub sim: serde::de::IgnoredAny,
}

/// `fabric.transport`: RDMA (verbs) or TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// Verbs on every active RDMA port NCCL_IB_HCA selects; TCP when there is none.
    #[default]
    Auto,
    /// Always TCP, even where RDMA devices exist.
    Tcp,
    /// Always verbs; init fails when no RDMA port is usable.
    Verbs,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Auto => "auto",
            TransportKind::Tcp => "tcp",
            TransportKind::Verbs => "verbs",
        }
    }
}

impl Default for FabricSection {
    fn default() -> Self {
        FabricSection {
            hca_third_field: HcaThirdField::FabricId,
            max_rails: 8,
            transport: TransportKind::Auto,
            control_traffic_class: -1,
            sim: serde::de::IgnoredAny,
        }
    }
}

/// Which load-balancing policy the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// Dynamic QP load balancing: segments go to whichever QP has room (NCCLX's DQPLB).
    #[default]
    Dqplb,
    /// DQPLB choosing, among QPs with room, the one with the lowest expected completion
    /// (outstanding + 1) x completion-latency EWMA: steers with any window size.
    DqplbLed,
    /// Each message split evenly over all QPs (NCCL_IB_SPLIT_DATA_ON_QPS=1).
    StaticSplit,
    /// Each whole message on one QP, rotating (NCCL's default since 2.20).
    RoundRobinMessage,
    /// Everything on one data QP.
    SingleQp,
}

impl PolicyName {
    /// Every policy, in documentation order.
    pub const ALL: [PolicyName; 5] = [
        PolicyName::Dqplb,
        PolicyName::DqplbLed,
        PolicyName::StaticSplit,
        PolicyName::RoundRobinMessage,
        PolicyName::SingleQp,
    ];

    /// The spelling used in the config file and environment.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Dqplb => "dqplb",
            PolicyName::DqplbLed => "dqplb-led",
            PolicyName::StaticSplit => "static-split",
            PolicyName::RoundRobinMessage => "round-robin-message",
            PolicyName::SingleQp => "single-qp",
        }
    }
}

/// A pattern's policy: `default` (= `engine.policy`) or one of the policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PatternPolicy {
    /// Whatever `engine.policy` says.
    #[default]
    Default,
    Dqplb,
    DqplbLed,
    StaticSplit,
    RoundRobinMessage,
    SingleQp,
}

impl PatternPolicy {
    /// The policy this resolves to under `engine` (the configured one for `Default`).
    pub fn resolve(self, engine: PolicyName) -> PolicyName {
        match self {
            PatternPolicy::Default => engine,
            PatternPolicy::Dqplb => PolicyName::Dqplb,
            PatternPolicy::DqplbLed => PolicyName::DqplbLed,
            PatternPolicy::StaticSplit => PolicyName::StaticSplit,
            PatternPolicy::RoundRobinMessage => PolicyName::RoundRobinMessage,
            PatternPolicy::SingleQp => PolicyName::SingleQp,
        }
    }
}

/// `[patterns]`: the policy per NCCL traffic pattern, picked per message from NCCL's setNetAttr
/// hints (net ABI v11+, NCCL 2.28+). Older NCCL gives no hints: every message runs `engine.policy`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct PatternsSection {
    /// Ring/tree collectives (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce).
    pub collective: PatternPolicy,
    /// Point-to-point send/recv with fewer than `alltoall-min-peers` concurrent peers.
    pub p2p: PatternPolicy,
    /// All-to-all, scatter, gather, and send/recv batches with many concurrent peers.
    pub alltoall: PatternPolicy,
    /// Data QPs the all-to-all policy uses (0 = all of the connection's).
    pub alltoall_qps: u32,
    /// Concurrent peers from which a send/recv transfer counts as all-to-all.
    pub alltoall_min_peers: u32,
}

impl Default for PatternsSection {
    fn default() -> Self {
        // NCCLX moved all-to-all from DQPLB to spray over 4 QPs (many concurrent all-to-alls
        // did badly with DQPLB's per-QP windows on every peer): static-split over 4 QPs here.
        PatternsSection {
            collective: PatternPolicy::Default,
            p2p: PatternPolicy::Default,
            alltoall: PatternPolicy::StaticSplit,
            alltoall_qps: 4,
            alltoall_min_peers: 8,
        }
    }
}

/// `[engine]`: segmentation and per-connection limits shared by all classes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EngineSection {
    pub policy: PolicyName,
    pub segment_bytes: u64,
    pub max_messages: u32,
    pub inflight_budget_bytes: u64,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            // dqplb-led steers at any window and ties dqplb when QPs fill: it won every
            // simulated comparison (docs/records/simulation.md, "Least expected delay").
            policy: PolicyName::DqplbLed,
            // Below NCCL's p2p chunk (128 KiB) and Simple step (512 KiB): one NCCL step is several
            // segments, so a slow QP's window can fill and the policy moves the rest elsewhere.
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_messages: 32,
            inflight_budget_bytes: 1024 * 1024 * KIB,
        }
    }
}

/// One connection class: the path's rate and RTT, and the QP fan-out and depth limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClassSpec {
    pub rate_gbps: f64,
    pub rtt_us: f64,
    pub qps: u32,
    pub min_outstanding: u32,
    pub max_outstanding: u32,
    /// Overrides `[engine] segment-bytes` for this class when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
    /// Straggler re-hash: a QP whose completions stay this many times the connection's median
    /// latency ...
    pub rehash_ratio: f64,
    /// ... for this many consecutive completions is drained and replaced (TCP: a new stream).
    pub rehash_window: u32,
    /// No re-hash within this long of the previous one on the connection.
    pub rehash_cooldown_ms: u64,
    /// At most this many re-hashes per connection per minute; 0 turns re-hashing off.
    pub rehash_max_per_minute: u32,
    /// A data QP with a segment unacknowledged this long is a failed (blackholed) path; 0: off.
    pub stall_timeout_ms: u64,
    /// Source ports chosen per QP from `[paths]` (relative, absolute) or left to the NIC (off).
    pub path_pinning: PathPinning,
    /// ECMP members (paths) the class's traffic spreads over, S; unset: the class's `qps`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecmp_width: Option<u32>,
    /// Depth rule: the per-QP window rises while the slowest QP's latency EWMA is at least this
    /// many times the connection's median ...
    pub depth_ratio: f64,
    /// ... to this many segments per QP (0: the rule off; unset: on for a pinned class at
    /// [`ClassSpec::depth_rule`]'s default, off otherwise) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth_raised: Option<u32>,
    /// ... and falls back after this many checks (16 completions each) without divergence.
    pub depth_hold: u32,
    /// Trial re-pins on the depth rule (verbs, pinned classes): a data QP the slowest at this
    /// many times the median ...
    pub repin_ratio: f64,
    /// ... for this many consecutive checks (0: off; unset: [`REPIN_PERSIST_DEFAULT`] where the
    /// class pins and runs the depth rule) moves onto the fastest QP's source port ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repin_persist: Option<u32>,
    /// ... and is judged after this many completions there (kept if faster, else moved back) ...
    pub repin_settle: u32,
    /// ... at most this many moves per connection.
    pub repin_budget: u32,
}

/// The re-pin rule a class runs (`ClassSpec::repin_rule`): the engine's `RepinRule`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RepinRuleSpec {
    pub ratio: f64,
    pub persist: u32,
    pub settle: u32,
    pub budget: u32,
}

/// `repin-ratio` default: the same QP the slowest at 1.3 x the median (docs/records/simulation.md,
/// "Trial re-pins onto the fastest QP's path": moves nothing on healthy pinned rings).
pub const REPIN_RATIO_DEFAULT: f64 = 1.3;
/// `repin-persist` default: 6 consecutive checks (96 completions).
pub const REPIN_PERSIST_DEFAULT: u32 = 6;
/// `repin-settle` default: 16 completions on the new path before the move is judged.
pub const REPIN_SETTLE_DEFAULT: u32 = 16;
/// `repin-budget` default: 16 moves per connection.
pub const REPIN_BUDGET_DEFAULT: u32 = 16;

/// The depth rule a class runs (`ClassSpec::depth_rule`): the engine's `DepthRule`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DepthRuleSpec {
    pub ratio: f64,
    /// Segments in flight per QP while raised: always above the class's `max-outstanding`.
    pub raised: u32,
    pub hold: u32,
}

/// `depth-ratio` default: the slowest QP at 1.25 x the median (docs/records/simulation.md, "The
/// depth rule against failed uplinks": the best of the grid that keeps healthy pinned rings at 97%
/// or more; 1.2 and below fire on healthy pinned connections, 1.5 misses broken pins).
pub const DEPTH_RATIO_DEFAULT: f64 = 1.25;
/// `depth-hold` default: 4 calm checks (64 completions) before the depth falls back.
pub const DEPTH_HOLD_DEFAULT: u32 = 4;
/// A pinned class without `depth-raised` runs `max-outstanding` + this many segments per QP
/// while its QPs' latencies diverge.
pub const DEPTH_RAISE_DEFAULT: u32 = 1;

impl ClassSpec {
    /// The built-in defaults of a class (design table: rack-local, cross-rack, cross-DC).
    pub(crate) fn default_for(class: ConnClass) -> ClassSpec {
        // Windows (qps x max-outstanding x 64 KiB) below what NCCL keeps in flight per
        // connection (8 steps of 512 KiB = 4 MiB for collectives, 8 x 128 KiB = 1 MiB for p2p;
        // see `NCCL_STEPS`), so a slow QP's window fills and the engine steers:
        // same-rail 4 x 2 = 512 KiB (about 2.5 x its 200 KB BDP), cross-rail 8 x 2 = 1 MiB
        // (1.7 x 600 KB), cross-dc 16 x 3 = 3 MiB (NCCL's own 4 MiB bounds a 2 ms path anyway).
        let (rtt_us, qps, min_outstanding, max_outstanding) = match class {
            ConnClass::SameRail => (4.0, 4, 1, 2),
            ConnClass::CrossRail => (12.0, 8, 1, 2),
            ConnClass::CrossDc => (2000.0, 16, 1, 3),
        };
        ClassSpec {
            rate_gbps: 400.0,
            rtt_us,
            qps,
            min_outstanding,
            max_outstanding,
            segment_bytes: None,
            rehash_ratio: 1.5,
            rehash_window: 64,
            rehash_cooldown_ms: 1000,
            // Off until the port-hash shaped-path bench has measured it.
            rehash_max_per_minute: 0,
            stall_timeout_ms: 2000,
            // Off: pinning needs the site's switch hash (family, hashed fields' order, E-ECMP),
            // which a built-in default cannot know (docs/configuration.md, [paths]).
            path_pinning: PathPinning::Off,
            ecmp_width: None,
            depth_ratio: DEPTH_RATIO_DEFAULT,
            // Unset: on for a pinned class, off otherwise (`ClassSpec::depth_rule`).
            depth_raised: None,
            depth_hold: DEPTH_HOLD_DEFAULT,
            repin_ratio: REPIN_RATIO_DEFAULT,
            // Unset: on where the class pins and runs the depth rule (`ClassSpec::repin_rule`).
            repin_persist: None,
            repin_settle: REPIN_SETTLE_DEFAULT,
            repin_budget: REPIN_BUDGET_DEFAULT,
        }
    }
}

/// A class table as written in the file: every key optional, missing ones take the class default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawClassSpec {
    rate_gbps: Option<f64>,
    rtt_us: Option<f64>,
    qps: Option<u32>,
    min_outstanding: Option<u32>,
    max_outstanding: Option<u32>,
    segment_bytes: Option<u64>,
    rehash_ratio: Option<f64>,
    rehash_window: Option<u32>,
    rehash_cooldown_ms: Option<u64>,
    rehash_max_per_minute: Option<u32>,
    stall_timeout_ms: Option<u64>,
    path_pinning: Option<PathPinning>,
    ecmp_width: Option<u32>,
    depth_ratio: Option<f64>,
    depth_raised: Option<u32>,
    depth_hold: Option<u32>,
    repin_ratio: Option<f64>,
    repin_persist: Option<u32>,
    repin_settle: Option<u32>,
    repin_budget: Option<u32>,
}

impl RawClassSpec {
    fn over(self, base: ClassSpec) -> ClassSpec {
        ClassSpec {
            rate_gbps: self.rate_gbps.unwrap_or(base.rate_gbps),
            rtt_us: self.rtt_us.unwrap_or(base.rtt_us),
            qps: self.qps.unwrap_or(base.qps),
            min_outstanding: self.min_outstanding.unwrap_or(base.min_outstanding),
            max_outstanding: self.max_outstanding.unwrap_or(base.max_outstanding),
            segment_bytes: self.segment_bytes.or(base.segment_bytes),
            rehash_ratio: self.rehash_ratio.unwrap_or(base.rehash_ratio),
            rehash_window: self.rehash_window.unwrap_or(base.rehash_window),
            rehash_cooldown_ms: self.rehash_cooldown_ms.unwrap_or(base.rehash_cooldown_ms),
            rehash_max_per_minute: self
                .rehash_max_per_minute
                .unwrap_or(base.rehash_max_per_minute),
            stall_timeout_ms: self.stall_timeout_ms.unwrap_or(base.stall_timeout_ms),
            path_pinning: self.path_pinning.unwrap_or(base.path_pinning),
            ecmp_width: self.ecmp_width.or(base.ecmp_width),
            depth_ratio: self.depth_ratio.unwrap_or(base.depth_ratio),
            depth_raised: self.depth_raised.or(base.depth_raised),
            depth_hold: self.depth_hold.unwrap_or(base.depth_hold),
            repin_ratio: self.repin_ratio.unwrap_or(base.repin_ratio),
            repin_persist: self.repin_persist.or(base.repin_persist),
            repin_settle: self.repin_settle.unwrap_or(base.repin_settle),
            repin_budget: self.repin_budget.unwrap_or(base.repin_budget),
        }
    }
}

fn class_from<'de, D: Deserializer<'de>>(d: D, class: ConnClass) -> Result<ClassSpec, D::Error> {
    RawClassSpec::deserialize(d).map(|raw| raw.over(ClassSpec::default_for(class)))
}

fn de_same_rail<'de, D: Deserializer<'de>>(d: D) -> Result<ClassSpec, D::Error> {
    class_from(d, ConnClass::SameRail)
}

fn de_cross_rail<'de, D: Deserializer<'de>>(d: D) -> Result<ClassSpec, D::Error> {
    class_from(d, ConnClass::CrossRail)
}

fn de_cross_dc<'de, D: Deserializer<'de>>(d: D) -> Result<ClassSpec, D::Error> {
    class_from(d, ConnClass::CrossDc)
}

fn default_same_rail() -> ClassSpec {
    ClassSpec::default_for(ConnClass::SameRail)
}

fn default_cross_rail() -> ClassSpec {
    ClassSpec::default_for(ConnClass::CrossRail)
}

fn default_cross_dc() -> ClassSpec {
    ClassSpec::default_for(ConnClass::CrossDc)
}

/// `[class.same-rail]`, `[class.cross-rail]`, `[class.cross-dc]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClassSections {
    #[serde(default = "default_same_rail", deserialize_with = "de_same_rail")]
    pub same_rail: ClassSpec,
    #[serde(default = "default_cross_rail", deserialize_with = "de_cross_rail")]
    pub cross_rail: ClassSpec,
    #[serde(default = "default_cross_dc", deserialize_with = "de_cross_dc")]
    pub cross_dc: ClassSpec,
}

impl Default for ClassSections {
    fn default() -> Self {
        ClassSections {
            same_rail: default_same_rail(),
            cross_rail: default_cross_rail(),
            cross_dc: default_cross_dc(),
        }
    }
}

impl ClassSections {
    /// The spec of one class.
    pub fn get(&self, class: ConnClass) -> &ClassSpec {
        match class {
            ConnClass::SameRail => &self.same_rail,
            ConnClass::CrossRail => &self.cross_rail,
            ConnClass::CrossDc => &self.cross_dc,
        }
    }
}

/// `[tcp]`: the TCP fallback transport's socket options.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct TcpSection {
    /// SO_SNDBUF / SO_RCVBUF in bytes; 0 keeps the kernel default.
    pub socket_buffer_bytes: u64,
    pub nodelay: bool,
    /// fabricId of this node's TCP devices (TCP has no NCCL_IB_HCA entry to carry one).
    pub fabric_id: u32,
    /// When non-zero, the connecting side binds stream i (0 = control) to source port base + i,
    /// so each data stream can be shaped or traced by port (scripts/paths-bench.sh).
    pub src_port_base: u16,
    /// Segment of TCP connections whose class sets no `segment-bytes` and does not pin paths,
    /// lowered so the window stays within half of NCCL's data in flight (`tcp_segment`); 0: the
    /// engine's segment.
    pub segment_bytes: u64,
}

impl Default for TcpSection {
    fn default() -> Self {
        TcpSection {
            socket_buffer_bytes: 0,
            nodelay: true,
            fabric_id: 0,
            src_port_base: 0,
            segment_bytes: super::tcp_segment::DEFAULT_TCP_SEGMENT_BYTES,
        }
    }
}

/// `[stats]`: per-connection statistics logging.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct StatsSection {
    pub log_on_close: bool,
    /// Periodic per-QP statistics log interval (INFO); 0 disables periodic logging.
    pub log_interval_ms: u64,
    /// Per-QP statistics file the plugin rewrites (`%p` = process id, `%h` = host name); empty:
    /// none. Read with `dqplb stats`.
    pub file: String,
    /// How often the statistics file is rewritten, at most once a second.
    pub file_interval_ms: u64,
    /// Directory of a node exporter textfile collector: the plugin writes `dqplb_<pid>.prom`
    /// there (temporary file, then rename) whenever it rewrites the statistics; empty: none.
    pub textfile_dir: String,
    /// Also label the textfile's series with the process id and the peer address.
    pub textfile_pid_peer: bool,
}

impl Default for StatsSection {
    fn default() -> Self {
        StatsSection {
            log_on_close: true,
            log_interval_ms: 0,
            file: String::new(),
            file_interval_ms: 1000,
            textfile_dir: String::new(),
            textfile_pid_peer: false,
        }
    }
}

/// A log level override for the plugin's own messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    Warn,
    Info,
    Trace,
}

impl LogLevel {
    /// The spelling used in the config file and environment.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Trace => "trace",
        }
    }
}

/// `[log]`: optional level override (otherwise NCCL's logger level applies).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LogSection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<LogLevel>,
}

impl ClassSpec {
    /// S: the ECMP members the class spreads over (`ecmp-width`, else `qps`).
    pub fn ecmp_width(&self) -> u32 {
        self.ecmp_width.unwrap_or(self.qps)
    }

    /// The depth rule this class's send comms install, if any: `depth-raised` when set (0: none),
    /// else, for a pinned class, `max-outstanding` + [`DEPTH_RAISE_DEFAULT`] (capped at 256);
    /// none for a class that does not pin (hashed QPs rarely share a path for long: the window is
    /// what lets the engine steer off a slow one).
    pub fn depth_rule(&self) -> Option<DepthRuleSpec> {
        let raised = match (self.depth_raised, self.path_pinning) {
            (Some(0), _) | (None, PathPinning::Off) => return None,
            (Some(r), _) => r,
            (None, _) => (self.max_outstanding + DEPTH_RAISE_DEFAULT).min(256),
        };
        (raised > self.max_outstanding).then_some(DepthRuleSpec {
            ratio: self.depth_ratio,
            raised,
            hold: self.depth_hold,
        })
    }

    /// The re-pin rule this class's verbs send comms install on the depth rule, if any: none
    /// without the depth rule or without pinning (the moves take another QP's source port), or
    /// with `repin-persist = 0`.
    pub fn repin_rule(&self) -> Option<RepinRuleSpec> {
        if self.path_pinning == PathPinning::Off || self.depth_rule().is_none() {
            return None;
        }
        let persist = self.repin_persist.unwrap_or(REPIN_PERSIST_DEFAULT);
        (persist > 0).then_some(RepinRuleSpec {
            ratio: self.repin_ratio,
            persist,
            settle: self.repin_settle,
            budget: self.repin_budget,
        })
    }

    /// Segments in flight per data QP the transport must hold room for: the raised depth when the
    /// class runs the depth rule, else `depth` (the plan's).
    pub fn depth_bound(&self, depth: u32) -> u32 {
        self.depth_rule().map_or(depth, |r| r.raised.max(depth))
    }
}

impl SiteConfig {
    /// The segment size a class uses: its own override, else, for a pinned class, NCCL's step
    /// over its ECMP width (`pinning::pinned_segment_bytes`), else the engine's.
    pub fn segment_bytes_for(&self, class: ConnClass) -> u64 {
        let spec = self.class.get(class);
        match (spec.segment_bytes, spec.path_pinning) {
            (Some(s), _) => s,
            (None, PathPinning::Off) => self.engine.segment_bytes,
            (None, _) => super::pinning::pinned_segment_bytes(spec.ecmp_width()),
        }
    }
}
