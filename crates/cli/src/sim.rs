//! `dqplb sim`: runs the fabric simulator (crates/sim/src) for one or more policies and QP counts and
//! prints a table, JSON or CSV; defaults from the site TOML's plan for the traffic's class and
//! its `[fabric.sim]` block.

use std::time::Instant;

use dqplb_config::load::{load_text, process_env_vars};
use dqplb_config::ConnClass;
use dqplb_dcqcn::AlphaSchedule;
use dqplb_engine::PolicyKind;
use dqplb_sim::timeseries;
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, Placement, SimConfig, SimPolicy, SimResult,
    SourcePort, TrafficKind, TrafficSpec, P2P_NET_CHUNK_BYTES, SIM_REHASH,
};

/// Usage text of `dqplb sim`.
pub(crate) const USAGE: &str = "\
usage: dqplb sim [options]
       dqplb sim sweep [grid] [options]   (qps x outstanding x segment; dqplb sim sweep --help)

fabric (rail-optimized leaf-spine, one fabric per rail):
  --hosts N             hosts (default 64)          --rails R        NICs/rails per host (8)
  --hosts-per-leaf H    hosts under a leaf (32)     --leaves L       sets H = ceil(N / L)
  --spines S            spines per rail (32)        --oversub O      leaf down/up capacity (1)
  --host-gbps G         NIC rate (400)              --hop-latency-ns T  per hop (1000)
  --pods P              third tier: leafs in P pods, each pod's spines (aggregation) wired to
                        --cores C core switches (default spines x leafs per pod) (0: two tiers)
  --dci-latency-us U    each pod a data centre: latency of every aggregation -> core hop, the
                        DC interconnect span (0 = --hop-latency-ns; up to 100000); between DCs
                        one way is 5 hops + U  --dci-oversub R  aggregation-core rate / R (1)
  --preset fattree-kK   k-ary fat tree, e.g. fattree-k8 (= --fattree-k 8): K pods of K/2 leafs
                        and K/2 aggs, (K/2)^2 cores, K^3/4 hosts, 1 rail; later options override
  --failed-links N      switch-switch links down per rail, any tier (0)
  --slow-links N        switch-switch links at --slow-factor of their rate (0, factor 0.5)
  --source-port P       qpn (mlx5's derivation from the QPNs, default) or a fixed port
  --hash-dest-qpn       E-ECMP: switches also hash the BTH destination QPN
  --spray-paths K       spray: each QP sprays over K paths of its ECMP group, drawn once
                        (htsim's -paths; 0 = all, the default)
engine (default dqplb, 8 QPs x 2 outstanding x 128K; with --config the site's plan for the
        traffic's class: cross-rail, cross-dc, or same-rail for the others):
  --policy LIST         single-qp, static-split, round-robin-message, dqplb, dqplb-led (least
                        expected delay), spray, dqplb-rehash (dqplb with the engine's straggler
                        re-hash rule), dqplb-led-rehash, lp-split (an oracle, not a NIC
                        policy: each connection splits over its q hashed paths as the split
                        bound does, knowing every path; 64 sub-QPs of --outstanding each)
                        (comma list)
  --rehash-ratio K      dqplb-rehash: slow = K x the connection's median latency (2)
  --rehash-window W     ... for W consecutive completions (16)
  --rehash-cooldown-us C  ... at most one per C us (50), --rehash-budget N per ms (4)
  --qps LIST            data QPs per connection (comma list)
  --outstanding D       segments in flight per QP
  --segment B           segment bytes (multiple of 128; K/M/G suffixes)
traffic:
  --traffic T           ring (all-reduce, default), tree (NCCL's double binary tree
                        all-reduce), permutation, leaf-shift, all-to-all,
                        incast (every host sends --bytes to the first one: N-to-1),
                        cross-dc (every host to a seeded host of the next pod: needs --pods),
                        cross-rail (one round of an all-to-all without PXN: rail r's GPU to
                        rail r+1's GPU of a seeded other host; all rails under one spine tier),
                        cross-rail-all-to-all (the whole all-to-all without PXN, GPU to GPU of
                        every other host, in NCCL's p2p schedule; one plane as cross-rail)
  --bytes B             ring, tree: buffer per GPU; permutation/leaf-shift: per connection;
                        all-to-all: send buffer per GPU (default 1G)
  --p2p-batches K       cross-rail-all-to-all: batches of 8 p2p rounds in flight at once (one
                        phase each, a barrier between; NCCL's channels run several: default 1)
  --step-bytes B        NCCL step / message size (512K; cross-rail-all-to-all: 128K, NCCL's
                        P2P_NET_CHUNKSIZE)                 --slots N   NCCL_STEPS (8)
  --placement P         contiguous (default) or fragmented (seeded random host order)
  --max-steps N         ring only: simulate N of the 2(n-1) steps and scale the time (0 = all)
  --background-hosts N  a second job: the last N hosts of the placement run a permutation of
                        step-size messages while the collective runs on the others (endless;
                        --background-messages N: N each, 0: idle hosts)
run:
  --mode M              f (fluid max-min, default), b (per segment) or p (per packet)
P mode (per packet; DCQCN per QP, optional PFC):
  --mtu B               payload bytes per packet (4096)
  --ecn on|off          ECN marking at the switch egress queues (on)
  --ecn-kmin-kb K       no mark below K kB (1 kB = 1000 B; 50)
  --ecn-kmax-kb K       probability Pmax at K kB, every packet above (2000)
  --ecn-pmax P          marking probability at Kmax (0.01)
  --cnp-interval-us U   at most one CNP per QP per U us at the receiver NIC (4, mlx5)
  --dcqcn P             reaction-point profile: firmware (mlx5 defaults) or paper (DCQCN paper)
  --alpha-update S      DCQCN alpha schedule, overriding the profile's: per-period (NVIDIA's
                        documentation; firmware's default) or per-cnp (the paper; paper's default)
  --pfc                 priority flow control: a switch pauses the sender of an ingress link
                        holding --pfc-xoff-kb (1000) not yet forwarded, resumes at --pfc-xon-kb (500)
  --start-stagger-us U  connection c starts at c x U us (0)
  --buffer-kb K         every switch egress holds at most K kB and drops the rest (tail drop;
                        0 = unbounded, the default); NICs recover by go-back-N (no --pfc, no spray)
  --ib-timeout T        the QPs' local ACK timeout, 4.096 us x 2^T, as NCCL_IB_TIMEOUT (20)
time series (any mode; every --policy/--qps run, its rows led by policy,qps):
  --timeseries FILE     per-QP and per-queue samples as CSV (F mode: per QP only)
  --sample-us U         sampling period (10 with --timeseries)
  --seed S              (default 1)                 --threads T      rails in parallel (2)
  --epoch-us U          F mode: re-solve at most every U us (default 5; 0 = at every change)
  --rails-simulated N   simulate only N rails (they are identical up to hashing)
  --config FILE         site TOML (as dqplb plan reads it, NCCL_DQPLB_* overrides applied)
                        with an optional [fabric.sim] block
  --format F            table (default), json or csv
  --svg DIR             also write DIR/ideal.svg (% of ideal per policy and q), and per run
                        DIR/collisions-P-qQ.svg, DIR/heatmap-P-qQ.svg and DIR/uplinks.csv;
                        with samples (--timeseries; P mode: --sample-us) DIR/timeseries-P-qQ.svg
  -h, --help            show this help

exit status: 0 success, 1 the simulation found engine/protocol errors, 2 bad input";

pub(super) struct Args {
    pub(super) cfg: SimConfig,
    pub(super) policies: Vec<SimPolicy>,
    pub(super) qps: Vec<usize>,
    pub(super) format: String,
    pub(super) help: bool,
    /// Directory for the SVG charts and the per-uplink CSV.
    pub(super) svg: Option<String>,
    /// The time-series CSV file (any mode).
    pub(super) timeseries: Option<String>,
    /// `--alpha-update` / `alpha-update`: overrides the DCQCN profile's schedule.
    pub(super) alpha_update: Option<AlphaSchedule>,
    /// Whether `--step-bytes` (or the config's `step-bytes`) was given.
    pub(super) step_given: bool,
}

pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("'{s}' is not a byte count"))
}

pub(super) fn num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse::<T>()
        .map_err(|_| format!("{opt}: '{v}' is not a valid number"))
}

fn source_port(v: &str) -> Result<SourcePort, String> {
    if v == "qpn" {
        return Ok(SourcePort::FromQpn);
    }
    let p = v.strip_prefix("fixed:").unwrap_or(v);
    Ok(SourcePort::Fixed(num("--source-port", p)?))
}

/// `--dci-latency-us`: microseconds, 0 ..= 100000, to picoseconds.
fn dci_latency_ps(v: &str) -> Result<u64, String> {
    let us: f64 = num("--dci-latency-us", v)?;
    if !(us.is_finite() && (0.0..=100_000.0).contains(&us)) {
        return Err(format!(
            "--dci-latency-us '{v}': microseconds in 0 ..= 100000 (0 = the hop latency)"
        ));
    }
    Ok((us * 1e6).round() as u64)
}

fn defaults() -> SimConfig {
    SimConfig {
        fabric: FabricSpec::default(),
        traffic: TrafficSpec::default(),
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: 8,
            // 8 QPs x 2 x 128 KiB = 2 MiB, below NCCL's 8 x 512 KiB in flight: the window binds,
            // so DQPLB has full QPs to skip (docs/simulation.md, "Sizing").
            outstanding: 2,
            segment_bytes: 128 * 1024,
            rehash: SIM_REHASH,
        },
        mode: Mode::Fluid,
        seed: 1,
        threads: 2,
        epoch_ps: 5_000_000,
        rails_simulated: 0,
        packet: PacketSpec::default(),
    }
}

/// Applies one `name = value` setting (CLI option without `--`, or a `[fabric.sim]` key).
fn apply(a: &mut Args, name: &str, v: &str, leaves: &mut Option<usize>) -> Result<(), String> {
    let c = &mut a.cfg;
    let opt = format!("--{name}");
    match name {
        "hosts" => c.fabric.hosts = num(&opt, v)?,
        "rails" => c.fabric.rails = num(&opt, v)?,
        "hosts-per-leaf" => c.fabric.hosts_per_leaf = num(&opt, v)?,
        "leaves" => *leaves = Some(num(&opt, v)?),
        "spines" => c.fabric.spines = num(&opt, v)?,
        "pods" => c.fabric.pods = num(&opt, v)?,
        "cores" => c.fabric.cores = num(&opt, v)?,
        "dci-latency-us" => c.fabric.dci_latency_ps = dci_latency_ps(v)?,
        "dci-oversub" => c.fabric.dci_oversub = num(&opt, v)?,
        "fattree-k" => c.fabric = FabricSpec::fattree(num(&opt, v)?, &c.fabric)?,
        "preset" => {
            let k = v
                .strip_prefix("fattree-k")
                .ok_or_else(|| format!("unknown preset '{v}' (fattree-k<K>, e.g. fattree-k8)"))?;
            c.fabric = FabricSpec::fattree(num(&opt, k)?, &c.fabric)?;
        }
        "oversub" => c.fabric.oversub = num(&opt, v)?,
        "host-gbps" => c.fabric.host_gbps = num(&opt, v)?,
        "hop-latency-ns" => c.fabric.hop_latency_ps = num::<u64>(&opt, v)? * 1000,
        "failed-links" => c.fabric.failed_links = num(&opt, v)?,
        "slow-links" => c.fabric.slow_links = num(&opt, v)?,
        "slow-factor" => c.fabric.slow_factor = num(&opt, v)?,
        "source-port" => c.fabric.hash.source_port = source_port(v)?,
        "hash-dest-qpn" => c.fabric.hash.dest_qpn = matches!(v, "true" | "1" | "yes"),
        "policy" => {
            a.policies = v
                .split(',')
                .map(SimPolicy::parse)
                .collect::<Result<_, _>>()?
        }
        "qps" => {
            a.qps = v
                .split(',')
                .map(|x| num(&opt, x))
                .collect::<Result<_, _>>()?
        }
        "outstanding" => c.shape.outstanding = num(&opt, v)?,
        "rehash-ratio" => c.shape.rehash.ratio = num(&opt, v)?,
        "rehash-window" => c.shape.rehash.window = num(&opt, v)?,
        "rehash-cooldown-us" => c.shape.rehash.cooldown = num::<u64>(&opt, v)? * 1_000_000,
        "rehash-budget" => c.shape.rehash.budget = num(&opt, v)?,
        "segment" => {
            c.shape.segment_bytes = u32::try_from(parse_bytes(v)?)
                .map_err(|_| format!("--segment {v} does not fit 32 bits"))?
        }
        "traffic" => c.traffic.kind = TrafficKind::parse(v)?,
        "bytes" => c.traffic.bytes = parse_bytes(v)?,
        "step-bytes" => {
            c.traffic.step_bytes = parse_bytes(v)?;
            a.step_given = true;
        }
        "slots" => c.traffic.slots = num(&opt, v)?,
        "placement" => {
            c.traffic.placement = match v {
                "contiguous" => Placement::Contiguous,
                "fragmented" => Placement::Fragmented,
                o => return Err(format!("--placement '{o}' (contiguous or fragmented)")),
            }
        }
        "max-steps" => c.traffic.max_steps = num(&opt, v)?,
        "p2p-batches" => {
            c.traffic.p2p_batches = num(&opt, v)?;
            if c.traffic.p2p_batches == 0 {
                return Err("--p2p-batches must be 1 or more".into());
            }
        }
        "background-hosts" => c.traffic.background_hosts = num(&opt, v)?,
        "background-messages" => c.traffic.background_messages = num(&opt, v)?,
        "mode" => c.mode = Mode::parse(v)?,
        "seed" => c.seed = num(&opt, v)?,
        "threads" => c.threads = num(&opt, v)?,
        "epoch-us" => c.epoch_ps = (num::<f64>(&opt, v)? * 1e6) as u64,
        "rails-simulated" => c.rails_simulated = num(&opt, v)?,
        "spray-paths" => c.fabric.spray_paths = num(&opt, v)?,
        "mtu" => c.packet.mtu = u32::try_from(parse_bytes(v)?).map_err(|_| format!("--mtu {v}"))?,
        "ecn" => {
            c.packet.ecn.enabled = match v {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                o => return Err(format!("--ecn '{o}' (on or off)")),
            }
        }
        "ecn-kmin-kb" => c.packet.ecn.kmin = (num::<f64>(&opt, v)? * 1e3) as u64,
        "ecn-kmax-kb" => c.packet.ecn.kmax = (num::<f64>(&opt, v)? * 1e3) as u64,
        "ecn-pmax" => c.packet.ecn.pmax = num(&opt, v)?,
        "dcqcn" => c.packet.rp = dqplb_sim::packet::dcqcn_profile(v)?,
        "alpha-update" => {
            a.alpha_update = Some(
                AlphaSchedule::parse(v)
                    .ok_or_else(|| format!("--alpha-update '{v}' (per-cnp or per-period)"))?,
            )
        }
        "cnp-interval-us" => c.packet.cnp_interval_ps = (num::<f64>(&opt, v)? * 1e6) as u64,
        "pfc" => c.packet.pfc.enabled = matches!(v, "true" | "1" | "yes" | "on"),
        "pfc-xoff-kb" => c.packet.pfc.xoff = (num::<f64>(&opt, v)? * 1e3) as u64,
        "pfc-xon-kb" => c.packet.pfc.xon = (num::<f64>(&opt, v)? * 1e3) as u64,
        "start-stagger-us" => c.packet.stagger_ps = (num::<f64>(&opt, v)? * 1e6) as u64,
        "buffer-kb" => {
            let kb: f64 = num(&opt, v)?;
            if !(kb.is_finite() && kb >= 0.0) {
                return Err(format!("{opt} '{v}': kB, 0 (unbounded) or more"));
            }
            c.packet.loss.buffer_bytes = (kb * 1e3) as u64;
        }
        "ib-timeout" => c.packet.loss.ib_timeout = num(&opt, v)?,
        "sample-us" => {
            let us: f64 = num(&opt, v)?;
            if !(us.is_finite() && us >= 0.0) {
                return Err(format!("--sample-us '{v}': microseconds, 0 or more"));
            }
            c.packet.sample_ps = (us * 1e6) as u64;
        }
        "timeseries" => a.timeseries = Some(v.to_string()),
        "svg" => a.svg = Some(v.to_string()),
        "format" => {
            if !matches!(v, "table" | "json" | "csv") {
                return Err(format!("--format '{v}' (table, json or csv)"));
            }
            a.format = v.to_string();
        }
        other => return Err(format!("unknown option '--{other}'")),
    }
    Ok(())
}

/// The connection class whose plan a run's engine takes from the site config: the class of the
/// traffic's connections (cross-rail, cross-DC), same-rail for all the others.
fn class_of(kind: TrafficKind) -> ConnClass {
    match kind {
        // The all-to-all's same-rail rounds (local delta 0, one in 8) take that plan too: the
        // simulator runs one connection shape per run.
        TrafficKind::CrossRail | TrafficKind::CrossRailAllToAll => ConnClass::CrossRail,
        TrafficKind::CrossDc => ConnClass::CrossDc,
        _ => ConnClass::SameRail,
    }
}

/// The last `--traffic` of the command line, if any (read before the config is applied, so the
/// config's class plan follows the traffic the run will have).
fn cli_traffic(args: &[String]) -> Result<Option<TrafficKind>, String> {
    let mut kind = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--traffic" {
            if let Some(v) = it.next() {
                kind = Some(TrafficKind::parse(v)?);
            }
        } else if let Some(v) = arg.strip_prefix("--traffic=") {
            kind = Some(TrafficKind::parse(v)?);
        }
    }
    Ok(kind)
}

/// Reads the site TOML as the plugin does (NCCL_DQPLB_* overrides from the environment
/// applied): engine shape from the plan of the traffic's class (`cli` or the `[fabric.sim]`
/// traffic key; same-rail by default), then `[fabric.sim]` keys.
fn apply_config(
    a: &mut Args,
    path: &str,
    cli: Option<TrafficKind>,
    leaves: &mut Option<usize>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut table: toml::Table = text.parse().map_err(|e| format!("{path}: {e}"))?;
    let sim = table
        .get_mut("fabric")
        .and_then(|f| f.as_table_mut())
        .and_then(|f| f.remove("sim"));
    // The plugin's parser knows no [fabric.sim]: give it the file with that block blanked out,
    // line for line, so its messages point at the file's own lines; a block written another way
    // (dotted keys, an inline table) falls back to a re-serialized copy.
    let blanked = without_sim_block(&text);
    let site_text = match blanked.parse::<toml::Table>() {
        Ok(t) if !has_sim(&t) => blanked,
        _ => toml::to_string(&table).map_err(|e| format!("{path}: {e}"))?,
    };
    let loaded = load_text(&site_text, path, &process_env_vars()).map_err(|e| e.to_string())?;
    for (var, value) in &loaded.overrides {
        eprintln!("# dqplb sim: {path}: {var}={value} applies");
    }
    let site = loaded.config;
    let sim_traffic = match sim.as_ref().and_then(|t| t.get("traffic")) {
        Some(toml::Value::String(v)) => {
            Some(TrafficKind::parse(v).map_err(|e| format!("{path}: [fabric.sim] {e}"))?)
        }
        _ => None,
    };
    let class = class_of(cli.or(sim_traffic).unwrap_or(a.cfg.traffic.kind));
    if class != ConnClass::SameRail {
        eprintln!("# dqplb sim: {path}: class {}", class.as_str());
    }
    let plan = site.plan(class);
    a.cfg.shape.qps = plan.qps as usize;
    a.qps = vec![plan.qps as usize];
    a.cfg.shape.outstanding = plan.outstanding;
    a.cfg.shape.segment_bytes = u32::try_from(plan.segment_bytes).unwrap_or(u32::MAX / 128 * 128);
    a.policies = vec![SimPolicy::parse(site.engine.policy.as_str())?];
    if let Some(sim) = sim {
        let t = sim
            .as_table()
            .ok_or_else(|| format!("{path}: [fabric.sim] must be a table"))?;
        for (k, v) in t {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            apply(a, k, &s, leaves).map_err(|e| format!("{path}: [fabric.sim] {e}"))?;
        }
    }
    Ok(())
}

/// `text` with every line of a `[fabric.sim]` (or `[fabric.sim.*]`) table emptied.
fn without_sim_block(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_sim = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with('[') {
            let header: String = t
                .split(']')
                .next()
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '[')
                .collect();
            in_sim = header == "fabric.sim" || header.starts_with("fabric.sim.");
        }
        if in_sim {
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            out.push_str(line);
        }
    }
    out
}

fn has_sim(t: &toml::Table) -> bool {
    t.get("fabric")
        .and_then(|f| f.as_table())
        .is_some_and(|f| f.contains_key("sim"))
}

pub(super) fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        cfg: defaults(),
        policies: vec![SimPolicy::Engine(PolicyKind::Dqplb)],
        qps: vec![8],
        format: "table".into(),
        help: false,
        timeseries: None,
        svg: None,
        alpha_update: None,
        step_given: false,
    };
    let mut leaves = None;
    // The config file first, so command-line options override it wherever they appear.
    let traffic = cli_traffic(args)?;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--config" {
            let p = it.next().ok_or("option --config needs a value")?;
            apply_config(&mut a, p, traffic, &mut leaves)?;
        } else if let Some(p) = arg.strip_prefix("--config=") {
            apply_config(&mut a, p, traffic, &mut leaves)?;
        }
    }
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        match name {
            "-h" | "--help" => a.help = true,
            "--hash-dest-qpn" if inline.is_none() => a.cfg.fabric.hash.dest_qpn = true,
            "--pfc" if inline.is_none() => a.cfg.packet.pfc.enabled = true,
            "--config" => {
                if inline.is_none() {
                    it.next();
                }
            }
            n if n.starts_with("--") => {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("option {n} needs a value"))?,
                };
                apply(&mut a, &n[2..], &v, &mut leaves)?;
            }
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    // Whichever order --dcqcn and --alpha-update came in (the config's keys included).
    if let Some(s) = a.alpha_update {
        a.cfg.packet.rp.alpha_schedule = s;
    }
    // NCCL's p2p messages between nodes are p2pChunkSize, NCCL_P2P_NET_CHUNKSIZE (128 KiB;
    // computeBuffSizes, src/init.cc, NCCL 2.30.7), not the collectives' 512 KiB step.
    if a.cfg.traffic.kind == TrafficKind::CrossRailAllToAll && !a.step_given {
        a.cfg.traffic.step_bytes = P2P_NET_CHUNK_BYTES;
    }
    if let Some(l) = leaves {
        if l == 0 {
            return Err("--leaves must be at least 1".into());
        }
        a.cfg.fabric.hosts_per_leaf = a.cfg.fabric.hosts.div_ceil(l);
    }
    if a.timeseries.is_some() {
        if a.cfg.packet.sample_ps == 0 {
            a.cfg.packet.sample_ps = 10_000_000;
        }
    } else if a.cfg.mode != Mode::Packet {
        // Nobody reads B and F mode's samples without the file: do not take them.
        a.cfg.packet.sample_ps = 0;
    }
    Ok(a)
}

fn print_table(rows: &[(SimResult, f64)]) {
    println!(
        "{:<20} {:>4} {:>12} {:>12} {:>8} {:>13} {:>9} {:>8} {:>7} {:>12} {:>6} {:>8}",
        "policy",
        "qps",
        "time_us",
        "ideal_us",
        "%ideal",
        "split_bound%",
        "busbw",
        "maxup",
        "qp_imb",
        "events",
        "errors",
        "wall_s"
    );
    for (r, wall) in rows {
        println!(
            "{:<20} {:>4} {:>12.1} {:>12.1} {:>8.2} {:>13} {:>9.1} {:>8.3} {:>7.2} {:>12} {:>6} {:>8.2}",
            r.policy,
            r.qps,
            r.time_us,
            r.ideal_us,
            r.pct_of_ideal,
            format!("{:.1}-{:.1}", 100.0 / r.bound_upper.max(1e-9), 100.0 / r.bound_lower.max(1e-9)),
            r.busbw_gbps,
            r.max_uplink_util,
            r.qp_imbalance,
            r.events,
            r.errors.total() + r.missing,
            wall
        );
    }
}

/// P mode's counters under the main table (nothing for F and B runs).
fn print_packet_table(rows: &[(SimResult, f64)], lossy: bool) {
    let p: Vec<_> = rows
        .iter()
        .filter_map(|(r, _)| r.packet.as_ref().map(|p| (r, p)))
        .collect();
    if p.is_empty() {
        return;
    }
    println!(
        "\n{:<20} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10} {:>14} {:>10}",
        "policy",
        "qps",
        "packets",
        "ecn_marks",
        "cnps",
        "rate_cuts",
        "ignored",
        "max_queue_B",
        "pfc_pauses"
    );
    for &(r, p) in &p {
        println!(
            "{:<20} {:>4} {:>12} {:>12} {:>10} {:>10} {:>10} {:>14} {:>10}",
            r.policy,
            r.qps,
            p.packets,
            p.ecn_marks,
            p.cnps,
            p.rate_cuts,
            p.cnps_ignored,
            p.max_queue_bytes,
            p.pfc_pauses
        );
    }
    if !lossy {
        return;
    }
    println!(
        "\n{:<20} {:>4} {:>12} {:>10} {:>12} {:>8} {:>9} {:>10}",
        "policy", "qps", "sent_pkts", "drops", "resent_pkts", "naks", "timeouts", "discarded"
    );
    for (r, p) in p {
        println!(
            "{:<20} {:>4} {:>12} {:>10} {:>12} {:>8} {:>9} {:>10}",
            r.policy,
            r.qps,
            p.sent_packets,
            p.drops,
            p.resent_packets,
            p.naks,
            p.ack_timeouts,
            p.discarded
        );
    }
}

/// Writes the time series of every run (any mode) to `path` as one CSV, run after run.
fn write_timeseries(path: &str, rows: &[(SimResult, f64)]) -> std::io::Result<()> {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(w, "policy,qps,{}", timeseries::CSV_HEADER)?;
    for (r, _) in rows {
        timeseries::write_csv(&mut w, &format!("{},{},", r.policy, r.qps), r.series())?;
    }
    w.flush()
}

/// Runs `dqplb sim`; returns the exit code.
pub(crate) fn run_cli(args: &[String]) -> i32 {
    if args.first().map(String::as_str) == Some("sweep") {
        return super::sim_sweep::run_cli(&args[1..]);
    }
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dqplb sim: {e}\n\n{USAGE}");
            return 2;
        }
    };
    if a.help {
        println!("{USAGE}");
        return 0;
    }
    if a.format == "table" {
        let c = &a.cfg;
        if c.fabric.pods > 0 {
            println!(
                "# third tier: {} pods x {} leafs, {} aggregation switches per pod, {} cores at {} Gb/s",
                c.fabric.pods, c.fabric.leaves_per_pod(), c.fabric.spines, c.fabric.cores_total(), c.fabric.core_gbps()
            );
        }
        if c.fabric.dci_latency_ps > 0 || c.fabric.dci_oversub != 1.0 {
            println!(
                "# DC interconnect: every pod a DC, {} us per aggregation -> core hop, one way between DCs {} us, round trip {} us",
                c.fabric.dci_latency() as f64 / 1e6, c.fabric.cross_dc_one_way_ps() as f64 / 1e6, c.fabric.cross_dc_rtt_ps() as f64 / 1e6
            );
        }
        println!(
            "# dqplb sim: mode {} traffic {} bytes {} placement {:?}; {} hosts x {} rails, {} leaves x {} hosts, {} spines, oversub {}, {} Gb/s; source port {:?}, dest-qpn hash {}; outstanding {}, segment {}; seed {}",
            c.mode.name(), c.traffic.kind.name(), c.traffic.bytes, c.traffic.placement, c.fabric.hosts, c.fabric.rails,
            c.fabric.leaves(), c.fabric.hosts_per_leaf, c.fabric.spines, c.fabric.oversub, c.fabric.host_gbps,
            c.fabric.hash.source_port, c.fabric.hash.dest_qpn, c.shape.outstanding, c.shape.segment_bytes, c.seed
        );
    }
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    for &p in &a.policies {
        for &q in &a.qps {
            let q = if p == SimPolicy::Engine(PolicyKind::SingleQp) {
                1
            } else {
                q
            };
            if seen.contains(&(p, q)) {
                continue;
            }
            seen.push((p, q));
            let mut cfg = a.cfg.clone();
            cfg.shape.policy = p;
            cfg.shape.qps = q;
            let t0 = Instant::now();
            match run(&cfg) {
                Ok(r) => rows.push((r, t0.elapsed().as_secs_f64())),
                Err(e) => {
                    eprintln!("dqplb sim: {} q={q}: {e}", p.name());
                    return 2;
                }
            }
        }
    }
    match a.format.as_str() {
        "json" => {
            let v: Vec<&SimResult> = rows.iter().map(|r| &r.0).collect();
            match serde_json::to_string_pretty(&v) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("dqplb sim: {e}");
                    return 2;
                }
            }
            for (r, w) in &rows {
                eprintln!("dqplb sim: {} q={} wall {w:.2} s", r.policy, r.qps);
            }
        }
        "csv" => {
            println!("{}", SimResult::CSV_HEADER);
            for (r, w) in &rows {
                println!("{}", r.csv_row());
                eprintln!("dqplb sim: {} q={} wall {w:.2} s", r.policy, r.qps);
            }
        }
        _ => {
            print_table(&rows);
            print_packet_table(&rows, a.cfg.packet.loss.lossy());
        }
    }
    if let Some(path) = &a.timeseries {
        if let Err(e) = write_timeseries(path, &rows) {
            eprintln!("dqplb sim: {path}: {e}");
            return 2;
        }
    }
    if let Some(dir) = &a.svg {
        let runs: Vec<&SimResult> = rows.iter().map(|r| &r.0).collect();
        match super::sim_svg::write_all(std::path::Path::new(dir), &runs) {
            Ok(files) => eprintln!("dqplb sim: wrote {} files to {dir}", files.len()),
            Err(e) => {
                eprintln!("dqplb sim: --svg {dir}: {e}");
                return 2;
            }
        }
    }
    let bad = rows.iter().any(|(r, _)| r.errors.total() + r.missing > 0);
    i32::from(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_block_is_blanked_line_for_line() {
        let text = "[fabric]\nmax-rails = 8\n[ fabric.sim ] # the simulator's\nhosts = 16\n\n[fabric.sim.extra]\nx = 1\n[engine]\npolicy = \"dqplb\"\n";
        let out = without_sim_block(text);
        assert_eq!(out.lines().count(), text.lines().count());
        assert_eq!(
            out,
            "[fabric]\nmax-rails = 8\n\n\n\n\n\n[engine]\npolicy = \"dqplb\"\n"
        );
        let t: toml::Table = out.parse().unwrap();
        assert!(!has_sim(&t));
        // Dotted keys under [fabric] are not a header: left alone, and has_sim sees them.
        let dotted = "[fabric]\nsim.hosts = 16\n";
        assert_eq!(without_sim_block(dotted), dotted);
        assert!(has_sim(&dotted.parse::<toml::Table>().unwrap()));
        // No trailing newline: the last blanked line adds none.
        assert_eq!(without_sim_block("[fabric.sim]\nhosts = 1"), "\n");
    }
}
