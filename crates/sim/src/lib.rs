//! `dqplb sim`: a fabric simulator that drives the real engine (`Sender`/`Receiver`) over a
//! rail-optimized leaf-spine with switch-style ECMP, per fluid (F), segment (B) or packet (P).

#![forbid(unsafe_code)]

// Layout: `topology` (fabric, links, paths), `tier3` (pods, cores, the fat-tree preset), `dci`
// (each pod a data centre: the span's latency on aggregation -> core hops), `hashing` (5-tuple CRC, mlx5 source port), `pin` (pinned source ports),
// `traffic` (ring all-reduce, permutation, leaf shift, all-to-all), `cross_rail` (every rail in
// one plane under shared spines), `conn` (engine pairs and
// traffic rules), `events` (per-queue FIFOs under a heap of queue heads), `bmode` and `fmode`
// (the two drivers), `fluid` (weighted max-min), `bound` (the best split over the QP paths),
// `theory` (balls-in-bins), `latency` (message latency histogram), `run` (rails in parallel),
// `report` (JSON/CSV and the per-uplink data the charts draw), `error` (SimError), `sweep` (the
// sweep's criteria and config snippet), `sweep_profile` (its DCQCN profile axis and `[dcqcn]`
// block); the command draws the charts (crates/cli/src/charts);
// P mode: `pmode` (per packet), `packet` (its parameters and counts), `nic` (DCQCN-paced QPs),
// `switchq` (ECN queues), `pfc`, `timeseries` (its rows, CSV), `timeseries_bf` (B and F mode's
// samples). Imports only `engine`, `dcqcn` (the
// reaction-point model), std and serde (serde_json for `to_json`); the ECMP hash and the source
// ports' pinning are the engine's (`dqplb_engine::pinning`, used through `hashing` and `pin`); docs in
// docs/records/simulation.md.

pub(crate) mod bmode;
pub mod bound;
pub mod conn;
pub mod cross_rail;
pub mod dci;
pub mod error;
pub mod events;
pub mod fluid;
pub(crate) mod fmode;
pub mod hashing;
pub mod latency;
pub mod loss;
pub(crate) mod nic;
pub mod packet;
pub mod pfc;
pub(crate) mod pin;
pub mod pmode;
pub(crate) mod radix;
pub mod report;
pub mod rng;
pub mod run;
pub mod spray;
pub mod sweep;
pub mod sweep_profile;
pub mod switchq;
pub mod theory;
pub(crate) mod tier3;
pub mod timeseries;
pub(crate) mod timeseries_bf;
pub mod topology;
pub mod traffic;
pub mod tree;

pub use conn::{ConnShape, Errors, SimPolicy, SIM_DEPTH, SIM_REHASH, SIM_REPIN};
pub use error::SimError;
pub use hashing::{HashFields, SourcePort};
pub use packet::{PacketSpec, PacketSummary};
pub use report::{RailResult, SimResult};
pub use run::{run, Mode, SimConfig};
pub use topology::{FabricSpec, Ps};
pub use traffic::{Placement, TrafficKind, TrafficSpec, P2P_NET_CHUNK_BYTES};
