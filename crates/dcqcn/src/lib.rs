//! DCQCN pre-flight: reads mlx5 cc_params, ECN enables and congestion counters and checks them
//! against the site profile; also a reaction-point rate model for one QP.
//!
//! Files: `names` (file facts), `reader` (sysfs/debugfs), `profile` (expectations), `compare`,
//! `fix` (fix commands), `watch` (counter rates), `model` (one QP's
//! rate), `impact` (what parameters mean), `preflight` (plugin init), `select` (NCCL_IB_HCA),
//! `fake_tree` (test trees).

#![forbid(unsafe_code)]

pub mod compare;
pub mod fake_tree;
pub mod fix;
pub mod impact;
pub mod model;
pub mod names;
pub mod preflight;
pub mod profile;
pub mod reader;

pub mod select;
pub mod watch;

pub use compare::{compare, DeviceReport, Row, Status};
pub use model::{AlphaSchedule, CnpOutcome, GConvention, ReactionPoint, RpParams, Stage};
pub use preflight::{preflight, PreflightError, PreflightSummary};
pub use profile::{resolve, Expected, Profile, ProfileError, Rule};
pub use reader::{read_device, DeviceSnapshot, Reading, Roots};
