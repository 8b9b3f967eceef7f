//! What a simulation reports, per rail and for the fabric: time against the line-rate ideal,
//! link utilisation, the uplink collision histogram against Binomial(K, 1/M), errors; JSON and CSV.

use serde::{Serialize, Serializer};

use super::bmode::PhaseOutcome;
use super::conn::{Errors, PhaseRun, SimPolicy};
use super::latency::{LatencyHist, LatencySummary};
use super::packet::PacketSummary;
use super::run::{Mode, SimConfig};
use super::theory::binomial_pmf;
use super::timeseries::TsRow;
use super::topology::{LinkKind, Rail};
use super::traffic::{Phase, Placement, TrafficKind};

/// Display and Serialize as `name()`: the text the JSON, the CSV and the tables carry.
macro_rules! as_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name())
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
    )*};
}

as_name!(Mode, SimPolicy, TrafficKind, Placement);

/// One rail's outcome, summed over the phases (ring time scaled to all its steps).
#[derive(Debug, Clone, Serialize)]
pub struct RailResult {
    pub rail: usize,
    /// Collective time on this rail, picoseconds (scaled when only some ring steps ran).
    pub time_ps: f64,
    /// Line-rate time of the same bytes, picoseconds.
    pub ideal_ps: f64,
    /// Simulated (unscaled) time.
    pub simulated_ps: u64,
    pub events: u64,
    pub solves: u64,
    pub errors: Errors,
    /// Messages not released on one side or the other at the end (0 in a clean run).
    pub missing: u64,
    pub messages: u64,
    pub max_link_util: f64,
    pub max_uplink_util: f64,
    /// Third tier: the fullest live aggregation-core link (either direction); absent in two.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_core_util: Option<f64>,
    pub mean_uplink_util: f64,
    /// `uplink_hist[i]`: leaf uplinks carrying i QP paths (summed over phases).
    pub uplink_hist: Vec<u64>,
    /// The same under uniform hashing: sum over leaves of M * Binomial(K_leaf, 1/M)(i).
    pub uplink_hist_expected: Vec<f64>,
    /// Mean over connections of (bytes on its busiest QP / mean bytes per QP).
    pub qp_imbalance: f64,
    /// Deepest link FIFO, segments (B mode).
    pub max_queue: usize,
    /// QPs replaced by the re-hash rule (dqplb-rehash).
    pub rehashes: u64,
    /// Message latency, post at the sender to release at the receiver (simulated steps).
    pub message_latency: LatencySummary,
    #[serde(skip)]
    pub latency: LatencyHist,
    /// Time over ideal of the best split over the hashed QP paths: lower and upper estimate,
    /// phases weighted by their ideal time (phases run one after another; the ring's steps
    /// all use the same paths, so one phase).
    pub bound_lower: f64,
    pub bound_upper: f64,
    /// The ideal time of the phases that have a bound, the weight of the mean above.
    #[serde(skip)]
    pub bound_ideal_ps: f64,
    /// P mode: packets, ECN marks, CNPs, rate cuts, deepest queue (and the time series).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packet: Option<PacketSummary>,
    /// B and F mode: the time series, phases in order (P mode's is in `packet`); moved to
    /// [`SimResult::timeseries`] when the rails are merged.
    #[serde(skip)]
    pub timeseries: Vec<TsRow>,
    /// Per leaf uplink, index `leaf * spines + spine`: busy fraction over the rail's simulated
    /// time (bytes carried x picoseconds per byte / simulated picoseconds, all phases).
    pub uplink_util: Vec<f64>,
    /// Uplinks that are down (same index as `uplink_util`, where they read 0).
    pub uplink_failed: Vec<u32>,
    #[serde(skip)]
    uplink_busy_ps: Vec<f64>,
}

/// One rail's leaf uplinks, as [`SimResult::uplink_rails`] gives them.
pub struct RailUplinks<'a> {
    pub rail: usize,
    /// Busy fraction, indexed `leaf * spines + spine`.
    pub util: &'a [f64],
    /// Indices (as in `util`) of the links that are down.
    pub failed: Vec<u32>,
    /// Fullest and mean live uplink.
    pub max: f64,
    pub mean: f64,
}

impl RailResult {
    pub fn new(rail: usize) -> RailResult {
        RailResult {
            rail,
            time_ps: 0.0,
            ideal_ps: 0.0,
            simulated_ps: 0,
            events: 0,
            solves: 0,
            errors: Errors::default(),
            missing: 0,
            messages: 0,
            max_link_util: 0.0,
            max_uplink_util: 0.0,
            max_core_util: None,
            mean_uplink_util: 0.0,
            uplink_hist: Vec::new(),
            uplink_hist_expected: Vec::new(),
            qp_imbalance: 0.0,
            max_queue: 0,
            rehashes: 0,
            message_latency: LatencySummary::default(),
            latency: LatencyHist::default(),
            bound_lower: 0.0,
            bound_upper: 0.0,
            bound_ideal_ps: 0.0,
            packet: None,
            timeseries: Vec::new(),
            uplink_util: Vec::new(),
            uplink_failed: Vec::new(),
            uplink_busy_ps: Vec::new(),
        }
    }

    pub fn absorb(&mut self, rail: &Rail, phase: &Phase, run: &PhaseRun, out: &PhaseOutcome) {
        let scale = f64::from(phase.total_steps) / f64::from(phase.steps);
        self.time_ps += out.time_ps as f64 * scale;
        let host_ppb = rail.ps_per_byte[0];
        self.ideal_ps += phase.nic_bytes as f64 * host_ppb;
        self.simulated_ps += out.time_ps;
        self.events += out.events;
        self.solves += out.solves;
        self.errors.add(&run.errors);
        self.missing += run.missing();
        self.messages += run.delivered_messages;
        self.rehashes += run.rehashes;
        self.latency.merge(&run.latency);
        self.message_latency = self.latency.summary();
        self.max_queue = self.max_queue.max(out.max_queue);
        self.timeseries.extend_from_slice(&out.timeseries);
        if let Some(b) = out.bound {
            let w = phase.nic_bytes as f64 * host_ppb;
            let before = self.bound_ideal_ps;
            self.bound_ideal_ps += w;
            if self.bound_ideal_ps > 0.0 {
                let mean = |old: f64, new: f64| (old * before + new * w) / self.bound_ideal_ps;
                self.bound_lower = mean(self.bound_lower, b.lower);
                self.bound_upper = mean(self.bound_upper, b.upper);
            }
        }
        let t = out.time_ps.max(1) as f64;
        let (mut up_sum, mut up_n) = (0.0, 0usize);
        let first_up = rail.leaf_up(0, 0) as usize;
        let uplinks = rail.leaves * rail.spines;
        if self.uplink_busy_ps.len() != uplinks {
            self.uplink_busy_ps = vec![0.0; uplinks];
            self.uplink_failed = (0..uplinks)
                .filter(|&i| !rail.alive[first_up + i])
                .map(|i| i as u32)
                .collect();
        }
        for (l, &b) in out.link_bytes.iter().enumerate() {
            let busy = b as f64 * rail.ps_per_byte[l];
            let u = busy / t;
            self.max_link_util = self.max_link_util.max(u);
            let kind = rail.kind(l as u32);
            if rail.alive[l] && matches!(kind, LinkKind::AggUp | LinkKind::CoreDown) {
                self.max_core_util = Some(self.max_core_util.unwrap_or(0.0).max(u));
            }
            if rail.kind(l as u32) == LinkKind::LeafUp {
                self.uplink_busy_ps[l - first_up] += busy;
                if rail.alive[l] {
                    self.max_uplink_util = self.max_uplink_util.max(u);
                    up_sum += u;
                    up_n += 1;
                }
            }
        }
        let sim_t = self.simulated_ps.max(1) as f64;
        self.uplink_util = self.uplink_busy_ps.iter().map(|b| b / sim_t).collect();
        if up_n > 0 {
            self.mean_uplink_util = up_sum / up_n as f64;
        }
        let m = rail.spines;
        for leaf in 0..rail.leaves {
            let counts = &out.uplink_paths[leaf * m..(leaf + 1) * m];
            let k: u32 = counts.iter().sum();
            for &c in counts {
                grow(&mut self.uplink_hist, c as usize + 1);
                self.uplink_hist[c as usize] += 1;
            }
            if k > 0 {
                let pmf = binomial_pmf(k as usize, 1.0 / m as f64);
                for (i, p) in pmf.iter().enumerate() {
                    if *p > 1e-9 {
                        while self.uplink_hist_expected.len() <= i {
                            self.uplink_hist_expected.push(0.0);
                        }
                        self.uplink_hist_expected[i] += m as f64 * p;
                    }
                }
            } else {
                if self.uplink_hist_expected.is_empty() {
                    self.uplink_hist_expected.push(0.0);
                }
                self.uplink_hist_expected[0] += m as f64;
            }
        }
        let mut imb = 0.0;
        for c in &run.conns {
            let st = c.sender.qp_stats();
            let total: u64 = st.iter().map(|s| s.bytes).sum();
            let max = st.iter().map(|s| s.bytes).max().unwrap_or(0);
            if total > 0 {
                imb += max as f64 * st.len() as f64 / total as f64;
            }
        }
        self.qp_imbalance = imb / run.conns.len().max(1) as f64;
    }
}

fn grow(v: &mut Vec<u64>, len: usize) {
    if v.len() < len {
        v.resize(len, 0);
    }
}

/// The whole fabric's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub mode: Mode,
    pub policy: SimPolicy,
    pub qps: usize,
    pub outstanding: u32,
    pub segment_bytes: u32,
    pub traffic: TrafficKind,
    pub bytes: u64,
    pub step_bytes: u64,
    /// Cross-rail all-to-all: batches of 8 p2p rounds per phase (absent for other traffic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p2p_batches: Option<u32>,
    pub placement: Placement,
    pub hosts: usize,
    /// Hosts of the background job (the collective runs on the others).
    pub background_hosts: usize,
    pub rails: usize,
    pub rails_simulated: usize,
    pub hosts_per_leaf: usize,
    pub leaves: usize,
    pub spines: usize,
    /// Third tier (tier3.rs): pods and core switches per rail; absent with two tiers.
    #[serde(skip_serializing_if = "is_zero")]
    pub pods: usize,
    #[serde(skip_serializing_if = "is_zero")]
    pub cores: usize,
    /// DC interconnect (dci.rs), only when set: the aggregation -> core hop's latency and the
    /// propagation round trip between DCs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dci_latency_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_dc_rtt_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dci_oversub: Option<f64>,
    pub oversub: f64,
    pub host_gbps: f64,
    pub source_port: String,
    pub hash_dest_qpn: bool,
    /// Connections per rank pair (NCCL's channels).
    pub channels: u32,
    pub failed_links: usize,
    pub slow_links: usize,
    pub seed: u64,
    pub steps_simulated: u32,
    pub steps_total: u32,
    /// Collective time: the slowest rail.
    pub time_us: f64,
    pub ideal_us: f64,
    pub pct_of_ideal: f64,
    pub time_over_ideal: f64,
    /// Bytes each NIC sends over the time (for the ring: NCCL's bus bandwidth).
    pub busbw_gbps: f64,
    pub events: u64,
    pub solves: u64,
    pub errors: Errors,
    pub missing: u64,
    pub messages: u64,
    pub max_uplink_util: f64,
    /// Third tier: the fullest aggregation-core link of any rail; absent with two tiers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_core_util: Option<f64>,
    pub mean_uplink_util: f64,
    pub qp_imbalance: f64,
    pub rehashes: u64,
    /// Message latency over all rails.
    pub message_latency: LatencySummary,
    /// Fabric bound (slowest rail) of any policy over the hashed QP paths, time over ideal.
    pub bound_lower: f64,
    pub bound_upper: f64,
    pub uplink_hist: Vec<u64>,
    pub uplink_hist_expected: Vec<f64>,
    /// P mode, over all rails (time series in rail order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packet: Option<PacketSummary>,
    /// B and F mode: the time series of every rail, in rail order.
    #[serde(skip)]
    pub timeseries: Vec<TsRow>,
    pub per_rail: Vec<RailResult>,
}

impl SimResult {
    pub fn new(cfg: &SimConfig, phases: &[Phase], mut rails: Vec<RailResult>) -> SimResult {
        let timeseries: Vec<TsRow> = rails
            .iter_mut()
            .flat_map(|r| std::mem::take(&mut r.timeseries))
            .collect();
        let worst = rails
            .iter()
            .max_by(|a, b| a.time_ps.total_cmp(&b.time_ps))
            .cloned();
        let time = worst.as_ref().map_or(0.0, |r| r.time_ps);
        let ideal = worst.as_ref().map_or(0.0, |r| r.ideal_ps);
        let mut errors = Errors::default();
        let mut hist: Vec<u64> = Vec::new();
        let mut hist_e: Vec<f64> = Vec::new();
        for r in &rails {
            errors.add(&r.errors);
            grow(&mut hist, r.uplink_hist.len());
            for (i, &h) in r.uplink_hist.iter().enumerate() {
                hist[i] += h;
            }
            if hist_e.len() < r.uplink_hist_expected.len() {
                hist_e.resize(r.uplink_hist_expected.len(), 0.0);
            }
            for (i, &h) in r.uplink_hist_expected.iter().enumerate() {
                hist_e[i] += h;
            }
        }
        let n = rails.len().max(1) as f64;
        let bytes_per_nic: u64 = phases.iter().map(|p| p.bytes_per_conn_total()).sum();
        let f = &cfg.fabric;
        SimResult {
            mode: cfg.mode,
            policy: cfg.shape.policy,
            qps: cfg.shape.qps,
            outstanding: cfg.shape.outstanding,
            segment_bytes: cfg.shape.segment_bytes,
            traffic: cfg.traffic.kind,
            bytes: cfg.traffic.bytes,
            step_bytes: cfg.traffic.step_bytes,
            p2p_batches: (cfg.traffic.kind == TrafficKind::CrossRailAllToAll)
                .then_some(cfg.traffic.p2p_batches),
            placement: cfg.traffic.placement,
            hosts: f.hosts,
            background_hosts: phases.first().map_or(0, |p| p.bg_pairs.len()),
            rails: f.rails,
            rails_simulated: rails.len(),
            hosts_per_leaf: f.hosts_per_leaf,
            leaves: f.leaves(),
            spines: f.spines,
            pods: f.pods,
            cores: f.cores_total(),
            dci_latency_us: (f.dci_latency_ps > 0).then(|| f.dci_latency() as f64 / 1e6),
            cross_dc_rtt_us: (f.dci_latency_ps > 0).then(|| f.cross_dc_rtt_ps() as f64 / 1e6),
            dci_oversub: (f.dci_oversub != 1.0).then_some(f.dci_oversub),
            oversub: f.oversub,
            host_gbps: f.host_gbps,
            source_port: f.hash.source_port.name(),
            hash_dest_qpn: f.hash.dest_qpn,
            channels: cfg.traffic.channels,
            failed_links: f.failed_links,
            slow_links: f.slow_links,
            seed: cfg.seed,
            steps_simulated: phases.iter().map(|p| p.steps).sum(),
            steps_total: phases.iter().map(|p| p.total_steps).sum(),
            time_us: time / 1e6,
            ideal_us: ideal / 1e6,
            pct_of_ideal: if time > 0.0 {
                100.0 * ideal / time
            } else {
                0.0
            },
            time_over_ideal: if ideal > 0.0 { time / ideal } else { 0.0 },
            busbw_gbps: if time > 0.0 {
                bytes_per_nic as f64 * 8.0 / (time / 1e3)
            } else {
                0.0
            },
            events: rails.iter().map(|r| r.events).sum(),
            solves: rails.iter().map(|r| r.solves).sum(),
            errors,
            missing: rails.iter().map(|r| r.missing).sum(),
            messages: rails.iter().map(|r| r.messages).sum(),
            max_uplink_util: rails.iter().map(|r| r.max_uplink_util).fold(0.0, f64::max),
            max_core_util: rails
                .iter()
                .filter_map(|r| r.max_core_util)
                .reduce(f64::max),
            mean_uplink_util: rails.iter().map(|r| r.mean_uplink_util).sum::<f64>() / n,
            qp_imbalance: rails.iter().map(|r| r.qp_imbalance).sum::<f64>() / n,
            rehashes: rails.iter().map(|r| r.rehashes).sum(),
            message_latency: {
                let mut h = LatencyHist::default();
                for r in &rails {
                    h.merge(&r.latency);
                }
                h.summary()
            },
            bound_lower: rails.iter().map(|r| r.bound_lower).fold(0.0, f64::max),
            bound_upper: rails.iter().map(|r| r.bound_upper).fold(0.0, f64::max),
            uplink_hist: hist,
            uplink_hist_expected: hist_e,
            packet: rails.iter().filter_map(|r| r.packet.as_ref()).fold(
                None,
                |acc: Option<PacketSummary>, p| {
                    let mut a = acc.unwrap_or_default();
                    a.add(p);
                    Some(a)
                },
            ),
            timeseries,
            per_rail: rails,
        }
    }

    /// The time series of this run, whichever mode sampled it.
    pub fn series(&self) -> &[TsRow] {
        match &self.packet {
            Some(p) => &p.timeseries,
            None => &self.timeseries,
        }
    }

    /// Whether the run simulated the rails as one plane (cross-rail traffic).
    pub fn is_plane(&self) -> bool {
        self.traffic.is_plane()
    }

    /// Per rail, its leaf uplinks. A cross-rail run's one plane holds every rail's leafs in
    /// rail order (cross_rail.rs), so its uplinks are cut back into rails here.
    pub fn uplink_rails(&self) -> Vec<RailUplinks<'_>> {
        let plane = self.is_plane();
        let mut out = Vec::new();
        for r in &self.per_rail {
            if !plane {
                out.push(RailUplinks {
                    rail: r.rail,
                    util: &r.uplink_util,
                    failed: r.uplink_failed.clone(),
                    max: r.max_uplink_util,
                    mean: r.mean_uplink_util,
                });
                continue;
            }
            let per = (self.leaves * self.spines).max(1);
            for (c, chunk) in r.uplink_util.chunks(per).enumerate() {
                let lo = (c * per) as u32;
                let failed: Vec<u32> = r
                    .uplink_failed
                    .iter()
                    .filter(|&&i| i >= lo && i < lo + chunk.len() as u32)
                    .map(|&i| i - lo)
                    .collect();
                let live: Vec<f64> = (0..chunk.len())
                    .filter(|i| !failed.contains(&(*i as u32)))
                    .map(|i| chunk[i])
                    .collect();
                let max = live.iter().copied().fold(0.0, f64::max);
                let mean = live.iter().sum::<f64>() / live.len().max(1) as f64;
                out.push(RailUplinks {
                    rail: c,
                    util: chunk,
                    failed,
                    max,
                    mean,
                });
            }
        }
        out
    }

    /// Header of [`SimResult::uplink_csv`].
    pub const UPLINK_CSV_HEADER: &'static str = "policy,qps,rail,leaf,spine,util,failed";

    /// The per-uplink utilisation dump: one row per leaf->spine link of every simulated rail.
    pub fn uplink_csv(&self) -> String {
        let mut s = String::new();
        for p in self.uplink_rails() {
            let (rail, failed) = (p.rail, &p.failed);
            for (i, u) in p.util.iter().enumerate() {
                s.push_str(&format!(
                    "{},{},{},{},{},{:.6},{}\n",
                    self.policy,
                    self.qps,
                    rail,
                    i / self.spines.max(1),
                    i % self.spines.max(1),
                    u,
                    failed.contains(&(i as u32))
                ));
            }
        }
        s
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// CSV header matching [`SimResult::csv_row`].
    pub const CSV_HEADER: &'static str = "mode,policy,qps,outstanding,segment_bytes,traffic,bytes,placement,hosts,rails,leaves,spines,oversub,source_port,hash_dest_qpn,failed_links,slow_links,seed,time_us,ideal_us,pct_of_ideal,busbw_gbps,max_uplink_util,qp_imbalance,bound_lower,bound_upper,msg_p50_us,msg_p99_us,events,solves,errors,missing";

    pub fn csv_row(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.4},{:.4},{:.4},{:.4},{:.3},{:.3},{},{},{},{}",
            self.mode,
            self.policy,
            self.qps,
            self.outstanding,
            self.segment_bytes,
            self.traffic,
            self.bytes,
            self.placement,
            self.hosts,
            self.rails,
            self.leaves,
            self.spines,
            self.oversub,
            self.source_port,
            self.hash_dest_qpn,
            self.failed_links,
            self.slow_links,
            self.seed,
            self.time_us,
            self.ideal_us,
            self.pct_of_ideal,
            self.busbw_gbps,
            self.max_uplink_util,
            self.qp_imbalance,
            self.bound_lower,
            self.bound_upper,
            self.message_latency.p50_us,
            self.message_latency.p99_us,
            self.events,
            self.solves,
            self.errors.total(),
            self.missing
        )
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
