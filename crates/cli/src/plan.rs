//! `dqplb plan`: loads the site config (as the plugin would), parses NCCL_IB_HCA, and prints the
//! devices with their fabric ids and the per-class plan (QPs, outstanding, segment, budget).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use dqplb_config::load::{load_from_process_env, load_path, process_env_vars};
use dqplb_config::{classify, ClassPlan, ConnClass, FabricId, HcaList, LoadedConfig, PolicyName};

/// The exit status line under `dqplb plan --help`.
pub(crate) const EXIT: &str =
    "exit status: 0 success, 2 bad input (the message names the file, key, variable or field)";

/// How the plan is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    #[default]
    Table,
    Json,
}

/// Options of `dqplb plan`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct PlanArgs {
    /// Read FILE instead of NCCL_DQPLB_CONF / /etc/nccl-dqplb.toml / the built-in default
    /// (NCCL_DQPLB_* overrides still apply)
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<String>,
    /// An NCCL_IB_HCA value (default: the NCCL_IB_HCA environment variable)
    #[arg(long, value_name = "STRING")]
    pub(crate) hca: Option<String>,
    /// Output format
    #[arg(long, value_enum, value_name = "FMT", default_value_t)]
    pub(crate) format: Format,
}

/// One device of the NCCL_IB_HCA list, flattened for printing.
#[derive(Debug, Serialize)]
struct DeviceRow {
    name: String,
    port: Option<u32>,
    fabric_id: Option<u32>,
    dc: Option<u32>,
    rail: Option<u32>,
    plane: Option<u32>,
}

#[derive(Debug, Serialize)]
struct HcaReport {
    value: String,
    exclude: bool,
    exact: bool,
    devices: Vec<DeviceRow>,
}

/// The class of a connection between two listed devices that both carry fabric ids.
#[derive(Debug, Serialize)]
struct PairRow {
    local: String,
    remote: String,
    class: dqplb_config::ConnClass,
}

#[derive(Debug, Serialize)]
struct Override {
    variable: String,
    value: String,
}

/// Whether the engine policy can steer a class's connections: dqplb only moves segments off a
/// slow QP when QPs fill, which they seldom do when the window holds all the data NCCL keeps in
/// flight per connection (its SIMPLE buffer, NCCL_BUFFSIZE; docs/records/simulation.md, "Sizing").
#[derive(Debug, Serialize)]
struct Steering {
    class: &'static str,
    window_bytes: u64,
    nccl_buffsize: u64,
    /// False: the window holds all NCCL keeps in flight, so dqplb splits about like
    /// static-split.
    steers: bool,
    note: Option<String>,
}

/// NCCL's default SIMPLE-protocol buffer per connection (src/init.cc, DEFAULT_BUFFSIZE 1 << 22,
/// NCCL 2.x master 5067397), which `NCCL_BUFFSIZE` replaces.
const NCCL_DEFAULT_BUFFSIZE: u64 = 1 << 22;

/// NCCL_BUFFSIZE as NCCL reads it (a byte count; unset or unparsable: the default, with a
/// note for the latter).
fn nccl_buffsize(env: Option<&str>) -> (u64, Option<String>) {
    match env.map(str::trim) {
        None | Some("") => (NCCL_DEFAULT_BUFFSIZE, None),
        Some(v) => match v.parse::<u64>() {
            Ok(b) if b > 0 => (b, None),
            _ => (
                NCCL_DEFAULT_BUFFSIZE,
                Some(format!(
                    "NCCL_BUFFSIZE '{v}' is not a positive byte count; NCCL's default {NCCL_DEFAULT_BUFFSIZE} B assumed"
                )),
            ),
        },
    }
}

fn steering(policy: PolicyName, c: &ClassPlan, buffsize: u64) -> Steering {
    let window = c.inflight_bytes;
    let steers = policy != PolicyName::Dqplb || window < buffsize;
    let note = (!steers).then(|| {
        let per_depth = u64::from(c.qps) * c.segment_bytes;
        let fix = match (buffsize - 1) / per_depth.max(1) {
            0 => "fewer QPs or smaller segments (one segment on each QP already holds it)"
                .to_string(),
            d => format!("outstanding <= {d}"),
        };
        format!(
            "window {window} B >= NCCL_BUFFSIZE {buffsize} B (NCCL's data in flight per connection): the window holds all of it, QPs seldom fill, and dqplb splits about like static-split; set policy dqplb-led, or {fix} (docs/records/simulation.md, Sizing)"
        )
    });
    Steering {
        class: c.class.as_str(),
        window_bytes: window,
        nccl_buffsize: buffsize,
        steers,
        note,
    }
}

/// One QP of the sample connection of a pinned class.
#[derive(Debug, Serialize)]
struct PinnedQp {
    qp: u32,
    peer_qpn: u32,
    port: u16,
    /// The flow label the verbs transport gives at RTR (mlx5 sends from `port`).
    flow_label: u32,
    /// Relative mode: the bucket relative to `base-port`'s; absolute: the member.
    bucket: u32,
}

/// The ports a pinned class chooses for a sample connection (RoCEv2 from SAMPLE_SRC to
/// SAMPLE_DST, peer QPNs SAMPLE_QPN + i).
#[derive(Debug, Serialize)]
struct PinningPlan {
    class: &'static str,
    mode: &'static str,
    ecmp_width: u32,
    hash: String,
    sample: String,
    qps: Vec<PinnedQp>,
    /// Why no ports could be chosen (the plugin refuses such a class at connect).
    error: Option<String>,
    /// Fewer QPs than ECMP members: what that costs.
    note: Option<String>,
}

/// Connections NCCL opens to one peer NIC at least: it duplicates its ring and tree channels
/// (src/graph/connect.cc `ncclTopoPreset`, "Duplicate channels"; NCCL 2.30.7).
const NCCL_MIN_CHANNELS: u32 = 2;

const SAMPLE_SRC: [u8; 4] = [10, 0, 0, 1];
const SAMPLE_DST: [u8; 4] = [10, 0, 1, 1];
const SAMPLE_QPN: u32 = 0x100;

fn pinning_plans(cfg: &dqplb_config::SiteConfig, classes: &[ClassPlan]) -> Vec<PinningPlan> {
    use dqplb_engine::pinning::{flow_label_for_port, FlowFields};
    use nccl_net_dqplb::plugin::pinning::chooser;
    let paths = &cfg.paths;
    let fields: Vec<&str> = paths.fields.iter().map(|f| f.as_str()).collect();
    let hash = format!(
        "{}, {}, fields {}{}{}",
        paths.hash.as_str(),
        paths.select.as_str(),
        fields.join(","),
        if paths.hash_dest_qpn {
            " + BTH dst QPN (E-ECMP)"
        } else {
            ""
        },
        if classes
            .iter()
            .any(|c| cfg.class.get(c.class).path_pinning == dqplb_config::PathPinning::Absolute)
        {
            format!(", seed {:#x}", paths.seed)
        } else {
            String::new()
        }
    );
    let src = u32::from_be_bytes(SAMPLE_SRC);
    let dst = u32::from_be_bytes(SAMPLE_DST);
    classes
        .iter()
        .filter_map(|c| {
            let spec = cfg.class.get(c.class);
            if spec.path_pinning == dqplb_config::PathPinning::Off {
                return None;
            }
            let mut plan = PinningPlan {
                class: c.class.as_str(),
                mode: spec.path_pinning.as_str(),
                ecmp_width: spec.ecmp_width(),
                hash: hash.clone(),
                sample: format!(
                    "{} -> {}, peer QPNs {SAMPLE_QPN:#x} + i",
                    std::net::Ipv4Addr::from(SAMPLE_SRC),
                    std::net::Ipv4Addr::from(SAMPLE_DST)
                ),
                qps: Vec::new(),
                error: None,
                note: (c.qps.saturating_mul(NCCL_MIN_CHANNELS) < spec.ecmp_width()).then(|| {
                    format!(
                        "{} QPs per connection x {NCCL_MIN_CHANNELS} channels < ecmp-width {}: a \
                         NIC pair's pinned QPs cover a block of the buckets, and pairs whose \
                         blocks meet collide block-wise (worse than hashed ports); connections to \
                         one peer take successive blocks, so pin with qps x channels >= \
                         ecmp-width",
                        c.qps,
                        spec.ecmp_width()
                    )
                }),
            };
            let flows: Vec<FlowFields> = (0..c.qps)
                .map(|i| FlowFields::roce(src, dst, 0, SAMPLE_QPN + i))
                .collect();
            let chosen = chooser(cfg, c.class)
                .map_err(|e| e.msg)
                .and_then(|ch| ch.ok_or_else(|| "not pinned".to_string()))
                .and_then(|ch| ch.ports(0, &flows).map(|p| (ch, p)));
            match chosen {
                Ok((ch, ports)) => {
                    for (i, (port, flow)) in ports.iter().zip(&flows).enumerate() {
                        let f = FlowFields {
                            src_port: *port,
                            ..*flow
                        };
                        let bucket = ch.bucket(&f, SAMPLE_QPN);
                        plan.qps.push(PinnedQp {
                            qp: i as u32,
                            peer_qpn: flow.dst_qpn,
                            port: *port,
                            flow_label: flow_label_for_port(*port).unwrap_or(0),
                            bucket,
                        });
                    }
                }
                Err(e) => plan.error = Some(e),
            }
            Some(plan)
        })
        .collect()
}

/// What the plugin allocates per connection of a class, from the TCP transport's structures as
/// built for the class's parameters (the engine, request tables, per-stream buffers).
#[derive(Debug, Serialize)]
struct Memory {
    class: &'static str,
    send_bytes: usize,
    recv_bytes: usize,
    /// A send comm plus a receive comm: what one peer direction costs a process per channel.
    pair_bytes: usize,
    /// Set above `MEMORY_WARN_BYTES` per pair.
    warning: Option<String>,
}

/// Per comm pair memory above which `plan` warns (NCCL opens one comm pair per channel and
/// peer; hundreds are common).
const MEMORY_WARN_BYTES: usize = 1 << 20;
/// The comm-pair count the warning prices.
const MEMORY_WARN_PAIRS: usize = 200;

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
}

fn memory(cfg: &dqplb_config::SiteConfig, c: &ClassPlan) -> Result<Memory, String> {
    use dqplb_engine::PolicyKind;
    use dqplb_transport::tcp::{ConnParams, TcpRecvComm, TcpSendComm};
    let params = ConnParams {
        qps: u16::try_from(c.qps).map_err(|_| format!("{} QPs", c.qps))?,
        // The depth rule's raised depth when the class runs it: the comms are sized for it.
        outstanding: cfg.class.get(c.class).depth_bound(c.outstanding),
        segment_bytes: u32::try_from(c.segment_bytes)
            .map_err(|_| format!("segment of {} bytes", c.segment_bytes))?,
        max_messages: cfg.engine.max_messages,
        policy: match cfg.engine.policy {
            PolicyName::Dqplb => PolicyKind::Dqplb,
            PolicyName::DqplbLed => PolicyKind::DqplbLed,
            PolicyName::StaticSplit => PolicyKind::StaticSplit,
            PolicyName::RoundRobinMessage => PolicyKind::RoundRobinMessage,
            PolicyName::SingleQp => PolicyKind::SingleQp,
        },
        fabric_id: 0,
    };
    let what = |e: dqplb_transport::NetError| format!("class {}: {e}", c.class.as_str());
    let send_bytes = TcpSendComm::state_bytes(params).map_err(what)?;
    let recv_bytes = TcpRecvComm::state_bytes(params).map_err(what)?;
    let pair_bytes = send_bytes + recv_bytes;
    let mut warning = None;
    if pair_bytes > MEMORY_WARN_BYTES {
        let mut w = format!(
            "{} per comm pair, {} for {MEMORY_WARN_PAIRS} pairs (NCCL opens one per channel and peer)",
            mib(pair_bytes),
            mib(pair_bytes * MEMORY_WARN_PAIRS)
        );
        let default = dqplb_config::SiteConfig::default().engine.max_messages;
        if cfg.engine.max_messages > default {
            let small = ConnParams {
                max_messages: default,
                ..params
            };
            let b = TcpSendComm::state_bytes(small).map_err(what)?
                + TcpRecvComm::state_bytes(small).map_err(what)?;
            let _ = write!(
                w,
                "; max-messages = {} drives it: {default} (the default) needs {}",
                cfg.engine.max_messages,
                mib(b)
            );
        }
        warning = Some(w);
    }
    Ok(Memory {
        class: c.class.as_str(),
        send_bytes,
        recv_bytes,
        pair_bytes,
        warning,
    })
}

#[derive(Debug, Serialize)]
struct PlanReport {
    source: String,
    overrides: Vec<Override>,
    /// The config loader's warnings (unknown NCCL_DQPLB_* variables), also printed on stderr.
    warnings: Vec<String>,
    policy: &'static str,
    hca_third_field: &'static str,
    max_rails: u32,
    max_messages: u32,
    hca: Option<HcaReport>,
    pairs: Vec<PairRow>,
    classes: Vec<ClassPlan>,
    /// NCCL_BUFFSIZE's note, if it was unusable.
    buffsize_note: Option<String>,
    steering: Vec<Steering>,
    /// Classes with path pinning: the ports of a sample connection.
    pinning: Vec<PinningPlan>,
    /// Per class, in the same order.
    memory: Vec<Memory>,
    /// Per class, in the same order: the plan of a TCP connection (its segment, `[tcp]
    /// segment-bytes`; verbs connections use `classes`).
    tcp: Vec<ClassPlan>,
}

fn device_label(name: &str, port: Option<u32>) -> String {
    match port {
        Some(p) => format!("{name}:{p}"),
        None => name.to_string(),
    }
}

fn build_report(
    loaded: LoadedConfig,
    hca: Option<(String, HcaList)>,
    buffsize_env: Option<&str>,
) -> Result<PlanReport, String> {
    let cfg = &loaded.config;
    let memory = cfg
        .plans()
        .iter()
        .map(|c| memory(cfg, c))
        .collect::<Result<Vec<_>, _>>()?;
    let (buffsize, buffsize_note) = nccl_buffsize(buffsize_env);
    let classes = cfg.plans().to_vec();
    let pinning = pinning_plans(cfg, &classes);
    let steer = classes
        .iter()
        .map(|c| steering(cfg.engine.policy, c, buffsize))
        .collect();
    let mut pairs = Vec::new();
    let hca = hca.map(|(value, list)| {
        let with_ids: Vec<(String, FabricId)> = list
            .entries
            .iter()
            .filter_map(|e| e.fabric.map(|f| (device_label(&e.name, e.port), f)))
            .collect();
        for (i, (a, fa)) in with_ids.iter().enumerate() {
            for (b, fb) in &with_ids[i + 1..] {
                pairs.push(PairRow {
                    local: a.clone(),
                    remote: b.clone(),
                    class: classify(fa, fb),
                });
            }
        }
        let devices = list
            .entries
            .iter()
            .map(|e| DeviceRow {
                name: e.name.clone(),
                port: e.port,
                fabric_id: e.fabric.map(|f| f.id),
                dc: e.fabric.map(|f| f.dc),
                rail: e.fabric.map(|f| f.rail),
                plane: e.fabric.and_then(|f| f.plane),
            })
            .collect();
        HcaReport {
            value,
            exclude: list.exclude,
            exact: list.exact,
            devices,
        }
    });
    Ok(PlanReport {
        source: loaded.source.clone(),
        overrides: loaded
            .overrides
            .iter()
            .map(|(variable, value)| Override {
                variable: variable.clone(),
                value: value.clone(),
            })
            .collect(),
        warnings: loaded.warnings.clone(),
        policy: cfg.engine.policy.as_str(),
        hca_third_field: cfg.fabric.hca_third_field.as_str(),
        max_rails: cfg.fabric.max_rails,
        max_messages: cfg.engine.max_messages,
        hca,
        pairs,
        classes,
        buffsize_note,
        steering: steer,
        pinning,
        memory,
        tcp: ConnClass::ALL.map(|c| cfg.tcp_plan(c)).to_vec(),
    })
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}

fn render_table(r: &PlanReport) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(s, "config: {}", r.source);
    if r.overrides.is_empty() {
        let _ = writeln!(s, "overrides: none");
    }
    for o in &r.overrides {
        let _ = writeln!(s, "override: {}={}", o.variable, o.value);
    }
    let _ = writeln!(
        s,
        "policy: {}  max-messages: {}  hca-third-field: {}  max-rails: {}",
        r.policy, r.max_messages, r.hca_third_field, r.max_rails
    );
    match &r.hca {
        None => {
            let _ = writeln!(s, "\nNCCL_IB_HCA: not set (all devices, no fabric ids)");
        }
        Some(h) => {
            let mode = match (h.exclude, h.exact) {
                (true, true) => "exclude, exact names",
                (true, false) => "exclude, name prefixes",
                (false, true) => "exact names",
                (false, false) => "name prefixes",
            };
            let _ = writeln!(s, "\nNCCL_IB_HCA: {} ({mode})", h.value);
            let _ = writeln!(
                s,
                "  {:<16} {:>5} {:>9} {:>4} {:>5} {:>6}",
                "device", "port", "fabric-id", "dc", "rail", "plane"
            );
            for d in &h.devices {
                let port = d.port.map_or_else(|| "any".to_string(), |p| p.to_string());
                let _ = writeln!(
                    s,
                    "  {:<16} {:>5} {:>9} {:>4} {:>5} {:>6}",
                    d.name,
                    port,
                    opt(d.fabric_id),
                    opt(d.dc),
                    opt(d.rail),
                    opt(d.plane)
                );
            }
        }
    }
    if !r.pairs.is_empty() {
        let _ = writeln!(s, "\nconnections between listed devices:");
        for p in &r.pairs {
            let _ = writeln!(s, "  {} <-> {}: {}", p.local, p.remote, p.class.as_str());
        }
    }
    // One steering entry per class, in the same order.
    for (((c, steer), mem), tcp) in r.classes.iter().zip(&r.steering).zip(&r.memory).zip(&r.tcp) {
        let status = if !c.within_budget {
            "OVER BUDGET"
        } else if c.budget_note.is_some() {
            "fits after lowering outstanding"
        } else {
            "fits"
        };
        let _ = writeln!(s, "\nclass {}", c.class.as_str());
        let _ = writeln!(s, "  {:<12} {} us", "rtt", c.rtt_us);
        let _ = writeln!(s, "  {:<12} {} Gb/s", "rate", c.rate_gbps);
        let _ = writeln!(s, "  {:<12} {} B", "bdp", c.bdp_bytes);
        let _ = writeln!(s, "  {:<12} {}", "qps", c.qps);
        let mut depth = format!(
            "{} per QP (ceil(BDP / segment) = {}, clamped to {}..={}",
            c.outstanding, c.bdp_segments, c.min_outstanding, c.max_outstanding
        );
        if c.outstanding != c.ideal_outstanding {
            let _ = write!(
                depth,
                " -> {}, then lowered by the budget",
                c.ideal_outstanding
            );
        }
        let _ = writeln!(s, "  {:<12} {depth})", "outstanding");
        let rule = match &c.depth_rule {
            Some(d) => format!(
                "{} per QP while the slowest QP's latency is >= {} x the median, back after {} \
                 calm checks (16 completions a check)",
                d.raised, d.ratio, d.hold
            ),
            None => "off".to_string(),
        };
        let _ = writeln!(s, "  {:<12} {rule}", "depth rule");
        let repin = match &c.repin_rule {
            Some(r) => format!(
                "verbs: a QP the slowest at >= {} x the median for {} checks moves onto the \
                 fastest QP's source port, judged after {} completions, at most {} moves",
                r.ratio, r.persist, r.settle, r.budget
            ),
            None => "off".to_string(),
        };
        let _ = writeln!(s, "  {:<12} {repin}", "re-pin rule");
        let _ = writeln!(s, "  {:<12} {} B", "segment", c.segment_bytes);
        if tcp.segment_bytes != c.segment_bytes || tcp.outstanding != c.outstanding {
            let _ = writeln!(
                s,
                "  {:<12} {} B segments, {} outstanding, {} B window ([tcp] segment-bytes)",
                "over TCP", tcp.segment_bytes, tcp.outstanding, tcp.inflight_bytes
            );
        }
        let _ = writeln!(
            s,
            "  {:<12} {} B of {} B budget ({status})",
            "in-flight", c.inflight_bytes, c.budget_bytes
        );
        let _ = writeln!(
            s,
            "  {:<12} {} B per send+recv comm pair (send {} B, recv {} B; TCP transport)",
            "memory", mem.pair_bytes, mem.send_bytes, mem.recv_bytes
        );
        if let Some(note) = &c.budget_note {
            let _ = writeln!(s, "  note: {note}");
        }
        if let Some(w) = &mem.warning {
            let _ = writeln!(s, "  warning: {w}");
        }
        if let Some(note) = &steer.note {
            let _ = writeln!(s, "  note: {note}");
        }
    }
    for p in &r.pinning {
        let _ = writeln!(
            s,
            "\npath pinning, class {}: {} over {} ECMP members ({})",
            p.class, p.mode, p.ecmp_width, p.hash
        );
        if let Some(e) = &p.error {
            let _ = writeln!(s, "  error: {e}");
            continue;
        }
        if let Some(n) = &p.note {
            let _ = writeln!(s, "  note: {n}");
        }
        let what = if p.mode == "relative" {
            "bucket relative to base-port's"
        } else {
            "member"
        };
        let _ = writeln!(s, "  sample connection {}:", p.sample);
        let _ = writeln!(
            s,
            "  {:>4} {:>9} {:>6} {:>10} {:>6}  ({what})",
            "QP", "peer QPN", "port", "flow label", "bucket"
        );
        for q in &p.qps {
            let _ = writeln!(
                s,
                "  {:>4} {:>#9x} {:>6} {:>#10x} {:>6}",
                q.qp, q.peer_qpn, q.port, q.flow_label, q.bucket
            );
        }
    }
    if let Some(note) = &r.buffsize_note {
        let _ = writeln!(s, "\nnote: {note}");
    }
    s
}

/// When `path` is a DCQCN profile file (top-level `[profiles.NAME]` tables only) rather than a
/// site config: what it is and where it is used, for a message in place of "unknown field".
pub(crate) fn profile_file_hint(path: &Path) -> Option<String> {
    let table: toml::Table = std::fs::read_to_string(path).ok()?.parse().ok()?;
    let names: Vec<&String> = table.get("profiles")?.as_table()?.keys().collect();
    if table.len() != 1 || names.is_empty() {
        return None;
    }
    let first = names[0];
    Some(format!(
        "{}: a DCQCN profile file ([profiles.NAME]: {}), not a site config. `dqplb check --profile {first}` checks the devices against a profile built into the plugin (plugin-conf/dcqcn-profiles.toml) or one a site config adds under [dcqcn.profiles.NAME]; `dqplb sim sweep --mode p --dcqcn {}:{first}` simulates one from this file",
        path.display(),
        names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "),
        path.display()
    ))
}

/// Runs `dqplb plan` with an injected NCCL_IB_HCA lookup; Ok((stdout text, the config loader's
/// warnings)) or Err(message).
fn plan_output(
    a: &PlanArgs,
    ib_hca_env: Option<String>,
    buffsize_env: Option<String>,
) -> Result<(String, Vec<String>), String> {
    let loaded = match &a.config {
        Some(path) => load_path(Path::new(path), &process_env_vars())
            .map_err(|e| profile_file_hint(Path::new(path)).unwrap_or_else(|| e.to_string())),
        None => load_from_process_env().map_err(|e| e.to_string()),
    }?;
    let hca_text = a.hca.clone().or(ib_hca_env.filter(|v| !v.is_empty()));
    let hca = match hca_text {
        Some(text) => {
            let fabric = &loaded.config.fabric;
            let list = HcaList::parse(&text, fabric.hca_third_field, fabric.max_rails)
                .map_err(|e| e.to_string())?;
            Some((text, list))
        }
        None => None,
    };
    let report = build_report(loaded, hca, buffsize_env.as_deref())?;
    let text = match a.format {
        Format::Json => serde_json::to_string_pretty(&report)
            .map(|j| j + "\n")
            .map_err(|e| format!("cannot encode JSON: {e}"))?,
        Format::Table => render_table(&report),
    };
    Ok((text, report.warnings))
}

/// `dqplb plan [--config F] [--hca STRING] [--format table|json]`; returns the exit code.
pub(crate) fn run(a: &PlanArgs) -> i32 {
    match plan_output(
        a,
        std::env::var("NCCL_IB_HCA").ok(),
        std::env::var("NCCL_BUFFSIZE").ok(),
    ) {
        Ok((text, warnings)) => {
            for w in &warnings {
                eprintln!("dqplb plan: warning: {w}");
            }
            print!("{text}");
            0
        }
        Err(message) => {
            eprintln!("dqplb plan: {message}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, Cmd};

    fn plan(args: &[&str]) -> Result<PlanArgs, clap::Error> {
        let mut all = vec!["plan"];
        all.extend(args);
        match parse(&all)? {
            Cmd::Plan(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_parse_in_both_spellings() {
        let a = plan(&["--config=x.toml", "--hca", "mlx5", "--format", "json"]).expect("valid");
        assert_eq!(a.config.as_deref(), Some("x.toml"));
        assert_eq!(a.hca.as_deref(), Some("mlx5"));
        assert_eq!(a.format, Format::Json);
        // NCCL_IB_HCA's leading '=' (exact names) and '^' (exclude) are values, not syntax.
        assert_eq!(
            plan(&["--hca", "=mlx5_0:1"]).unwrap().hca.as_deref(),
            Some("=mlx5_0:1")
        );
        assert_eq!(
            plan(&["--hca==mlx5_0"]).unwrap().hca.as_deref(),
            Some("=mlx5_0")
        );
        assert_eq!(plan(&[]).unwrap().format, Format::Table);
        let e = plan(&["--format", "xml"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(
            e.to_string().contains("[possible values: table, json]"),
            "{e}"
        );
        let e = plan(&["--hca"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("a value is required for '--hca <STRING>'"),
            "{e}"
        );
        let e = plan(&["-x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
