//! Compares one device's snapshot with a profile: one row per cc_params file and per ECN enable,
//! each matched, mismatched, unknown (unreadable, never a failure) or garbage.

use super::profile::{Expected, Profile};
use super::reader::{DeviceSnapshot, Reading};
use dqplb_config::dcqcn::Severity;

/// Outcome of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Match,
    Mismatch,
    /// Could not be read: reported, never a failure.
    Unknown,
    /// Read but not a valid number: a failure when the row has an expectation.
    Garbage,
    /// No expectation in the profile: shown for information.
    NotChecked,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Match => "ok",
            Status::Mismatch => "MISMATCH",
            Status::Unknown => "unknown",
            Status::Garbage => "GARBAGE",
            Status::NotChecked => "-",
        }
    }
}

/// A device's overall result against its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Match,
    /// Nothing mismatched, but some checked values could not be read: not proof of a match.
    Unverified,
    Mismatch,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Match => "MATCH",
            Verdict::Unverified => "UNVERIFIED",
            Verdict::Mismatch => "MISMATCH",
        }
    }
}

/// One compared file.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// cc_params name, or `ecn/roce_rp/enable/<prio>` / `ecn/roce_np/enable/<prio>`.
    pub param: String,
    pub expected: Option<Expected>,
    pub actual: Reading,
    pub status: Status,
    pub severity: Option<Severity>,
    pub reason: Option<String>,
}

impl Row {
    /// Mismatch, or garbage where a value was expected.
    pub fn is_failure(&self) -> bool {
        matches!(self.status, Status::Mismatch)
            || (self.status == Status::Garbage && self.expected.is_some())
    }
}

/// A device checked against a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceReport {
    pub snapshot: DeviceSnapshot,
    pub profile: String,
    pub roce_priority: u8,
    pub rows: Vec<Row>,
}

impl DeviceReport {
    pub fn failures(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.is_failure())
    }
    pub fn failure_count(&self) -> usize {
        self.failures().count()
    }
    /// Checked rows whose value could not be read.
    pub fn unknown_count(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.status == Status::Unknown && r.expected.is_some())
            .count()
    }
    pub fn matched_count(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.status == Status::Match)
            .count()
    }
    /// Every checked value was read and matched: unknowns never count as a match.
    pub fn all_match(&self) -> bool {
        self.verdict() == Verdict::Match
    }
    /// Match, mismatch (a failure), or unverified (no failure, but checked values unreadable).
    pub fn verdict(&self) -> Verdict {
        if self.failure_count() > 0 {
            Verdict::Mismatch
        } else if self.unknown_count() > 0 {
            Verdict::Unverified
        } else {
            Verdict::Match
        }
    }
    /// Distinct reasons why checked rows are unknown, in row order.
    pub fn unknown_reasons(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rows {
            if let (Some(_), Reading::Unknown(why)) = (&r.expected, &r.actual) {
                if !out.contains(why) {
                    out.push(why.clone());
                }
            }
        }
        out
    }
}

fn judge(expected: Option<Expected>, actual: &Reading) -> Status {
    match (expected, actual) {
        (_, Reading::Unknown(_)) => Status::Unknown,
        (_, Reading::Garbage(_)) => Status::Garbage,
        (None, Reading::Value(_)) => Status::NotChecked,
        (Some(e), Reading::Value(v)) if e.accepts(*v) => Status::Match,
        (Some(_), Reading::Value(_)) => Status::Mismatch,
    }
}

/// Compares every cc_params file (kernel order) and the two ECN enables of the RoCE priority.
pub fn compare(snapshot: &DeviceSnapshot, profile: &Profile) -> DeviceReport {
    let mut rows = Vec::with_capacity(snapshot.cc_params.len() + 2);
    for (name, reading) in &snapshot.cc_params {
        let rule = profile.rule(name);
        let expected = rule.map(|r| r.expected);
        rows.push(Row {
            param: name.to_string(),
            expected,
            actual: reading.clone(),
            status: judge(expected, reading),
            severity: rule.map(|r| r.severity),
            reason: rule.map(|r| r.reason.clone()),
        });
    }
    let prio = usize::from(profile.roce_priority.min(7));
    for (side, readings, what) in [
        ("roce_rp", &snapshot.ecn_rp, "reaction point"),
        ("roce_np", &snapshot.ecn_np, "notification point"),
    ] {
        let actual = readings
            .get(prio)
            .cloned()
            .unwrap_or_else(|| Reading::Unknown("not read".to_string()));
        let expected = Some(Expected::Exact(1));
        rows.push(Row {
            param: format!("ecn/{side}/enable/{prio}"),
            expected,
            status: judge(expected, &actual),
            actual,
            severity: Some(Severity::Critical),
            reason: Some(format!(
                "ECN {what} must be enabled on RoCE priority {prio} or DCQCN never acts"
            )),
        });
    }
    DeviceReport {
        snapshot: snapshot.clone(),
        profile: profile.name.clone(),
        roce_priority: profile.roce_priority,
        rows,
    }
}
