//! The port-hash scenarios of `dqplb paths-bench` (6 and 7): the path of a data stream follows a
//! hash of its source port, as ECMP's does, so a replaced stream (new port) lands on a new path.

use std::time::Duration;

use dqplb_engine::pinning::{qpn_port, BucketSelect, Field, FieldLayout, HashFamily, RelativePins};
use dqplb_engine::{PolicyKind, RehashRule};

use super::hashed_shape::{self, bucket_at, HashPlan, PORT_SHIFT};
use super::metrics::{acked, first_at, mbit, ms, sustained_delay, SeriesPoint};
use super::shape::{self, Shaper};
use super::trial::{self, Connected, Sample, TrialOutput, TrialSpec};

/// Ids of the port-hash scenarios.
pub(crate) const HASHED_IDS: [u32; 3] = [6, 7, 8];
/// Scenario 8's "hashed" ports are what mlx5 gives QP pairs with flow label 0: the port of
/// `rdma_calc_flow_label(lqpn, rqpn)` for consecutive QPNs from these (a sender's data QPs and
/// the receiver's, as one process creates them).
pub(crate) const HASHED_LQPN: u32 = 0x12;
pub(crate) const HASHED_RQPN: u32 = 0x1c;
/// Goal of the pinned variant: this fraction of the ideal.
pub(crate) const PINNED_GOAL: f64 = 0.95;
/// Seed of scenario 8's random ports.
const RANDOM_PORT_SEED: u64 = 0x5EED_0008;

/// One step of splitmix64 (a fixed, well-mixed sequence; no dependency for eight numbers).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
/// Convergence: sustained throughput of at least this fraction of the ideal (issue goal 0.9).
pub(crate) const CONVERGE_FRACTION: f64 = 0.9;
/// Recovery after a path death: this fraction of the new ideal (issue goal 0.85 within 200 ms).
pub(crate) const RECOVER_FRACTION: f64 = 0.85;
/// Shortest span a sustained average is taken over: goodput moves in whole messages (1 MiB is
/// about 12 ms at 700 Mbit/s), so a window of several messages.
pub(crate) const SUSTAIN_WINDOW_MS: f64 = 100.0;
/// A sustained level counts only with this much of the run after it (a last lucky window is
/// not convergence).
pub(crate) const MIN_EVIDENCE_MS: f64 = 4.0 * SUSTAIN_WINDOW_MS;

/// Source ports of the streams are spaced by 2 (bit 0 is not hashed, see hashed_shape).
pub(crate) const PORT_STRIDE: u16 = 2;

/// Where a variant's data streams get their source ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ports {
    /// `port_base + (1 + i) x 2`: consecutive buckets (scenarios 6 and 7).
    Stride,
    /// The QPN-derived ports of today's mlx5 (flow label 0), hashed by the switch as they fall.
    QpnHashed,
    /// Uniformly random ports in 0xC000..=0xFFFF (fixed seed): what a hash that scrambles the
    /// port (a CRC over the 5-tuple) makes of any port choice, balls in bins.
    Random,
    /// `engine::pinning` relative pins from the first hashed port: the S streams on S distinct
    /// buckets of the switch's hash by construction, whatever that port's own bucket.
    Pinned,
}

/// One way of running the connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Variant {
    pub label: &'static str,
    pub policy: PolicyKind,
    pub rehash: bool,
    pub isolation: bool,
    pub ports: Ports,
}

/// Rule and timeout knobs of the path-health variants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HealthKnobs {
    pub rule: RehashRule,
    pub stall_timeout_ms: u64,
}

/// A port-hash scenario: `streams` data streams over `buckets` hashed paths.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HashedScenario {
    pub id: u32,
    pub name: &'static str,
    pub what: &'static str,
    pub streams: usize,
    pub buckets: usize,
    pub unit_mbit: f64,
    /// Streams whose first bucket is slow (scenario 6).
    pub slow_streams: Vec<usize>,
    pub slow_mbit: f64,
    /// (ms after start, stream whose first bucket dies) (scenario 7).
    pub death: Option<(u64, usize)>,
    pub variants: Vec<Variant>,
    /// Source-port bits below the bucket bits of the switch's hash (hashed_shape::bucket_at).
    pub shift: u32,
}

const DQPLB: Variant = Variant {
    label: "dqplb",
    policy: PolicyKind::Dqplb,
    rehash: false,
    isolation: false,
    ports: Ports::Stride,
};

/// Builds scenario `id` (6 or 7) with rates from `unit_mbit`; `buckets` overrides the default.
pub(crate) fn build(
    id: u32,
    unit_mbit: f64,
    slow_fraction: f64,
    duration_ms: u64,
    buckets: Option<usize>,
) -> Result<HashedScenario, String> {
    let sc = match id {
        6 => HashedScenario {
            id,
            name: "hash-2-of-8",
            what:
                "8 streams hashed by source port onto 16 paths; the paths of 2 of them run at 10%",
            streams: 8,
            buckets: buckets.unwrap_or(16),
            unit_mbit,
            slow_streams: vec![2, 5],
            slow_mbit: unit_mbit * slow_fraction,
            death: None,
            variants: vec![
                DQPLB,
                Variant {
                    label: "dqplb+rehash",
                    rehash: true,
                    ..DQPLB
                },
                Variant {
                    label: "static-split",
                    policy: PolicyKind::StaticSplit,
                    ..DQPLB
                },
                Variant {
                    label: "round-robin-message",
                    policy: PolicyKind::RoundRobinMessage,
                    ..DQPLB
                },
            ],
            shift: PORT_SHIFT,
        },
        7 => HashedScenario {
            id,
            name: "hash-path-death",
            what: "8 streams hashed onto 8 paths; the path of stream 2 dies at 1/3 of the run",
            streams: 8,
            buckets: buckets.unwrap_or(8),
            unit_mbit,
            slow_streams: Vec::new(),
            slow_mbit: unit_mbit,
            death: Some((duration_ms / 3, 2)),
            variants: vec![
                Variant {
                    label: "dqplb-no-isolation",
                    ..DQPLB
                },
                Variant {
                    label: "dqplb+isolation",
                    isolation: true,
                    ..DQPLB
                },
                // Equal paths before the death: the rule must not fire on them.
                Variant {
                    label: "dqplb+isolation+rehash",
                    isolation: true,
                    rehash: true,
                    ..DQPLB
                },
            ],
            shift: PORT_SHIFT,
        },
        8 => HashedScenario {
            id,
            name: "pinned-vs-hashed",
            what: "8 streams over 8 equal paths hashed by the low source-port bits: mlx5's QPN-derived ports against ports pinned by engine::pinning",
            streams: 8,
            buckets: buckets.unwrap_or(8),
            unit_mbit,
            slow_streams: Vec::new(),
            slow_mbit: unit_mbit,
            death: None,
            variants: vec![
                Variant {
                    label: "dqplb-hashed-ports",
                    ports: Ports::QpnHashed,
                    ..DQPLB
                },
                Variant {
                    label: "dqplb-random-ports",
                    ports: Ports::Random,
                    ..DQPLB
                },
                Variant {
                    label: "dqplb-pinned-ports",
                    ports: Ports::Pinned,
                    ..DQPLB
                },
                Variant {
                    label: "dqplb-led-pinned-ports",
                    policy: PolicyKind::DqplbLed,
                    ports: Ports::Pinned,
                    ..DQPLB
                },
            ],
            shift: 0,
        },
        other => return Err(format!("{other} is not a port-hash scenario (6, 7 or 8)")),
    };
    if !sc.buckets.is_power_of_two() || !(2..=hashed_shape::MAX_BUCKETS).contains(&sc.buckets) {
        return Err(format!(
            "--buckets {}: must be a power of two in 2..={}",
            sc.buckets,
            hashed_shape::MAX_BUCKETS
        ));
    }
    if sc.buckets < sc.streams {
        return Err(format!(
            "--buckets {}: scenario {id} needs at least {} (one per stream)",
            sc.buckets, sc.streams
        ));
    }
    Ok(sc)
}

impl HashedScenario {
    /// Source port of data stream i.
    pub(crate) fn port(&self, port_base: u16, i: usize) -> u16 {
        port_base + (1 + i as u16) * PORT_STRIDE
    }

    /// First bucket of each stream under the stride ports (distinct: consecutive buckets).
    pub(crate) fn initial_buckets(&self, port_base: u16) -> Vec<usize> {
        (0..self.streams)
            .map(|i| self.bucket(self.port(port_base, i)))
            .collect()
    }

    /// The bucket the switch's hash gives a source port.
    pub(crate) fn bucket(&self, port: u16) -> usize {
        bucket_at(port, self.buckets, self.shift)
    }

    /// The data streams' source ports under `ports`.
    pub(crate) fn stream_ports(&self, ports: Ports, port_base: u16) -> Result<Vec<u16>, String> {
        let hashed = |i: usize| qpn_port(HASHED_LQPN + i as u32, HASHED_RQPN + i as u32);
        match ports {
            Ports::Stride => Ok((0..self.streams).map(|i| self.port(port_base, i)).collect()),
            Ports::QpnHashed => Ok((0..self.streams).map(hashed).collect()),
            Ports::Random => {
                let mut x = RANDOM_PORT_SEED;
                Ok((0..self.streams)
                    .map(|_| {
                        x = splitmix64(x);
                        0xC000 | (x as u16 & 0x3FFF)
                    })
                    .collect())
            }
            Ports::Pinned => {
                // The bench's switch hash is the XOR fold of the source port alone (the tc hash
                // takes its low bits); relative mode needs neither its seed nor the base port's
                // bucket.
                let layout = FieldLayout::new(&[Field::SrcPort]).map_err(|e| e.to_string())?;
                let pins = RelativePins::new(
                    HashFamily::XorFold,
                    BucketSelect::LowBits,
                    layout,
                    self.buckets as u32,
                    hashed(0),
                )
                .map_err(|e| e.to_string())?;
                (0..self.streams as u32)
                    .map(|i| pins.port(i).map_err(|e| e.to_string()))
                    .collect()
            }
        }
    }

    /// First bucket of each stream of variant `v`.
    pub(crate) fn initial_buckets_for(&self, v: &Variant, port_base: u16) -> Vec<usize> {
        match v.ports {
            Ports::Stride => self.initial_buckets(port_base),
            p => self
                .stream_ports(p, port_base)
                .map(|ports| ports.iter().map(|q| self.bucket(*q)).collect())
                .unwrap_or_default(),
        }
    }

    /// Bucket rates at the start.
    pub(crate) fn bucket_rates(&self, port_base: u16) -> Vec<f64> {
        let first = self.initial_buckets(port_base);
        let mut r = vec![self.unit_mbit; self.buckets];
        for s in &self.slow_streams {
            r[first[*s]] = self.slow_mbit;
        }
        r
    }

    /// Bucket that dies, if any.
    pub(crate) fn dead_bucket(&self, port_base: u16) -> Option<usize> {
        self.death
            .map(|(_, s)| self.bucket(self.port(port_base, s)))
    }

    /// Ideal at `t_ms`: the `streams` fastest live buckets, one stream on each (a stream can use
    /// one path at a time; a re-hashed stream may find any of them).
    pub(crate) fn ideal_at(&self, port_base: u16, t_ms: f64) -> f64 {
        let mut r = self.bucket_rates(port_base);
        if let (Some((at, _)), Some(b)) = (self.death, self.dead_bucket(port_base)) {
            if t_ms >= at as f64 {
                r[b] = 0.0;
            }
        }
        r.sort_by(|a, b| b.total_cmp(a));
        r.iter().take(self.streams).sum()
    }
}

/// Figures of a path death.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeathFigures {
    pub at_ms: f64,
    pub new_ideal_mbit: f64,
    /// Delay after the death until goodput (completed messages) stays >= 0.85 of the new ideal
    /// (None: never).
    pub recover_ms: Option<f64>,
    /// Delay until every 100 ms window of acknowledged segment bytes (what the paths carry,
    /// blocked messages or not) is >= 0.85 of the new ideal.
    pub recover_acked_ms: Option<f64>,
    /// Goodput from the death to the end over the new ideal.
    pub after_ratio: f64,
    /// Streams replaced before the death, on equal live paths: re-hashes the rule should not
    /// have made.
    pub replaced_before: u64,
}

/// The result of one (scenario, variant) trial.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HashedSummary {
    pub scenario: u32,
    pub name: &'static str,
    pub label: &'static str,
    pub streams: usize,
    pub buckets: usize,
    pub window_ms: f64,
    pub ideal_mbit: f64,
    pub achieved_mbit: f64,
    pub ratio: f64,
    /// Acknowledged segment bytes over the window / ideal (goodput's whole-message steps and
    /// the backlog of partly sent messages do not bias it).
    pub acked_ratio: f64,
    /// Goodput over the last third of the run over its ideal.
    pub late_ratio: f64,
    /// From the start until every 100 ms window of acknowledged throughput is >= 0.9 of the
    /// ideal (None: never, or only in the last 400 ms).
    pub converge_ms: Option<f64>,
    pub death: Option<DeathFigures>,
    pub rehashes: u64,
    pub failures: u64,
    pub resent: u64,
    pub repaths: u64,
    pub initial_buckets: Vec<usize>,
    pub final_buckets: Vec<usize>,
    pub sent_messages: u64,
    pub received_messages: u64,
    pub corrupt_messages: u64,
}

/// Smallest d such that every `window`-long span starting at a sample in [t0 + d, t1 - window]
/// passes `ok` (a sliding, strict view: one bad window after d moves d past it); None if the
/// last window fails or there is none.
fn settled_from(
    samples: &[Sample],
    t0: f64,
    t1: f64,
    window: f64,
    ok: &dyn Fn(&Sample, &Sample) -> bool,
) -> Option<f64> {
    let mut from = None;
    for (i, a) in samples.iter().enumerate() {
        let ta = ms(a.t_ns);
        if ta < t0 {
            continue;
        }
        let Some(j) = samples[i..].iter().position(|b| ms(b.t_ns) >= ta + window) else {
            break;
        };
        if ms(samples[i + j].t_ns) > t1 {
            break;
        }
        if ok(a, &samples[i + j]) {
            from.get_or_insert(ta - t0);
        } else {
            from = None;
        }
    }
    from
}

/// Time-weighted mean of `ideal_at` over [from, to): the ideal is constant except for one step
/// at the death, so two evaluations and a split of the span.
fn mean_ideal(sc: &HashedScenario, base: u16, from: f64, to: f64) -> f64 {
    let before = sc.ideal_at(base, from);
    let Some((at, _)) = sc.death else {
        return before;
    };
    let at = at as f64;
    if to <= from || at <= from || at >= to {
        return before;
    }
    let after = sc.ideal_at(base, at);
    (before * (at - from) + after * (to - at)) / (to - from)
}

/// Goodput (completed messages) between the samples at or after `from` and the last one.
fn goodput(samples: &[Sample], from: f64) -> Option<(f64, f64)> {
    let i = first_at(samples, from)?;
    let (a, b) = (&samples[i], samples.last()?);
    let dt = ms(b.t_ns) - ms(a.t_ns);
    (dt > 0.0).then(|| (mbit(b.msg_bytes - a.msg_bytes, dt), ms(a.t_ns)))
}

/// Summarises a trial measured over [warmup_ms, end].
pub(crate) fn summarize(
    sc: &HashedScenario,
    v: &Variant,
    base: u16,
    out: &TrialOutput,
    warmup_ms: f64,
) -> Result<HashedSummary, String> {
    let s = &out.samples;
    let end = s.last().map(|x| ms(x.t_ns)).unwrap_or(0.0);
    let (achieved, from) =
        goodput(s, warmup_ms).ok_or_else(|| format!("no samples after {warmup_ms} ms"))?;
    let ideal = mean_ideal(sc, base, from, end);
    let acked_ratio = first_at(s, warmup_ms)
        .and_then(|i| {
            let (a, b) = (&s[i], s.last()?);
            let dt = ms(b.t_ns) - ms(a.t_ns);
            Some(mbit(acked(b) - acked(a), dt) / ideal)
        })
        .unwrap_or(0.0);
    let late_from = end * 2.0 / 3.0;
    let (late, late_at) = goodput(s, late_from).unwrap_or((0.0, late_from));
    let late_ideal = mean_ideal(sc, base, late_at, end);
    // Goodput (completed messages) or acknowledged bytes over [a, b] against f x the ideal.
    let at_least = |f: f64, segments: bool| {
        move |a: &Sample, b: &Sample| {
            let (ta, tb) = (ms(a.t_ns), ms(b.t_ns));
            let bytes = if segments {
                acked(b) - acked(a)
            } else {
                b.msg_bytes - a.msg_bytes
            };
            mbit(bytes, tb - ta) >= f * mean_ideal(sc, base, ta, tb)
        }
    };
    let evidenced = |t0: f64, d: Option<f64>| d.filter(|d| t0 + d <= end - MIN_EVIDENCE_MS);
    let converge_ms = evidenced(
        0.0,
        settled_from(
            s,
            0.0,
            end,
            SUSTAIN_WINDOW_MS,
            &at_least(CONVERGE_FRACTION, true),
        ),
    );
    let death = sc.death.and_then(|(at, _)| {
        // When the kill really ran (the action's start), not when it was scheduled.
        let t0 = out.actions.first().map(|a| ms(a.0)).unwrap_or(at as f64);
        let new_ideal = sc.ideal_at(base, t0 + 1.0);
        let (after, _) = goodput(s, t0)?;
        Some(DeathFigures {
            at_ms: t0,
            new_ideal_mbit: new_ideal,
            recover_ms: evidenced(
                t0,
                sustained_delay(
                    s,
                    t0,
                    end,
                    SUSTAIN_WINDOW_MS,
                    &at_least(RECOVER_FRACTION, false),
                ),
            ),
            recover_acked_ms: evidenced(
                t0,
                settled_from(
                    s,
                    t0,
                    end,
                    SUSTAIN_WINDOW_MS,
                    &at_least(RECOVER_FRACTION, true),
                ),
            ),
            after_ratio: after / new_ideal,
            replaced_before: out
                .port_changes
                .iter()
                .filter(|(t, _, _)| ms(*t) < t0)
                .count() as u64,
        })
    });
    let mut final_buckets = sc.initial_buckets_for(v, base);
    for (_, q, port) in &out.port_changes {
        if let Some(b) = final_buckets.get_mut(*q) {
            *b = sc.bucket(*port);
        }
    }
    let sum =
        |f: &dyn Fn(&dqplb_engine::QpStats) -> u64| out.final_stats.iter().map(f).sum::<u64>();
    Ok(HashedSummary {
        scenario: sc.id,
        name: sc.name,
        label: v.label,
        streams: sc.streams,
        buckets: sc.buckets,
        window_ms: end - from,
        ideal_mbit: ideal,
        achieved_mbit: achieved,
        ratio: if ideal > 0.0 { achieved / ideal } else { 0.0 },
        acked_ratio,
        late_ratio: if late_ideal > 0.0 {
            late / late_ideal
        } else {
            0.0
        },
        converge_ms,
        death,
        rehashes: sum(&|q| q.rehashes),
        failures: sum(&|q| q.failures),
        resent: sum(&|q| q.resent),
        repaths: out.repaths,
        initial_buckets: sc.initial_buckets_for(v, base),
        final_buckets,
        sent_messages: out.sent_messages,
        received_messages: out.received.messages,
        corrupt_messages: out.received.corrupt,
    })
}

/// Per-bin rates of a trial with this scenario's ideal.
pub(crate) fn series(sc: &HashedScenario, base: u16, samples: &[Sample]) -> Vec<SeriesPoint> {
    samples
        .windows(2)
        .map(|w| {
            let dt = ms(w[1].t_ns) - ms(w[0].t_ns);
            let path_mbit: Vec<f64> = w[1]
                .qp_bytes
                .iter()
                .zip(&w[0].qp_bytes)
                .map(|(y, x)| mbit(y - x, dt))
                .collect();
            SeriesPoint {
                t_ms: ms(w[1].t_ns),
                ideal_mbit: sc.ideal_at(base, ms(w[1].t_ns)),
                total_mbit: path_mbit.iter().sum(),
                path_mbit,
            }
        })
        .collect()
}

/// What a hashed trial runs with besides the scenario.
#[derive(Debug, Clone)]
pub(crate) struct HashedRun {
    pub base: TrialSpec,
    pub health: HealthKnobs,
    pub warmup_ms: f64,
}

/// Runs one (scenario, variant) trial with the hashed plan installed once the ports are known.
pub(crate) fn one_trial(
    sc: &HashedScenario,
    v: &Variant,
    run: &HashedRun,
) -> Result<(HashedSummary, Vec<SeriesPoint>), String> {
    let base = run.base.port_base;
    let mut spec = run.base.clone();
    spec.policy = v.policy;
    spec.qps = sc.streams as u16;
    spec.port_stride = PORT_STRIDE;
    spec.rehash = v.rehash.then_some(run.health.rule);
    spec.stall_timeout_ms = if v.isolation {
        run.health.stall_timeout_ms
    } else {
        0
    };
    spec.verify = true;
    spec.pinned_ports = match v.ports {
        Ports::Stride => None,
        p => Some(sc.stream_ports(p, base)?),
    };
    if matches!(
        v.policy,
        PolicyKind::RoundRobinMessage | PolicyKind::SingleQp
    ) {
        // As NCCL posts each isend of these modes: one work request per message.
        spec.segment_bytes = (spec.message_bytes.div_ceil(128) * 128) as u32;
    }
    let rates = sc.bucket_rates(base);
    let mut shaper: Option<Shaper> = None;
    let mut install = |c: &Connected| -> Result<(), String> {
        let want = sc.initial_buckets_for(v, base);
        let got: Vec<usize> = c.data_sports.iter().map(|p| sc.bucket(*p)).collect();
        if got != want {
            return Err(format!(
                "data streams hash to buckets {got:?}, the plan expects {want:?}"
            ));
        }
        let plan = HashPlan {
            rates_mbit: rates.clone(),
            ctrl_sport: c.ctrl_sport,
            dports: c.data_dports.clone(),
            shift: sc.shift,
        };
        shaper = Some(Shaper::run_plan(hashed_shape::install(&plan)?)?);
        Ok(())
    };
    let at: Vec<u64> = sc.death.map(|(t, _)| t).into_iter().collect();
    let dead = sc.dead_bucket(base);
    let mut action = |_: usize| -> Result<(), String> {
        match dead {
            Some(b) => shape::run_tc(&hashed_shape::kill(b)),
            None => Ok(()),
        }
    };
    let out = trial::run_connected(&spec, &mut install, &at, &mut action)?;
    drop(shaper);
    let summary = summarize(sc, v, base, &out, run.warmup_ms)?;
    Ok((summary, series(sc, base, &out.samples)))
}

/// Runs every variant of every port-hash scenario in `ids`.
pub(crate) fn bench(
    ids: &[u32],
    run: &HashedRun,
    unit_mbit: f64,
    slow_fraction: f64,
    buckets: Option<usize>,
) -> Result<Vec<(HashedSummary, Vec<SeriesPoint>)>, String> {
    let duration_ms = run.base.duration.as_millis() as u64;
    let mut out = Vec::new();
    for &id in ids {
        let sc = build(id, unit_mbit, slow_fraction, duration_ms, buckets)?;
        let r = run.health.rule;
        println!(
            "# scenario {} ({}): {}; {} streams over {} hashed paths, path rates {:?} Mbit/s; first buckets (first variant) {:?}; re-hash k {} W {} cool-down {} ms budget {}/min; stall timeout {} ms",
            sc.id,
            sc.name,
            sc.what,
            sc.streams,
            sc.buckets,
            sc.bucket_rates(run.base.port_base),
            sc.variants
                .first()
                .map(|v| sc.initial_buckets_for(v, run.base.port_base))
                .unwrap_or_default(),
            r.ratio,
            r.window,
            r.cooldown / 1_000_000,
            r.budget,
            run.health.stall_timeout_ms
        );
        for v in &sc.variants {
            let (s, pts) =
                one_trial(&sc, v, run).map_err(|e| format!("scenario {id} {}: {e}", v.label))?;
            println!("{}", super::hashed_report::line(&s));
            out.push((s, pts));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_six_puts_two_streams_on_slow_buckets() {
        let sc = build(6, 100.0, 0.1, 3000, None).unwrap();
        let first = sc.initial_buckets(20000);
        // Ports 20002, 20004, ... -> buckets 1, 2, ... of 16: all distinct.
        assert_eq!(first, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        let r = sc.bucket_rates(20000);
        assert_eq!(r.iter().filter(|x| **x == 10.0).count(), 2);
        assert_eq!(r[3], 10.0);
        assert_eq!(r[6], 10.0);
        // Eight streams could each have a fast bucket of their own.
        assert_eq!(sc.ideal_at(20000, 0.0), 800.0);
        assert_eq!(sc.variants.len(), 4);
        assert_eq!(build(7, 100.0, 0.1, 3000, None).unwrap().variants.len(), 3);
        assert!(sc.variants.iter().any(|v| v.rehash));
    }

    #[test]
    fn scenario_seven_loses_one_path() {
        let sc = build(7, 100.0, 0.1, 3000, None).unwrap();
        assert_eq!(sc.buckets, 8);
        assert_eq!(sc.dead_bucket(20000), Some(3));
        assert_eq!(sc.ideal_at(20000, 999.0), 800.0);
        assert_eq!(sc.ideal_at(20000, 1000.0), 700.0);
        assert!((mean_ideal(&sc, 20000, 500.0, 1500.0) - 750.0).abs() < 1e-9);
        assert_eq!(mean_ideal(&sc, 20000, 0.0, 1000.0), 800.0);
        assert_eq!(mean_ideal(&sc, 20000, 1000.0, 3000.0), 700.0);
        assert!((mean_ideal(&sc, 20000, 750.0, 1750.0) - 725.0).abs() < 1e-9);
    }

    #[test]
    fn scenario_eight_pins_every_bucket_and_the_hashed_ports_collide() {
        let sc = build(8, 100.0, 0.1, 3000, None).unwrap();
        assert_eq!((sc.streams, sc.buckets, sc.shift), (8, 8, 0));
        let hashed = sc.stream_ports(Ports::QpnHashed, 20000).unwrap();
        let pinned = sc.stream_ports(Ports::Pinned, 20000).unwrap();
        // mlx5's ports of QPN pairs (0x12 + i, 0x1c + i), flow label 0.
        assert_eq!(hashed[0], qpn_port(0x12, 0x1c));
        let distinct = |ports: &[u16]| {
            let mut b: Vec<usize> = ports.iter().map(|p| sc.bucket(*p)).collect();
            b.sort_unstable();
            b.dedup();
            b.len()
        };
        // Pinned: all 8 buckets by construction; hashed: fewer (the figures the bench reports).
        assert_eq!(distinct(&pinned), 8);
        assert!(distinct(&hashed) < 8, "{hashed:?}");
        // Pinned ports start from the first hashed port and stay in the flow-label range.
        assert_eq!(pinned[0], hashed[0]);
        assert!(pinned.iter().all(|p| *p >= 0xC000));
        // The ideal: every stream on a path of its own.
        assert_eq!(sc.ideal_at(20000, 0.0), 800.0);
        let random = sc.stream_ports(Ports::Random, 20000).unwrap();
        assert!(random.iter().all(|p| *p >= 0xC000));
        assert_eq!(sc.stream_ports(Ports::Random, 1).unwrap(), random);
        let v = sc.variants[2];
        assert_eq!(v.ports, Ports::Pinned);
        let mut first = sc.initial_buckets_for(&v, 20000);
        first.sort_unstable();
        assert_eq!(first, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn bad_bucket_counts_are_refused() {
        assert!(build(6, 100.0, 0.1, 3000, Some(12))
            .unwrap_err()
            .contains("power of two"));
        assert!(build(7, 100.0, 0.1, 3000, Some(4))
            .unwrap_err()
            .contains("at least 8"));
        assert!(build(3, 100.0, 0.1, 3000, None)
            .unwrap_err()
            .contains("not a port-hash scenario (6, 7 or 8)"));
    }
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    /// Samples every 10 ms of a trial whose goodput and acknowledged rate are `rate(t_ms)`.
    fn synth(end_ms: u64, rate: &dyn Fn(f64) -> f64) -> Vec<Sample> {
        let (mut bytes, mut out) = (0u64, Vec::new());
        for i in 0..=end_ms / 10 {
            let t = (i * 10) as f64;
            out.push(Sample {
                t_ns: i * 10_000_000,
                msg_bytes: bytes,
                qp_bytes: vec![bytes],
            });
            // Mbit/s over 10 ms -> bytes.
            bytes += (rate(t) * 1e6 / 8.0 * 0.01) as u64;
        }
        out
    }

    #[test]
    fn a_death_recovered_after_150_ms_is_measured_so() {
        let sc = build(7, 100.0, 0.1, 3000, None).unwrap();
        // 800 before the death at 1000 ms, nothing for 150 ms, then the new ideal (700).
        let rate = |t: f64| match t {
            t if t < 1000.0 => 800.0,
            t if t < 1150.0 => 0.0,
            _ => 700.0,
        };
        let out = TrialOutput {
            samples: synth(3000, &rate),
            actions: vec![(1_000_000_000, 1)],
            ..Default::default()
        };
        let v = sc.variants[1];
        let s = summarize(&sc, &v, 20000, &out, 500.0).unwrap();
        let d = s.death.unwrap();
        assert_eq!(d.at_ms, 1000.0);
        assert_eq!(d.new_ideal_mbit, 700.0);
        // The first 100 ms window from which the average stays >= 595 Mbit/s starts at about
        // 1150 - 0.15 x 100 ms (a window may include a little of the gap).
        let r = d.recover_ms.unwrap();
        assert!((130.0..=150.0).contains(&r), "{r}");
        assert!(
            (d.after_ratio - 1850.0 / 2000.0).abs() < 0.01,
            "{}",
            d.after_ratio
        );
        // Convergence means staying there: the gap after the death restarts it.
        let c = s.converge_ms.unwrap();
        assert!((1130.0..=1150.0).contains(&c), "{c}");
    }

    #[test]
    fn a_level_reached_only_at_the_end_is_not_convergence() {
        let sc = build(6, 100.0, 0.1, 3000, None).unwrap();
        let v = sc.variants[0];
        let late = |t: f64| if t < 2800.0 { 500.0 } else { 800.0 };
        let out = TrialOutput {
            samples: synth(3000, &late),
            ..Default::default()
        };
        let s = summarize(&sc, &v, 20000, &out, 500.0).unwrap();
        assert_eq!(s.converge_ms, None);
        assert!((s.ratio - 0.65).abs() < 0.02, "{}", s.ratio);
        let early = |t: f64| if t < 400.0 { 100.0 } else { 790.0 };
        let out = TrialOutput {
            samples: synth(3000, &early),
            ..Default::default()
        };
        let c = summarize(&sc, &v, 20000, &out, 500.0)
            .unwrap()
            .converge_ms
            .unwrap();
        assert!((380.0..=410.0).contains(&c), "{c}");
    }
}
