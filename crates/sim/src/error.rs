//! The simulator's error: what a validation, a run or a sweep's choice refuses, by kind, with the
//! message the command prints as its `Display`.

use std::fmt;

use dqplb_engine::EngineError;

/// Why a simulation (or a sweep's analysis) could not give a result.
#[derive(Debug, Clone, PartialEq)]
pub enum SimError {
    /// A fabric, traffic, packet-model or run parameter is out of range or at odds with
    /// another; found before anything runs. The message names the option.
    Config(String),
    /// The engine refused a connection's parameters or its re-hash rule.
    Engine(EngineError),
    /// Every spine between two leafs of a rail is down: the hosts cannot reach each other.
    NoPath { rail: usize, src: u32, dst: u32 },
    /// A rail's worker thread panicked.
    WorkerPanicked,
    /// A rail's worker ended without a result.
    RailMissing,
    /// A sweep's points are not every q x outstanding x segment combination once.
    IncompleteGrid {
        points: usize,
        qps: usize,
        depths: usize,
        segments: usize,
    },
    /// No point of a sweep reported a fluid bound.
    NoBound,
    /// No q of a sweep has a point that ran clean.
    NoCleanPoint,
    /// No segment size ran clean at a sweep's chosen q.
    NoCleanSegment,
    /// Every segment size of a sweep has a head-of-line cost at the chosen q.
    NoSegmentWithoutHol,
    /// A DCQCN profile of a sweep has no run at the chosen point.
    ProfileMissing { profile: String },
    /// No DCQCN profile of a sweep ran clean at the chosen point.
    NoCleanProfile,
    /// No clean DCQCN profile is within the tie of the fastest one.
    NoTiedProfile,
}

impl SimError {
    /// A [`SimError::Config`] of `msg`.
    pub(crate) fn config(msg: impl Into<String>) -> SimError {
        SimError::Config(msg.into())
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(msg) => f.write_str(msg),
            SimError::Engine(e) => e.fmt(f),
            SimError::NoPath { rail, src, dst } => {
                write!(f, "rail {rail}: no live spine from host {src} to {dst}")
            }
            SimError::WorkerPanicked => f.write_str("a rail worker panicked"),
            SimError::RailMissing => f.write_str("rail not simulated"),
            SimError::IncompleteGrid {
                points,
                qps,
                depths,
                segments,
            } => write!(
                f,
                "the sweep needs every combination once: {points} points for {qps} q x {depths} depths x {segments} segments"
            ),
            SimError::NoBound => f.write_str("no run reported a fluid bound"),
            SimError::NoCleanPoint => f.write_str("no grid point ran clean"),
            SimError::NoCleanSegment => f.write_str("no segment ran clean at the chosen q"),
            SimError::NoSegmentWithoutHol => f.write_str("no segment without head-of-line cost"),
            SimError::ProfileMissing { profile } => {
                write!(f, "profile {profile} has no run at the chosen point")
            }
            SimError::NoCleanProfile => {
                f.write_str("no DCQCN profile ran clean at the chosen point")
            }
            SimError::NoTiedProfile => f.write_str("no tied profile"),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Engine(e) => Some(e),
            _ => None,
        }
    }
}

impl From<EngineError> for SimError {
    fn from(e: EngineError) -> SimError {
        SimError::Engine(e)
    }
}

/// The message: callers that report errors as text take a `SimError` with `?`.
impl From<SimError> for String {
    fn from(e: SimError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_source() {
        let e = SimError::IncompleteGrid {
            points: 3,
            qps: 2,
            depths: 1,
            segments: 2,
        };
        assert_eq!(
            e.to_string(),
            "the sweep needs every combination once: 3 points for 2 q x 1 depths x 2 segments"
        );
        let no_path = SimError::NoPath {
            rail: 1,
            src: 4,
            dst: 9,
        };
        assert_eq!(
            no_path.to_string(),
            "rail 1: no live spine from host 4 to 9"
        );
        let engine = SimError::from(EngineError::TooManyRoutes { limit: 2 });
        assert_eq!(
            engine.to_string(),
            EngineError::TooManyRoutes { limit: 2 }.to_string()
        );
        assert!(std::error::Error::source(&engine).is_some());
        assert_eq!(String::from(SimError::config("--slots 0")), "--slots 0");
    }
}
