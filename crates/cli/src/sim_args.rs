//! The command line of `dqplb sim` and `dqplb sim sweep` (clap): the simulator's settings, kept in
//! command-line order (later ones override earlier ones), and the value parsers `[fabric.sim]` shares.

use std::marker::PhantomData;

use clap::{ArgMatches, Command, FromArgMatches};

use dqplb_dcqcn::RpParams;
use dqplb_sim::packet::dcqcn_profile;
use dqplb_sim::{FabricSpec, Mode, Placement, SimPolicy, SourcePort, TrafficKind};

use crate::check::AlphaUpdate;
use crate::sim_sweep_class::Class;
use crate::units::{bytes, num, ranged};

/// The exit status line under `dqplb sim --help`.
pub(crate) const EXIT: &str = "\
[fabric.sim] in the --config file takes the same settings as keys without the dashes; the
command line wins over it.
exit status: 0 success, 1 the simulation found engine/protocol errors, 2 bad input";

/// How `dqplb sim` (and the sweep) print their results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum SimFormat {
    #[default]
    Table,
    Json,
    Csv,
}

/// Settings of type `D` (a derived `clap::Args` whose fields name, document and check them) as
/// they came on the command line: (name without the dashes, text), in command-line order, so
/// that a later one overrides an earlier one (--preset after --hosts, or before it) and so that
/// they apply as the `[fabric.sim]` keys of the same names do (`sim::apply`).
#[derive(Debug)]
pub(crate) struct Ordered<D> {
    settings: Vec<(usize, String, String)>,
    defs: PhantomData<fn() -> D>,
}

/// (name, value) of `settings`, by their index on the command line.
fn in_order<'a>(
    settings: impl Iterator<Item = &'a (usize, String, String)>,
) -> Vec<(String, String)> {
    let mut all: Vec<_> = settings.collect();
    all.sort_by_key(|s| s.0);
    all.into_iter()
        .map(|(_, name, value)| (name.clone(), value.clone()))
        .collect()
}

impl<D> Ordered<D> {
    /// The settings in command-line order.
    pub(crate) fn pairs(&self) -> Vec<(String, String)> {
        in_order(self.settings.iter())
    }

    /// The settings of `self` and `other` (flattened into one command) in command-line order.
    pub(crate) fn merged<E>(&self, other: &Ordered<E>) -> Vec<(String, String)> {
        in_order(self.settings.iter().chain(&other.settings))
    }
}

impl<D: clap::Args> FromArgMatches for Ordered<D> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let defs = D::augment_args(Command::new("settings"));
        let mut settings = Vec::new();
        for arg in defs.get_arguments() {
            let id = arg.get_id().as_str();
            let (Some(name), Some(index)) = (arg.get_long(), m.index_of(id)) else {
                continue;
            };
            // Every option is set once (a repeat overrides): its last value.
            if let Some(raw) = m.get_raw(id).and_then(|mut v| v.next_back()) {
                settings.push((index, name.to_string(), raw.to_string_lossy().into_owned()));
            }
        }
        Ok(Ordered {
            settings,
            defs: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<D: clap::Args> clap::Args for Ordered<D> {
    fn augment_args(cmd: Command) -> Command {
        D::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        D::augment_args_for_update(cmd)
    }
}

/// `--policy`: a comma list of simulator policies.
pub(crate) fn policies(v: &str) -> Result<Vec<SimPolicy>, String> {
    v.split(',').map(SimPolicy::parse).collect()
}

/// `--qps` (`dqplb sim`): a comma list of QP counts.
pub(crate) fn qps_list(v: &str) -> Result<Vec<usize>, String> {
    v.split(',').map(num).collect()
}

/// `--segment`: a byte count that fits 32 bits.
pub(crate) fn segment32(v: &str) -> Result<u32, String> {
    u32::try_from(bytes(v)?).map_err(|_| format!("{v} does not fit 32 bits"))
}

/// `--source-port`: qpn, a fixed port (`fixed:P` or `P`), pinned or pinned-absolute.
pub(crate) fn source_port(v: &str) -> Result<SourcePort, String> {
    match v {
        "qpn" => return Ok(SourcePort::FromQpn),
        "pinned" => return Ok(SourcePort::Pinned),
        "pinned-absolute" => return Ok(SourcePort::PinnedAbsolute),
        // E-ECMP's usual setting: one port (the lowest verbs reaches); the command line also
        // switches --hash-dest-qpn on for it (sim.rs).
        "fixed" => return Ok(SourcePort::Fixed(0xC000)),
        _ => {}
    }
    let p = v.strip_prefix("fixed:").unwrap_or(v);
    num(p).map(SourcePort::Fixed)
}

/// `--dci-latency-us`: microseconds, 0 ..= 100000, to picoseconds.
pub(crate) fn dci_latency_ps(v: &str) -> Result<u64, String> {
    let us: f64 = num(v)?;
    if !(us.is_finite() && (0.0..=100_000.0).contains(&us)) {
        return Err("microseconds in 0 ..= 100000 (0 = the hop latency)".to_string());
    }
    Ok((us * 1e6).round() as u64)
}

/// `--fattree-k`: a fat tree's k (even, 2 ..= 128).
pub(crate) fn fattree_k(v: &str) -> Result<usize, String> {
    let k: usize = num(v)?;
    FabricSpec::fattree(k, &FabricSpec::default())?;
    Ok(k)
}

/// `--preset fattree-kK`: the k of the fat tree.
pub(crate) fn preset(v: &str) -> Result<usize, String> {
    let k = v
        .strip_prefix("fattree-k")
        .ok_or_else(|| format!("unknown preset '{v}' (fattree-k<K>, e.g. fattree-k8)"))?;
    fattree_k(k)
}

/// `--placement`.
pub(crate) fn placement(v: &str) -> Result<Placement, String> {
    match v {
        "contiguous" => Ok(Placement::Contiguous),
        "fragmented" => Ok(Placement::Fragmented),
        "leaf-ordered" => Ok(Placement::LeafOrdered),
        _ => Err("not contiguous, fragmented or leaf-ordered".to_string()),
    }
}

/// `--ecn`: on (true, 1) or off (false, 0).
pub(crate) fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err("not on or off".to_string()),
    }
}

/// `--hash-dest-qpn[=V]`: true, 1 or yes switch it on; any other value off.
pub(crate) fn yes(v: &str) -> Result<bool, String> {
    Ok(matches!(v, "true" | "1" | "yes"))
}

/// `--pfc[=V]`: true, 1, yes or on switch it on; any other value off.
pub(crate) fn yes_on(v: &str) -> Result<bool, String> {
    Ok(matches!(v, "true" | "1" | "yes" | "on"))
}

/// A finite number, 0 or more (`what` is the message otherwise).
fn non_negative(v: &str, what: &str) -> Result<f64, String> {
    let x: f64 = num(v)?;
    if !(x.is_finite() && x >= 0.0) {
        return Err(what.to_string());
    }
    Ok(x)
}

/// `--buffer-kb`: kB, 0 (unbounded) or more.
pub(crate) fn buffer_kb(v: &str) -> Result<f64, String> {
    non_negative(v, "kB, 0 (unbounded) or more")
}

/// `--sample-us`: microseconds, 0 or more.
pub(crate) fn sample_us(v: &str) -> Result<f64, String> {
    non_negative(v, "microseconds, 0 or more")
}

/// `--p2p-batches`: 1 or more.
pub(crate) fn p2p_batches(v: &str) -> Result<u32, String> {
    match num(v)? {
        0 => Err("must be 1 or more".to_string()),
        n => Ok(n),
    }
}

/// `--dcqcn` (`dqplb sim`): a reaction-point profile.
fn dcqcn(v: &str) -> Result<RpParams, String> {
    dcqcn_profile(v)
}

/// The settings `dqplb sim` and `dqplb sim sweep` share (and `[fabric.sim]` takes as keys), by
/// help section.
#[derive(Debug, clap::Args)]
pub(crate) struct SimSettings {
    #[command(flatten)]
    fabric: FabricSettings,
    #[command(flatten)]
    engine: EngineSettings,
    #[command(flatten)]
    traffic: TrafficSettings,
    #[command(flatten)]
    run: RunSettings,
    #[command(flatten)]
    packet: PacketSettings,
    #[command(flatten)]
    series: SeriesSettings,
}

/// `dqplb sim` settings, fabric: the topology, its failures and its hashing.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Fabric (rail-optimized leaf-spine, one fabric per rail)")]
struct FabricSettings {
    /// Hosts (default 64)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    hosts: Option<usize>,
    /// NICs/rails per host (8)
    #[arg(long, value_name = "R", value_parser = num::<usize>)]
    rails: Option<usize>,
    /// Hosts under a leaf (32)
    #[arg(long, value_name = "H", value_parser = num::<usize>)]
    hosts_per_leaf: Option<usize>,
    /// Sets --hosts-per-leaf to ceil(hosts / L)
    #[arg(long, value_name = "L", value_parser = ranged(1usize, usize::MAX))]
    leaves: Option<usize>,
    /// Spines per rail (32)
    #[arg(long, value_name = "S", value_parser = num::<usize>)]
    spines: Option<usize>,
    /// Leaf down/up capacity (1)
    #[arg(long, value_name = "O", value_parser = num::<f64>, allow_negative_numbers = true)]
    oversub: Option<f64>,
    /// NIC rate in Gb/s (400)
    #[arg(long, value_name = "G", value_parser = num::<f64>, allow_negative_numbers = true)]
    host_gbps: Option<f64>,
    /// Latency per hop in ns (1000)
    #[arg(long, value_name = "T", value_parser = num::<u64>)]
    hop_latency_ns: Option<u64>,
    /// Third tier: leafs in P pods, each pod's spines (aggregation) wired to --cores core
    /// switches (0: two tiers, the default)
    #[arg(long, value_name = "P", value_parser = num::<usize>)]
    pods: Option<usize>,
    /// Core switches (default spines x leafs per pod)
    #[arg(long, value_name = "C", value_parser = num::<usize>)]
    cores: Option<usize>,
    /// Each pod a data centre: latency of every aggregation -> core hop, the DC interconnect
    /// span (0 = --hop-latency-ns; up to 100000); between DCs one way is 5 hops + U
    #[arg(long, value_name = "U", value_parser = dci_latency_ps, allow_negative_numbers = true)]
    dci_latency_us: Option<u64>,
    /// Aggregation-core rate / R (1)
    #[arg(long, value_name = "R", value_parser = num::<f64>, allow_negative_numbers = true)]
    dci_oversub: Option<f64>,
    /// K-ary fat tree, e.g. fattree-k8 (= --fattree-k 8): K pods of K/2 leafs and K/2 aggs,
    /// (K/2)^2 cores, K^3/4 hosts, 1 rail; later options override
    #[arg(long, value_name = "fattree-kK", value_parser = preset)]
    preset: Option<usize>,
    /// The fat tree of --preset fattree-kK
    #[arg(long, value_name = "K", value_parser = fattree_k)]
    fattree_k: Option<usize>,
    /// Switch-switch links down per rail, any tier (0)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    failed_links: Option<usize>,
    /// Switch-switch links at --slow-factor of their rate (0)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    slow_links: Option<usize>,
    /// Rate factor of the slow links (0.5)
    #[arg(long, value_name = "F", value_parser = num::<f64>, allow_negative_numbers = true)]
    slow_factor: Option<f64>,
    /// qpn (mlx5's derivation from the QPNs, default), a fixed port (P or fixed:P; with
    /// --hash-dest-qpn: E-ECMP; fixed alone: 49152 and --hash-dest-qpn), pinned (the pinning module's relative ports: a NIC pair's QPs
    /// on distinct spines of a power-of-two group of --spines, seed unknown) or pinned-absolute
    /// (the switch's hash known in full: ports searched over the live group)
    #[arg(long, value_name = "P", value_parser = source_port)]
    source_port: Option<SourcePort>,
    /// E-ECMP: switches also hash the BTH destination QPN
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", value_parser = yes)]
    hash_dest_qpn: Option<bool>,
    /// Spray: each QP sprays over K paths of its ECMP group, drawn once (htsim's -paths; 0 =
    /// all, the default)
    #[arg(long, value_name = "K", value_parser = num::<usize>)]
    spray_paths: Option<usize>,
}

/// `dqplb sim` settings, engine: the policies and the re-hash rule (the shape: [`ShapeSettings`]).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = ENGINE)]
struct EngineSettings {
    /// Single-qp, static-split, round-robin-message, dqplb, dqplb-led (least expected delay),
    /// spray, dqplb-rehash (dqplb with the engine's straggler re-hash rule), dqplb-led-rehash,
    /// lp-split (an oracle, not a NIC policy: each connection splits over its q hashed paths as
    /// the split bound does, knowing every path; 64 sub-QPs of --outstanding each), nccl (stock
    /// NCCL: --nccl-qps QPs per channel, a whole message per QP in turn; nccl-split: each
    /// message split over them) (comma list)
    #[arg(long, value_name = "LIST", value_parser = policies)]
    policy: Option<std::vec::Vec<SimPolicy>>,
    /// nccl: NCCL_IB_QPS_PER_CONNECTION, QPs per channel's connection (NCCL's default 1)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    nccl_qps: Option<usize>,
    /// nccl: NCCL_IB_SPLIT_DATA_ON_QPS=1, each message split over the QPs (as --policy
    /// nccl-split)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", value_parser = yes)]
    nccl_split: Option<bool>,
    /// dqplb-rehash: slow = K x the connection's median latency (2)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    rehash_ratio: Option<f64>,
    /// ... for W consecutive completions (16)
    #[arg(long, value_name = "W", value_parser = num::<u32>)]
    rehash_window: Option<u32>,
    /// ... at most one per C us (50)
    #[arg(long, value_name = "C", value_parser = num::<u64>)]
    rehash_cooldown_us: Option<u64>,
    /// ... at most N per ms (4)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    rehash_budget: Option<u32>,
    /// Depth rule (any of the three installs it): raise each QP's window while the slowest
    /// QP's latency is K x the connection's median (1.5)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    depth_ratio: Option<f64>,
    /// ... to D segments per QP (3)
    #[arg(long, value_name = "D", value_parser = num::<u32>)]
    depth_raised: Option<u32>,
    /// ... back to --outstanding after H checks (16 completions each) without divergence (4)
    #[arg(long, value_name = "H", value_parser = num::<u32>)]
    depth_hold: Option<u32>,
    /// Trial re-pins on the depth rule (any of the four installs them; needs the depth rule): a
    /// QP the slowest at K x the median (1.3) ...
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    repin_ratio: Option<f64>,
    /// ... for P consecutive checks (6) moves onto the fastest QP's path ...
    #[arg(long, value_name = "P", value_parser = num::<u32>)]
    repin_persist: Option<u32>,
    /// ... kept if after S completions there (16) it is faster than before and below K x the
    /// median, else moved back ...
    #[arg(long, value_name = "S", value_parser = num::<u32>)]
    repin_settle: Option<u32>,
    /// ... at most N moves per connection (16)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    repin_budget: Option<u32>,
}

/// `dqplb sim` settings, traffic: the collective or pattern and its sizes.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Traffic")]
struct TrafficSettings {
    /// ring (all-reduce, default), tree (NCCL's double binary tree all-reduce), permutation,
    /// leaf-shift, all-to-all, incast (every host sends --bytes to the first one: N-to-1),
    /// cross-dc (every host to a seeded host of the next pod: needs --pods), cross-rail (one
    /// round of an all-to-all without PXN: rail r's GPU to rail r+1's GPU of a seeded other
    /// host; all rails under one spine tier), cross-rail-all-to-all (the whole all-to-all
    /// without PXN, GPU to GPU of every other host, in NCCL's p2p schedule; one plane as
    /// cross-rail)
    #[arg(long, value_name = "T", value_parser = TrafficKind::parse)]
    traffic: Option<TrafficKind>,
    /// ring, tree: buffer per GPU; permutation/leaf-shift: per connection; all-to-all: send
    /// buffer per GPU (default 1G; K/M/G suffixes)
    #[arg(long, value_name = "B", value_parser = bytes)]
    bytes: Option<u64>,
    /// cross-rail-all-to-all: batches of 8 p2p rounds in flight at once (one phase each, a
    /// barrier between; NCCL's channels run several: default 1)
    #[arg(long, value_name = "K", value_parser = p2p_batches)]
    p2p_batches: Option<u32>,
    /// NCCL step / message size (512K; cross-rail-all-to-all: 128K, NCCL's P2P_NET_CHUNKSIZE)
    #[arg(long, value_name = "B", value_parser = bytes)]
    step_bytes: Option<u64>,
    /// NCCL_STEPS (8)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    slots: Option<u32>,
    /// Connections per rank pair, NCCL's channels, each carrying its share of the bytes with its
    /// own slots; every policy runs over them (NCCL connects each channel). Ring, permutation,
    /// leaf-shift, all-to-all, incast. Default 1, or 2 when --policy names nccl (NCCL
    /// duplicates its ring channels, src/graph/connect.cc)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    channels: Option<u32>,
    /// contiguous (default), fragmented (seeded random host order) or leaf-ordered (ranks
    /// grouped by leaf, the leaves in a seeded random order)
    #[arg(long, value_name = "P", value_parser = placement)]
    placement: Option<Placement>,
    /// Ring only: simulate N of the 2(n-1) steps and scale the time (0 = all)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    max_steps: Option<u32>,
    /// A second job: the last N hosts of the placement run a permutation of step-size
    /// messages while the collective runs on the others (endless unless
    /// --background-messages)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    background_hosts: Option<usize>,
    /// Messages each background host sends (0: idle hosts)
    #[arg(long, value_name = "N", value_parser = num::<u32>)]
    background_messages: Option<u32>,
}

/// `dqplb sim` settings, run: the model, the seed, the threads, the output.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Run")]
struct RunSettings {
    /// f (fluid max-min, default), b (per segment) or p (per packet)
    #[arg(long, value_name = "M", value_parser = Mode::parse)]
    mode: Option<Mode>,
    /// Seed (default 1)
    #[arg(long, value_name = "S", value_parser = num::<u64>)]
    seed: Option<u64>,
    /// Rails in parallel (2)
    #[arg(long, value_name = "T", value_parser = num::<usize>)]
    threads: Option<usize>,
    /// F mode: re-solve at most every U us (default 5; 0 = at every change)
    #[arg(long, value_name = "U", value_parser = num::<f64>, allow_negative_numbers = true)]
    epoch_us: Option<f64>,
    /// Simulate only N rails (they are identical up to hashing)
    #[arg(long, value_name = "N", value_parser = num::<usize>)]
    rails_simulated: Option<usize>,
    /// Output format
    #[arg(long, value_enum, value_name = "F")]
    format: Option<SimFormat>,
}

/// `dqplb sim` settings, P mode: packets, ECN, DCQCN, PFC, losses.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = PMODE)]
struct PacketSettings {
    /// Payload bytes per packet (4096)
    #[arg(long, value_name = "B", value_parser = segment32)]
    mtu: Option<u32>,
    /// ECN marking at the switch egress queues (on)
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    ecn: Option<bool>,
    /// No mark below K kB (1 kB = 1000 B; 50)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    ecn_kmin_kb: Option<f64>,
    /// Probability Pmax at K kB, every packet above (2000)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    ecn_kmax_kb: Option<f64>,
    /// Marking probability at Kmax (0.01)
    #[arg(long, value_name = "P", value_parser = num::<f64>, allow_negative_numbers = true)]
    ecn_pmax: Option<f64>,
    /// At most one CNP per QP per U us at the receiver NIC (4, mlx5)
    #[arg(long, value_name = "U", value_parser = num::<f64>, allow_negative_numbers = true)]
    cnp_interval_us: Option<f64>,
    /// DCQCN alpha schedule, overriding the profile's: per-period (NVIDIA's documentation;
    /// firmware's default) or per-cnp (the paper; paper's default)
    #[arg(long, value_enum, value_name = "S")]
    alpha_update: Option<AlphaUpdate>,
    /// Priority flow control: a switch pauses the sender of an ingress link holding
    /// --pfc-xoff-kb not yet forwarded, resumes at --pfc-xon-kb
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", value_parser = yes_on)]
    pfc: Option<bool>,
    /// PFC pause threshold (1000)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    pfc_xoff_kb: Option<f64>,
    /// PFC resume threshold (500)
    #[arg(long, value_name = "K", value_parser = num::<f64>, allow_negative_numbers = true)]
    pfc_xon_kb: Option<f64>,
    /// Connection c starts at c x U us (0)
    #[arg(long, value_name = "U", value_parser = num::<f64>, allow_negative_numbers = true)]
    start_stagger_us: Option<f64>,
    /// Every switch egress holds at most K kB and drops the rest (tail drop; 0 = unbounded,
    /// the default); NICs recover by go-back-N (no --pfc, no spray)
    #[arg(long, value_name = "K", value_parser = buffer_kb, allow_negative_numbers = true)]
    buffer_kb: Option<f64>,
    /// The QPs' local ACK timeout, 4.096 us x 2^T, as NCCL_IB_TIMEOUT (20)
    #[arg(long, value_name = "T", value_parser = num::<u32>)]
    ib_timeout: Option<u32>,
}

/// `dqplb sim` settings, time series.
#[derive(Debug, clap::Args)]
#[command(
    next_help_heading = "Time series (any mode; every --policy/--qps run, its rows led by policy,qps)"
)]
struct SeriesSettings {
    /// Per-QP and per-queue samples as CSV (F mode: per QP only)
    #[arg(long, value_name = "FILE")]
    timeseries: Option<String>,
    /// Sampling period (10 with --timeseries)
    #[arg(long, value_name = "U", value_parser = sample_us, allow_negative_numbers = true)]
    sample_us: Option<f64>,
}

/// The help section of the engine settings.
const ENGINE: &str = "Engine (default dqplb, 8 QPs x 2 outstanding x 128K; with --config the \
                      site's plan for the traffic's class: cross-rail, cross-dc, or same-rail \
                      for the others)";

/// The help section of the P-mode settings.
const PMODE: &str = "P mode (per packet; DCQCN per QP, optional PFC)";

/// The settings of `dqplb sim` that `dqplb sim sweep` takes as its grid instead.
#[derive(Debug, clap::Args)]
pub(crate) struct ShapeSettings {
    /// Data QPs per connection (comma list)
    #[arg(long, value_name = "LIST", value_parser = qps_list,
          help_heading = ENGINE)]
    qps: Option<std::vec::Vec<usize>>,
    /// Segments in flight per QP
    #[arg(long, value_name = "D", value_parser = num::<u32>, help_heading = ENGINE)]
    outstanding: Option<u32>,
    /// Segment bytes (multiple of 128; K/M/G suffixes)
    #[arg(long, value_name = "B", value_parser = segment32, help_heading = ENGINE)]
    segment: Option<u32>,
    /// Reaction-point profile: firmware (mlx5 defaults) or paper (DCQCN paper)
    #[arg(long, value_name = "P", value_parser = dcqcn,
          help_heading = PMODE)]
    dcqcn: Option<RpParams>,
    /// Also write DIR/ideal.svg (% of ideal per policy and q), and per run
    /// DIR/collisions-P-qQ.svg, DIR/heatmap-P-qQ.svg and DIR/uplinks.csv; with samples
    /// (--timeseries; P mode: --sample-us) DIR/timeseries-P-qQ.svg
    #[arg(long, value_name = "DIR", help_heading = "Run")]
    svg: Option<String>,
}

/// `dqplb sim [OPTIONS]` or `dqplb sim sweep [OPTIONS]`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimCmd {
    #[command(flatten)]
    pub(crate) settings: Ordered<SimSettings>,
    #[command(flatten)]
    pub(crate) shape: Ordered<ShapeSettings>,
    /// Site TOML (as dqplb plan reads it, NCCL_DQPLB_* overrides applied) with an optional
    /// [fabric.sim] block; the engine shape from the plan of the traffic's class
    #[arg(long, value_name = "FILE", action = clap::ArgAction::Append, help_heading = "Run")]
    pub(crate) config: Vec<String>,
    /// Report progress on stderr (at most every 5 s) even when stderr is not a terminal
    #[arg(long, help_heading = "Run")]
    pub(crate) progress: bool,
    #[command(subcommand)]
    pub(crate) sweep: Option<SimSub>,
}

/// The subcommand of `dqplb sim`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SimSub {
    /// qps x outstanding x segment: the smallest q near the fluid bound, the shallowest depth
    /// that loses nothing, the largest segment without head-of-line cost, as a site-TOML table
    #[command(long_about = SWEEP_LONG_ABOUT, after_help = SWEEP_EXIT)]
    Sweep(SweepArgs),
}

/// The text under `dqplb sim sweep --help`.
const SWEEP_LONG_ABOUT: &str = "\
Runs one simulation per point of the grid (one policy, default dqplb; --mode b by default) and
prints: the smallest q within --bound-pct of the fluid bound (the best split over the hashed QP
paths, lowest over the grid), the smallest outstanding depth that loses no throughput at that q,
the largest segment without head-of-line cost, and a [class.same-rail] table for the site TOML.

Every other dqplb sim option sets the runs; without --config the defaults are a small fabric:
--hosts 64 --rails 2 --hosts-per-leaf 8 --spines 8 --traffic ring --placement fragmented
--bytes 128M --mode b (seconds for the default grid in release). Without --dcqcn, --mode p runs
every point under the configured profile (dqplb sim --dcqcn).";

/// The exit status line under `dqplb sim sweep --help`.
const SWEEP_EXIT: &str =
    "exit status: 0 success, 1 a run found engine/protocol errors, 2 bad input";

/// A comma list of at least one value (empty items skipped).
fn non_empty_list<T: 'static>(
    f: fn(&str) -> Result<T, String>,
) -> impl Fn(&str) -> Result<Vec<T>, String> + Clone + Send + Sync + 'static {
    move |v| {
        let out: Vec<T> = v
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(&f)
            .collect::<Result<_, _>>()?;
        if out.is_empty() {
            return Err("needs at least one value".to_string());
        }
        Ok(out)
    }
}

/// A sweep segment the site config also takes (segment-bytes: a multiple of 128 in
/// 4 KiB ..= 64 MiB), so the printed snippet is always valid.
fn sweep_segment(v: &str) -> Result<u32, String> {
    let b = bytes(v)?;
    if !(4096..=64 << 20).contains(&b) || !b.is_multiple_of(128) {
        return Err(format!(
            "{v}: a multiple of 128 in 4K ..= 64M (the site config's range)"
        ));
    }
    Ok(b as u32)
}

/// A criterion in percent: finite, 0 or more.
fn percent(v: &str) -> Result<f64, String> {
    non_negative(v, "a percentage, 0 or more")
}

/// `dqplb sim sweep`: its grid, criteria, class and DCQCN axis, then every `dqplb sim` setting.
#[derive(Debug, clap::Args)]
pub(crate) struct SweepArgs {
    /// Data QPs per connection [default: 1,2,4,8,16]
    #[arg(long, value_name = "LIST", value_parser = non_empty_list(num::<usize>),
          help_heading = "Grid (comma lists)")]
    pub(crate) qps: Option<std::vec::Vec<usize>>,
    /// Segments in flight per QP [default: 1,2,4,8]
    #[arg(long, value_name = "LIST", value_parser = non_empty_list(num::<u32>),
          help_heading = "Grid (comma lists)")]
    pub(crate) outstanding: Option<std::vec::Vec<u32>>,
    /// Segment bytes, K/M suffixes [default: 128K,512K,1M]
    #[arg(long, value_name = "LIST", value_parser = non_empty_list(sweep_segment),
          help_heading = "Grid (comma lists)")]
    pub(crate) segment: Option<std::vec::Vec<u32>>,
    /// q: best time over ideal <= (1 + P/100) x the fluid bound
    #[arg(long, value_name = "P", value_parser = percent, default_value = "5",
          allow_negative_numbers = true, help_heading = "Criteria (percent)")]
    pub(crate) bound_pct: f64,
    /// Depth: time <= (1 + P/100) x the best depth's at the same q, segment
    #[arg(long, value_name = "P", value_parser = percent, default_value = "1",
          allow_negative_numbers = true, help_heading = "Criteria (percent)")]
    pub(crate) loss_pct: f64,
    /// Segment: message p99 <= (1 + P/100) x the smallest segment's
    #[arg(long, value_name = "P", value_parser = percent, default_value = "10",
          allow_negative_numbers = true, help_heading = "Criteria (percent)")]
    pub(crate) hol_pct: f64,
    /// same-rail; cross-dc: prints [class.cross-dc], runs --traffic cross-dc on --preset
    /// fattree-k4 --dci-latency-us 100 --bytes 1G --step-bytes 16M --mode b unless given, grid
    /// --qps 1,2,4,8 --outstanding 1,2,4,...,128 --segment 512K,1M,4M, and prints the BDP rule
    /// next to it; cross-rail: prints [class.cross-rail], runs --traffic cross-rail on --hosts
    /// 64 --rails 4 --hosts-per-leaf 16 --spines 16 --bytes 64M --mode b unless given (the
    /// same-rail grid)
    #[arg(long, value_enum, value_name = "C", default_value_t = Class::SameRail,
          help_heading = "Class")]
    pub(crate) class: Class,
    /// firmware, paper, FILE.toml[:PROFILE] (a site config's [dcqcn] profile or a
    /// [profiles.*] file, as dqplb check reads them); every grid point runs once per profile,
    /// q, depth and segment are chosen on the fastest clean profile per point; then the
    /// profile at the chosen point: the fastest, any within --profile-tie-pct counting as tied,
    /// then fewest ECN marks, then lowest peak queue; printed as a [dcqcn] block for the site
    /// TOML
    #[arg(
        long,
        value_name = "LIST",
        help_heading = "DCQCN profile axis (--mode p only)"
    )]
    pub(crate) dcqcn: Option<String>,
    /// Profiles within P% of the fastest's time are tied
    #[arg(long, value_name = "P", value_parser = percent, default_value = "0.5",
          allow_negative_numbers = true, help_heading = "DCQCN profile axis (--mode p only)")]
    pub(crate) profile_tie_pct: f64,
    /// Also write DIR/sweep.svg: per segment a q x outstanding grid of % of ideal, the cells
    /// within --bound-pct and the chosen point marked
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub(crate) svg: Option<String>,
    /// Site TOML with an optional [fabric.sim] block (no small-fabric defaults then)
    #[arg(long, value_name = "FILE", action = clap::ArgAction::Append, help_heading = "Run")]
    pub(crate) config: Vec<String>,
    #[command(flatten)]
    pub(crate) settings: Ordered<SimSettings>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, Cmd};

    fn sim(args: &[&str]) -> Result<SimCmd, clap::Error> {
        let mut all = vec!["sim"];
        all.extend(args);
        match parse(&all)? {
            Cmd::Sim(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn settings_keep_the_command_line_order_and_the_last_repeat() {
        let a = sim(&[
            "--hosts=16",
            "--qps",
            "1,2",
            "--preset",
            "fattree-k4",
            "--pfc",
            "--hosts",
            "8",
            "--config",
            "a.toml",
            "--hash-dest-qpn=no",
            "--segment",
            "64K",
            "--config=b.toml",
        ])
        .unwrap();
        assert_eq!(
            a.settings.merged(&a.shape),
            pairs(&[
                ("qps", "1,2"),
                ("preset", "fattree-k4"),
                ("pfc", "true"),
                ("hosts", "8"),
                ("hash-dest-qpn", "no"),
                ("segment", "64K"),
            ])
        );
        assert_eq!(a.config, ["a.toml", "b.toml"]);
        assert!(a.sweep.is_none());
    }

    #[test]
    fn pinning_channels_and_the_nccl_baseline_parse() {
        assert_eq!(source_port("qpn"), Ok(SourcePort::FromQpn));
        assert_eq!(source_port("pinned"), Ok(SourcePort::Pinned));
        assert_eq!(
            source_port("pinned-absolute"),
            Ok(SourcePort::PinnedAbsolute)
        );
        assert_eq!(source_port("fixed:49152"), Ok(SourcePort::Fixed(49152)));
        assert_eq!(source_port("fixed"), Ok(SourcePort::Fixed(49152)));
        assert!(source_port("pinned-relative").is_err());
        assert_eq!(placement("leaf-ordered"), Ok(Placement::LeafOrdered));
        let a = sim(&[
            "--policy",
            "nccl,dqplb-led",
            "--channels",
            "2",
            "--nccl-qps",
            "4",
            "--nccl-split",
            "--source-port",
            "pinned",
            "--placement",
            "leaf-ordered",
        ])
        .unwrap();
        assert_eq!(
            a.settings.merged(&a.shape),
            pairs(&[
                ("policy", "nccl,dqplb-led"),
                ("channels", "2"),
                ("nccl-qps", "4"),
                ("nccl-split", "true"),
                ("source-port", "pinned"),
                ("placement", "leaf-ordered"),
            ])
        );
    }

    #[test]
    fn values_are_checked_before_anything_runs() {
        use clap::error::ErrorKind;
        let kind = |args: &[&str]| sim(args).unwrap_err().kind();
        for bad in [
            &["--hosts", "x"][..],
            &["--mode", "q"],
            &["--traffic", "trees"],
            &["--policy", "dqplb,ecmp"],
            &["--sample-us", "-5"],
            &["--buffer-kb", "-1"],
            &["--preset", "fattree-k5"],
            &["--fattree-k", "3"],
            &["--ecn", "maybe"],
            &["--segment", "8G"],
            &["--leaves", "0"],
            &["--p2p-batches", "0"],
            &["--dcqcn", "fast"],
        ] {
            assert_eq!(kind(bad), ErrorKind::ValueValidation, "{bad:?}");
        }
        assert_eq!(kind(&["--format", "xml"]), ErrorKind::InvalidValue);
        assert_eq!(
            kind(&["--alpha-update", "per-CNP"]),
            ErrorKind::InvalidValue
        );
        assert_eq!(kind(&["--frobnicate", "1"]), ErrorKind::UnknownArgument);
        // A bare --pfc takes no value from the next argument (which is no subcommand either).
        assert!(sim(&["--pfc", "on"]).is_err());
        assert!(sim(&["--pfc"]).is_ok());
        // The sweep comes first, or not at all.
        assert_eq!(
            kind(&["--hosts", "4", "sweep"]),
            ErrorKind::ArgumentConflict
        );
    }

    #[test]
    fn the_sweep_owns_its_grid_and_passes_the_rest() {
        let a = sim(&[
            "sweep",
            "--qps",
            "1,,4",
            "--segment",
            "128K,1M",
            "--hosts",
            "8",
            "--class",
            "cross-dc",
            "--policy",
            "dqplb",
        ])
        .unwrap();
        let Some(SimSub::Sweep(s)) = a.sweep else {
            panic!("no sweep")
        };
        assert_eq!(s.qps, Some(vec![1, 4]));
        assert_eq!(s.segment, Some(vec![128 << 10, 1 << 20]));
        assert_eq!(
            (s.outstanding, s.class, s.bound_pct),
            (None, Class::CrossDc, 5.0)
        );
        assert_eq!(
            s.settings.pairs(),
            pairs(&[("hosts", "8"), ("policy", "dqplb")])
        );
        for bad in [
            &["sweep", "--qps", ""][..],
            &["sweep", "--segment", "2K"],
            &["sweep", "--bound-pct", "x"],
            &["sweep", "--loss-pct", "-1"],
            &["sweep", "--class", "cross-pod"],
        ] {
            assert!(sim(bad).is_err(), "{bad:?}");
        }
    }
}
