//! `dqplb sim`: runs the fabric simulator (crates/sim/src) for one or more policies and QP counts and
//! prints a table, JSON or CSV; defaults from the site TOML's plan for the traffic's class and
//! its `[fabric.sim]` block.

use std::time::Instant;

use clap::ValueEnum;
use dqplb_config::load::{load_text, process_env_vars};
use dqplb_config::ConnClass;
use dqplb_dcqcn::AlphaSchedule;
use dqplb_engine::PolicyKind;
use dqplb_sim::timeseries;
use dqplb_sim::{
    run, ConnShape, FabricSpec, Mode, PacketSpec, SimConfig, SimPolicy, SimResult, TrafficKind,
    TrafficSpec, P2P_NET_CHUNK_BYTES, SIM_DEPTH, SIM_REHASH, SIM_REPIN,
};

use crate::sim_args::{self as opts, SimCmd, SimFormat, SimSub};
use crate::units;

/// What `dqplb sim` (and the sweep) run: the simulator's config, the policies and QP counts to
/// run it for, and what to print and write.
pub(super) struct Args {
    pub(super) cfg: SimConfig,
    pub(super) policies: Vec<SimPolicy>,
    pub(super) qps: Vec<usize>,
    pub(super) format: SimFormat,
    /// Directory for the SVG charts and the per-uplink CSV.
    pub(super) svg: Option<String>,
    /// The time-series CSV file (any mode).
    pub(super) timeseries: Option<String>,
    /// `--alpha-update` / `alpha-update`: overrides the DCQCN profile's schedule.
    pub(super) alpha_update: Option<AlphaSchedule>,
    /// Whether `--step-bytes` (or the config's `step-bytes`) was given.
    pub(super) step_given: bool,
    /// `--nccl-qps`: NCCL_IB_QPS_PER_CONNECTION of the nccl policy.
    pub(super) nccl_qps: usize,
    /// `--nccl-split`: the nccl policy splits each message over its QPs.
    pub(super) nccl_split: bool,
    /// Whether `--channels` was given (else 2 when a policy is nccl).
    pub(super) channels_given: bool,
}

/// Why a run's configuration could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetupError {
    /// The command line: options that contradict each other (clap checked each value).
    Usage(String),
    /// An input file or the environment: the site TOML, its `[fabric.sim]` keys.
    Input(String),
}

impl SetupError {
    /// Prints the error for `dqplb PATH...` (a usage error as clap prints one, an input error
    /// as "dqplb PATH: message") and returns the exit code, 2.
    pub(crate) fn report(&self, path: &[&str]) -> i32 {
        match self {
            SetupError::Usage(m) => crate::usage_error(path, m),
            SetupError::Input(m) => {
                eprintln!("dqplb {}: {m}", path.join(" "));
                2
            }
        }
    }
}

/// `{opt}: '{v}' is not a valid number`, the number of a setting.
fn num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T, String> {
    units::num(v).map_err(|e| format!("{opt}: {e}"))
}

fn defaults() -> SimConfig {
    SimConfig {
        fabric: FabricSpec::default(),
        traffic: TrafficSpec::default(),
        shape: ConnShape {
            policy: SimPolicy::Engine(PolicyKind::Dqplb),
            qps: 8,
            // 8 QPs x 2 x 128 KiB = 2 MiB, below NCCL's 8 x 512 KiB in flight: the window binds,
            // so DQPLB has full QPs to skip (docs/records/simulation.md, "Sizing").
            outstanding: 2,
            segment_bytes: 128 * 1024,
            rehash: SIM_REHASH,
            depth: None,
            repin: None,
        },
        mode: Mode::Fluid,
        seed: 1,
        threads: 2,
        epoch_ps: 5_000_000,
        rails_simulated: 0,
        packet: PacketSpec::default(),
    }
}

/// Applies one `name = value` setting (CLI option without `--`, or a `[fabric.sim]` key); the
/// values parse as the options' (sim_args.rs), the messages name the option.
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
        "dci-latency-us" => {
            num::<f64>(&opt, v)?;
            c.fabric.dci_latency_ps =
                opts::dci_latency_ps(v).map_err(|e| format!("{opt} '{v}': {e}"))?
        }
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
        "source-port" => {
            c.fabric.hash.source_port =
                opts::source_port(v).map_err(|e| format!("--source-port: {e}"))?;
            // `fixed` alone is E-ECMP: one source port, the destination QPN hashed.
            if v == "fixed" {
                c.fabric.hash.dest_qpn = true;
            }
        }
        "hash-dest-qpn" => c.fabric.hash.dest_qpn = opts::yes(v)?,
        "policy" => a.policies = opts::policies(v)?,
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
        "depth-ratio" => c.shape.depth.get_or_insert(SIM_DEPTH).ratio = num(&opt, v)?,
        "depth-raised" => c.shape.depth.get_or_insert(SIM_DEPTH).raised = num(&opt, v)?,
        "depth-hold" => c.shape.depth.get_or_insert(SIM_DEPTH).hold = num(&opt, v)?,
        "repin-ratio" => c.shape.repin.get_or_insert(SIM_REPIN).ratio = num(&opt, v)?,
        "repin-persist" => c.shape.repin.get_or_insert(SIM_REPIN).persist = num(&opt, v)?,
        "repin-settle" => c.shape.repin.get_or_insert(SIM_REPIN).settle = num(&opt, v)?,
        "repin-budget" => c.shape.repin.get_or_insert(SIM_REPIN).budget = num(&opt, v)?,
        "segment" => {
            c.shape.segment_bytes = u32::try_from(units::bytes(v)?)
                .map_err(|_| format!("--segment {v} does not fit 32 bits"))?
        }
        "traffic" => c.traffic.kind = TrafficKind::parse(v)?,
        "bytes" => c.traffic.bytes = units::bytes(v)?,
        "step-bytes" => {
            c.traffic.step_bytes = units::bytes(v)?;
            a.step_given = true;
        }
        "slots" => c.traffic.slots = num(&opt, v)?,
        "channels" => {
            c.traffic.channels = num(&opt, v)?;
            a.channels_given = true;
        }
        "nccl-qps" => a.nccl_qps = num(&opt, v)?,
        "nccl-split" => a.nccl_split = opts::yes(v)?,
        "placement" => {
            c.traffic.placement = opts::placement(v).map_err(|_| {
                format!("--placement '{v}' (contiguous, fragmented or leaf-ordered)")
            })?
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
        "mtu" => {
            c.packet.mtu = u32::try_from(units::bytes(v)?).map_err(|_| format!("--mtu {v}"))?
        }
        "ecn" => {
            c.packet.ecn.enabled =
                opts::on_off(v).map_err(|_| format!("--ecn '{v}' (on or off)"))?
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
        "pfc" => c.packet.pfc.enabled = opts::yes_on(v)?,
        "pfc-xoff-kb" => c.packet.pfc.xoff = (num::<f64>(&opt, v)? * 1e3) as u64,
        "pfc-xon-kb" => c.packet.pfc.xon = (num::<f64>(&opt, v)? * 1e3) as u64,
        "start-stagger-us" => c.packet.stagger_ps = (num::<f64>(&opt, v)? * 1e6) as u64,
        "buffer-kb" => {
            num::<f64>(&opt, v)?;
            let kb = opts::buffer_kb(v).map_err(|e| format!("{opt} '{v}': {e}"))?;
            c.packet.loss.buffer_bytes = (kb * 1e3) as u64;
        }
        "ib-timeout" => c.packet.loss.ib_timeout = num(&opt, v)?,
        "sample-us" => {
            num::<f64>(&opt, v)?;
            let us = opts::sample_us(v).map_err(|e| format!("{opt} '{v}': {e}"))?;
            c.packet.sample_ps = (us * 1e6) as u64;
        }
        "timeseries" => a.timeseries = Some(v.to_string()),
        "svg" => a.svg = Some(v.to_string()),
        "format" => {
            a.format = SimFormat::from_str(v, false)
                .map_err(|_| format!("--format '{v}' (table, json or csv)"))?
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

/// Builds a run from the simulator's defaults, then each `configs` file (its class plan and
/// `[fabric.sim]`), then `base` settings (the sweep's small fabric, never with a config), then
/// the command line's settings (`--name` without the dashes, value) in their order: later wins.
pub(super) fn build(
    configs: &[String],
    base: &[(&str, &str)],
    cli: &[(String, String)],
) -> Result<Args, SetupError> {
    let mut a = Args {
        cfg: defaults(),
        policies: vec![SimPolicy::Engine(PolicyKind::Dqplb)],
        qps: vec![8],
        format: SimFormat::Table,
        timeseries: None,
        svg: None,
        alpha_update: None,
        step_given: false,
        nccl_qps: 1,
        nccl_split: false,
        channels_given: false,
    };
    let mut leaves = None;
    let settings: Vec<(&str, &str)> = base
        .iter()
        .copied()
        .chain(cli.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    // The config files first, so the command line overrides them; the class plan they give
    // follows the run's traffic (the last --traffic; clap checked it).
    let traffic = settings
        .iter()
        .rev()
        .find(|(k, _)| *k == "traffic")
        .and_then(|(_, v)| TrafficKind::parse(v).ok());
    for path in configs {
        apply_config(&mut a, path, traffic, &mut leaves).map_err(SetupError::Input)?;
    }
    for (name, value) in settings {
        apply(&mut a, name, value, &mut leaves).map_err(SetupError::Usage)?;
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
            return Err(SetupError::Input("--leaves must be at least 1".into()));
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

/// Runs `dqplb sim` (or its sweep); returns the exit code.
/// Progress lines on stderr before each run, at most one per `Progress::EVERY`.
struct Progress {
    on: bool,
    runs: usize,
    done: usize,
    start: Instant,
    last: Instant,
}

impl Progress {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    fn new(on: bool, runs: usize) -> Progress {
        let now = Instant::now();
        Progress {
            on,
            runs,
            done: 0,
            start: now,
            last: now,
        }
    }

    /// The line to print at `now` before the next run starts, if one is due.
    fn line(&mut self, now: Instant, policy: &str, q: usize) -> Option<String> {
        let due = self.on && self.done > 0 && now.duration_since(self.last) >= Self::EVERY;
        let l = due.then(|| {
            self.last = now;
            format!(
                "dqplb sim: {} of {} runs done in {:.0} s; running {policy} q={q}",
                self.done,
                self.runs,
                now.duration_since(self.start).as_secs_f64()
            )
        });
        self.done += 1;
        l
    }

    /// Called before run `done + 1` of `runs` starts.
    fn before(&mut self, policy: &str, q: usize) {
        if let Some(l) = self.line(Instant::now(), policy, q) {
            eprintln!("{l}");
        }
    }
}

pub(crate) fn run_cli(cmd: SimCmd) -> i32 {
    if let Some(SimSub::Sweep(sweep)) = cmd.sweep {
        return super::sim_sweep::run_cli(sweep);
    }
    let mut a = match build(&cmd.config, &[], &cmd.settings.merged(&cmd.shape)) {
        Ok(a) => a,
        Err(e) => return e.report(&["sim"]),
    };
    if let Some(dir) = &a.svg {
        if let Err(e) = super::sim_svg::check_writable(std::path::Path::new(dir)) {
            eprintln!("dqplb sim: --svg {dir}: {e}");
            return 2;
        }
    }
    let show_progress = cmd.progress || std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Stock NCCL duplicates its ring channels: two connections per NIC pair unless told.
    let nccl = a
        .policies
        .iter()
        .any(|p| matches!(p, SimPolicy::Nccl { .. }));
    if nccl && !a.channels_given && a.cfg.traffic.channels == 1 {
        let mut two = a.cfg.traffic.clone();
        two.channels = 2;
        if two.check(&a.cfg.fabric).is_ok() {
            a.cfg.traffic = two;
        }
    }
    if a.format == SimFormat::Table {
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
        if c.traffic.channels > 1 || nccl {
            println!(
                "# channels {} per rank pair; nccl: {} QP(s) per channel{}",
                c.traffic.channels,
                a.nccl_qps,
                if a.nccl_split { ", split" } else { "" }
            );
        }
    }
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    for &p in &a.policies {
        for &q in &a.qps {
            let (p, q) = match p {
                SimPolicy::Engine(PolicyKind::SingleQp) => (p, 1),
                SimPolicy::Nccl { split } => (
                    SimPolicy::Nccl {
                        split: split || a.nccl_split,
                    },
                    a.nccl_qps,
                ),
                _ => (p, q),
            };
            if !seen.contains(&(p, q)) {
                seen.push((p, q));
            }
        }
    }
    let mut progress = Progress::new(show_progress, seen.len());
    for &(p, q) in &seen {
        {
            progress.before(p.name(), q);
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
    match a.format {
        SimFormat::Json => {
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
        SimFormat::Csv => {
            println!("{}", SimResult::CSV_HEADER);
            for (r, w) in &rows {
                println!("{}", r.csv_row());
                eprintln!("dqplb sim: {} q={} wall {w:.2} s", r.policy, r.qps);
            }
        }
        SimFormat::Table => {
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
    fn progress_lines_at_most_every_five_seconds_and_only_when_asked() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let mut p = Progress::new(true, 4);
        p.start = t0;
        p.last = t0;
        assert_eq!(
            p.line(at(0), "dqplb", 8),
            None,
            "nothing before the first run"
        );
        assert_eq!(p.line(at(3), "dqplb", 8), None, "3 s: not yet");
        assert_eq!(
            p.line(at(7), "spray", 8).as_deref(),
            Some("dqplb sim: 2 of 4 runs done in 7 s; running spray q=8")
        );
        assert_eq!(
            p.line(at(9), "single-qp", 1),
            None,
            "2 s after the last line"
        );
        let mut quiet = Progress::new(false, 2);
        quiet.start = t0;
        quiet.last = t0;
        quiet.line(at(0), "dqplb", 8);
        assert_eq!(quiet.line(at(60), "dqplb", 8), None);
    }

    /// A valid value of every `dqplb sim` option (and `[fabric.sim]` key).
    const SAMPLES: [(&str, &str); 73] = [
        ("hosts", "16"),
        ("rails", "2"),
        ("hosts-per-leaf", "4"),
        ("leaves", "2"),
        ("spines", "4"),
        ("oversub", "1.5"),
        ("host-gbps", "200"),
        ("hop-latency-ns", "500"),
        ("pods", "2"),
        ("cores", "4"),
        ("dci-latency-us", "10"),
        ("dci-oversub", "2"),
        ("preset", "fattree-k4"),
        ("fattree-k", "4"),
        ("failed-links", "1"),
        ("slow-links", "1"),
        ("slow-factor", "0.25"),
        ("source-port", "fixed:49152"),
        ("hash-dest-qpn", "true"),
        ("spray-paths", "2"),
        ("policy", "dqplb,spray"),
        ("rehash-ratio", "3"),
        ("rehash-window", "8"),
        ("rehash-cooldown-us", "20"),
        ("rehash-budget", "2"),
        ("depth-ratio", "1.4"),
        ("depth-raised", "4"),
        ("depth-hold", "2"),
        ("repin-ratio", "1.4"),
        ("repin-persist", "3"),
        ("repin-settle", "8"),
        ("repin-budget", "4"),
        ("traffic", "tree"),
        ("bytes", "4M"),
        ("p2p-batches", "2"),
        ("step-bytes", "256K"),
        ("slots", "4"),
        ("channels", "1"),
        ("nccl-qps", "2"),
        ("nccl-split", "true"),
        ("placement", "fragmented"),
        ("max-steps", "3"),
        ("background-hosts", "2"),
        ("background-messages", "5"),
        ("mode", "p"),
        ("seed", "7"),
        ("threads", "1"),
        ("epoch-us", "2.5"),
        ("rails-simulated", "1"),
        ("format", "csv"),
        ("mtu", "1K"),
        ("ecn", "off"),
        ("ecn-kmin-kb", "10"),
        ("ecn-kmax-kb", "100"),
        ("ecn-pmax", "0.2"),
        ("cnp-interval-us", "8"),
        ("alpha-update", "per-cnp"),
        ("pfc", "on"),
        ("pfc-xoff-kb", "300"),
        ("pfc-xon-kb", "100"),
        ("start-stagger-us", "1"),
        ("buffer-kb", "500"),
        ("ib-timeout", "12"),
        ("timeseries", "t.csv"),
        ("sample-us", "5"),
        ("qps", "1,4"),
        ("outstanding", "3"),
        ("segment", "64K"),
        ("dcqcn", "paper"),
        ("svg", "charts"),
        ("config", "-"),
        ("progress", "-"),
        ("help", "-"),
    ];

    #[test]
    fn fixed_alone_is_e_ecmp_unless_a_later_setting_says_otherwise() {
        let a = build(&[], &[], &[("source-port".into(), "fixed".into())]).unwrap();
        assert_eq!(
            a.cfg.fabric.hash.source_port,
            dqplb_sim::SourcePort::Fixed(49152)
        );
        assert!(a.cfg.fabric.hash.dest_qpn);
        let a = build(
            &[],
            &[],
            &[
                ("source-port".into(), "fixed".into()),
                ("hash-dest-qpn".into(), "no".into()),
            ],
        )
        .unwrap();
        assert!(!a.cfg.fabric.hash.dest_qpn, "a later setting wins");
        let a = build(&[], &[], &[("source-port".into(), "fixed:49153".into())]).unwrap();
        assert!(!a.cfg.fabric.hash.dest_qpn);
    }

    #[test]
    fn every_option_is_a_setting_and_both_take_the_same_values() {
        use clap::CommandFactory;
        let sim = crate::Cli::command()
            .find_subcommand("sim")
            .cloned()
            .expect("sim");
        let mut names: Vec<&str> = sim.get_arguments().filter_map(|a| a.get_long()).collect();
        names.push("help");
        names.sort_unstable();
        let mut sampled: Vec<&str> = SAMPLES.iter().map(|s| s.0).collect();
        sampled.sort_unstable();
        assert_eq!(
            names, sampled,
            "a sim option without a sample, or the reverse"
        );
        let mut argv = vec!["sim".to_string()];
        let mut settings = Vec::new();
        for (name, value) in SAMPLES.iter().filter(|s| s.1 != "-") {
            argv.push(format!("--{name}={value}"));
            settings.push((name.to_string(), value.to_string()));
        }
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let crate::Cmd::Sim(cmd) = crate::parse(&args).expect("clap takes every sample") else {
            panic!("not sim")
        };
        assert_eq!(cmd.settings.merged(&cmd.shape), settings);
        let a = match build(&[], &[], &settings) {
            Ok(a) => a,
            Err(e) => panic!("{e:?}"),
        };
        // A few of them, as the run will have them (the fat tree came after --hosts).
        assert_eq!(a.cfg.fabric.hosts, 16);
        assert_eq!((a.cfg.fabric.pods, a.cfg.fabric.hosts_per_leaf), (4, 8));
        assert_eq!((a.format, a.qps.as_slice()), (SimFormat::Csv, &[1, 4][..]));
        assert!(
            a.cfg.packet.pfc.enabled && a.cfg.fabric.hash.dest_qpn && !a.cfg.packet.ecn.enabled
        );
        assert_eq!(a.cfg.packet.rp.alpha_schedule, AlphaSchedule::PerCnp);
        assert_eq!(
            apply(
                &mut build(&[], &[], &[]).unwrap(),
                "frobnicate",
                "1",
                &mut None
            ),
            Err("unknown option '--frobnicate'".to_string())
        );
    }

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
