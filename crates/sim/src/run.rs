//! One simulation: every rail (independent under rail-optimized traffic) on its own seeded
//! stream over `threads` workers (`std::thread::scope`), merged in order; cross-rail as one plane.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::conn::{ConnShape, PhaseRun};
use super::error::SimError;
use super::packet::PacketSpec;
use super::report::{RailResult, SimResult};
use super::rng::Rng;
use super::topology::{FabricSpec, Ps, Rail};
use super::traffic::TrafficSpec;
use super::traffic::{self, Phase};
use super::{bmode, cross_rail, fmode, pmode};

/// Granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fluid max-min per QP.
    Fluid,
    /// Per segment, serialized per hop.
    Burst,
    /// Per packet: switch queues, ECN, CNPs and DCQCN per QP.
    Packet,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "f" | "F" | "fluid" => Ok(Mode::Fluid),
            "b" | "B" | "burst" | "segment" => Ok(Mode::Burst),
            "p" | "P" | "packet" => Ok(Mode::Packet),
            other => Err(format!("unknown mode '{other}' (f, b or p)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Fluid => "F",
            Mode::Burst => "B",
            Mode::Packet => "P",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub fabric: FabricSpec,
    pub traffic: TrafficSpec,
    pub shape: ConnShape,
    pub mode: Mode,
    pub seed: u64,
    /// Worker threads for the rails (1 = in the caller's thread).
    pub threads: usize,
    /// F mode: longest wait before re-solving after flows went idle (0 = at every change).
    pub epoch_ps: Ps,
    /// Simulate only the first this-many rails (0 = all) and report them as the whole fabric.
    pub rails_simulated: usize,
    /// P mode: MTU, ECN, CNPs, DCQCN, time series.
    pub packet: PacketSpec,
}

/// Runs the simulation described by `cfg`.
pub fn run(cfg: &SimConfig) -> Result<SimResult, SimError> {
    cfg.fabric.validate()?;
    cfg.traffic.check(&cfg.fabric)?;
    // Cross-rail traffic couples the rails: all of them run as one plane (cross_rail.rs), and
    // the report describes the fabric as configured.
    let cross = cfg.traffic.kind.is_plane();
    if cross && cfg.rails_simulated != 0 && cfg.rails_simulated < cfg.fabric.rails {
        return Err(SimError::Config(format!(
            "--traffic {} couples the rails: it simulates all {} as one plane \
             (no --rails-simulated {})",
            cfg.traffic.kind.name(),
            cfg.fabric.rails,
            cfg.rails_simulated
        )));
    }
    let plane_cfg = cross.then(|| SimConfig {
        fabric: cross_rail::plane(&cfg.fabric),
        rails_simulated: 0,
        ..cfg.clone()
    });
    let sim = plane_cfg.as_ref().unwrap_or(cfg);
    let block = if cross {
        cfg.fabric.hosts
    } else {
        cfg.fabric.leaves_per_pod() * cfg.fabric.hosts_per_leaf
    };
    let phases = traffic::phases(
        &sim.traffic,
        sim.fabric.hosts,
        sim.fabric.hosts_per_leaf,
        block,
        &mut Rng::new(cfg.seed).fork(u64::MAX),
    );
    let rails = if sim.rails_simulated == 0 {
        sim.fabric.rails
    } else {
        sim.rails_simulated.min(sim.fabric.rails)
    };
    let results: Mutex<Vec<Option<Result<RailResult, SimError>>>> =
        Mutex::new((0..rails).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let work = || loop {
        let r = next.fetch_add(1, Ordering::Relaxed);
        if r >= rails {
            return;
        }
        let res = run_rail(sim, &phases, r);
        if let Ok(mut v) = results.lock() {
            v[r] = Some(res);
        }
    };
    let threads = sim.threads.clamp(1, rails);
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let per_rail = results
        .into_inner()
        .map_err(|_| SimError::WorkerPanicked)?
        .into_iter()
        .map(|r| r.unwrap_or(Err(SimError::RailMissing)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut res = SimResult::new(cfg, &phases, per_rail);
    if cross {
        res.rails_simulated = cfg.fabric.rails;
    }
    Ok(res)
}

fn run_rail(cfg: &SimConfig, phases: &[Phase], r: usize) -> Result<RailResult, SimError> {
    let mut rng = Rng::new(cfg.seed).fork(r as u64 + 1);
    let rail = Rail::new(&cfg.fabric, r, &mut rng);
    // A fresh NIC's QPNs: consecutive from a per-NIC base.
    let mut qpn_next: Vec<u32> = (0..cfg.fabric.hosts)
        .map(|_| 0x100 + rng.below(0xF_0000) as u32)
        .collect();
    let mut res = RailResult::new(r);
    let shape: ConnShape = cfg.shape;
    for (pi, phase) in phases.iter().enumerate() {
        let mut run = PhaseRun::new(phase, &shape, &mut qpn_next)?;
        let out = match cfg.mode {
            super::Mode::Burst => {
                bmode::run_phase(&rail, &mut run, &shape, &mut rng, cfg.packet.sample_ps, pi)?
            }
            super::Mode::Fluid => fmode::run_phase(
                &rail,
                &mut run,
                &shape,
                cfg.epoch_ps,
                cfg.packet.sample_ps,
                pi,
                &mut rng,
            )?,
            super::Mode::Packet => {
                let (out, p) =
                    pmode::run_phase(&rail, &mut run, &shape, &cfg.packet, pi, &mut rng)?;
                res.packet.get_or_insert_with(Default::default).add(&p);
                out
            }
        };
        res.absorb(&rail, phase, &run, &out);
    }
    Ok(res)
}
