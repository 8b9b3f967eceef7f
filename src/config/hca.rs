//! NCCL_IB_HCA parsing with NCCL's semantics (`^` exclude, `=` exact, else prefix match) plus the
//! third/fourth fields: a fabric id (dc * max_rails + rail) or NCCL 2.30's rail[:plane].

use std::fmt;

use serde::Serialize;

use super::schema::HcaThirdField;

/// NCCL's limit on IB devices (MAX_IB_DEVS).
pub const MAX_HCA_ENTRIES: usize = 32;
/// Largest accepted port number.
pub const MAX_PORT: u32 = 255;
/// Largest accepted fabric id in `fabric-id` mode.
pub const MAX_FABRIC_ID: u32 = 65535;
/// Largest accepted plane (NCCL stores it as int16).
pub const MAX_PLANE: u32 = 32767;
/// Longest accepted device name (IB_DEVICE_NAME_MAX - 1).
pub const MAX_NAME_LEN: usize = 63;

/// Where a NIC sits: its data centre and rail (and plane in `rail:plane` mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct FabricId {
    /// The third field as written (in `rail:plane` mode this equals `rail`).
    pub id: u32,
    pub dc: u32,
    pub rail: u32,
    pub plane: Option<u32>,
}

impl FabricId {
    /// Decomposes a fabric id: dc = id / max_rails, rail = id % max_rails.
    pub fn from_id(id: u32, max_rails: u32) -> FabricId {
        let max_rails = max_rails.max(1);
        FabricId {
            id,
            dc: id / max_rails,
            rail: id % max_rails,
            plane: None,
        }
    }
}

/// One `dev[:port[:third[:fourth]]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HcaEntry {
    pub name: String,
    pub port: Option<u32>,
    pub fabric: Option<FabricId>,
}

/// A parsed NCCL_IB_HCA value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaList {
    /// Leading `^`: the entries are excluded, everything else is used.
    pub exclude: bool,
    /// Leading `=`: names must match exactly (otherwise they are prefixes).
    pub exact: bool,
    pub entries: Vec<HcaEntry>,
}

/// A device/port the list selects, with the fabric id of the entry that selected it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selected {
    pub port: u32,
    /// Index of the matching entry (None for devices admitted by an exclude list).
    pub entry: Option<usize>,
    pub fabric: Option<FabricId>,
}

/// What is wrong with an NCCL_IB_HCA value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HcaErrorKind {
    Empty,
    EmptyEntry,
    BadName,
    BadPort,
    BadFabricId,
    BadRail,
    BadPlane,
    PlaneInFabricIdMode,
    FabricInExcludeList,
    TooManyFields,
    Duplicate,
    TooManyEntries,
    BadMaxRails,
}

/// An NCCL_IB_HCA error naming the entry and field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaError {
    pub kind: HcaErrorKind,
    /// The entry as written, when the error is about one entry.
    pub entry: Option<String>,
    pub message: String,
}

impl fmt::Display for HcaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.entry {
            Some(entry) => write!(f, "NCCL_IB_HCA entry '{entry}': {}", self.message),
            None => write!(f, "NCCL_IB_HCA: {}", self.message),
        }
    }
}

impl std::error::Error for HcaError {}

fn err(kind: HcaErrorKind, entry: Option<&str>, message: String) -> HcaError {
    HcaError {
        kind,
        entry: entry.map(str::to_string),
        message,
    }
}

/// Parses a decimal field in `lo..=hi`; `what` names the field in the error.
fn number(
    entry: &str,
    what: &str,
    text: &str,
    lo: u32,
    hi: u32,
    kind: HcaErrorKind,
) -> Result<u32, HcaError> {
    let range = format!("expected {lo}..={hi}");
    if text.is_empty() {
        return Err(err(kind, Some(entry), format!("{what} is empty ({range})")));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(
            kind,
            Some(entry),
            format!("{what} '{text}' is not a number ({range})"),
        ));
    }
    match text.parse::<u32>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(err(
            kind,
            Some(entry),
            format!("{what} '{text}' is out of range ({range})"),
        )),
    }
}

fn parse_name(entry: &str, name: &str) -> Result<String, HcaError> {
    use HcaErrorKind::BadName;
    if name.is_empty() {
        return Err(err(BadName, Some(entry), "device name is empty".into()));
    }
    if let Some(c) = name.chars().find(|c| *c == '^' || *c == '=') {
        return Err(err(
            BadName,
            Some(entry),
            format!("'{c}' is only accepted once, at the start of the whole list"),
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(
            BadName,
            Some(entry),
            format!("device name contains {:?}", c),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(err(
            BadName,
            Some(entry),
            format!(
                "device name is {} bytes long (at most {MAX_NAME_LEN})",
                name.len()
            ),
        ));
    }
    Ok(name.to_string())
}

fn parse_entry(
    entry: &str,
    mode: HcaThirdField,
    max_rails: u32,
    exclude: bool,
) -> Result<HcaEntry, HcaError> {
    let fields: Vec<&str> = entry.split(':').collect();
    if fields.len() > 4 {
        return Err(err(
            HcaErrorKind::TooManyFields,
            Some(entry),
            format!(
                "{} fields; expected dev[:port[:third[:fourth]]]",
                fields.len()
            ),
        ));
    }
    let name = parse_name(entry, fields[0])?;
    let port = match fields.get(1) {
        Some(p) => Some(number(
            entry,
            "port",
            p,
            1,
            MAX_PORT,
            HcaErrorKind::BadPort,
        )?),
        None => None,
    };
    let fabric = match (fields.get(2), mode) {
        (None, _) => None,
        (Some(_), _) if exclude => {
            return Err(err(
                HcaErrorKind::FabricInExcludeList,
                Some(entry),
                "a fabric id has no meaning in an exclude ('^') list".into(),
            ))
        }
        (Some(id), HcaThirdField::FabricId) => {
            if let Some(fourth) = fields.get(3) {
                return Err(err(
                    HcaErrorKind::PlaneInFabricIdMode,
                    Some(entry),
                    format!(
                        "fourth field '{fourth}' is only read with [fabric] hca-third-field = \
                         \"rail:plane\" (current: \"fabric-id\")"
                    ),
                ));
            }
            let id = number(
                entry,
                "fabric id",
                id,
                0,
                MAX_FABRIC_ID,
                HcaErrorKind::BadFabricId,
            )?;
            Some(FabricId::from_id(id, max_rails))
        }
        (Some(rail), HcaThirdField::RailPlane) => {
            let rail = number(entry, "rail", rail, 0, max_rails - 1, HcaErrorKind::BadRail)?;
            let plane = match fields.get(3) {
                Some(p) => Some(number(
                    entry,
                    "plane",
                    p,
                    0,
                    MAX_PLANE,
                    HcaErrorKind::BadPlane,
                )?),
                None => None,
            };
            Some(FabricId {
                id: rail,
                dc: 0,
                rail,
                plane,
            })
        }
    };
    Ok(HcaEntry { name, port, fabric })
}

impl HcaList {
    /// Parses an NCCL_IB_HCA value; `mode` and `max_rails` come from `[fabric]`.
    pub fn parse(s: &str, mode: HcaThirdField, max_rails: u32) -> Result<HcaList, HcaError> {
        if max_rails == 0 {
            return Err(err(
                HcaErrorKind::BadMaxRails,
                None,
                "max-rails must be at least 1".into(),
            ));
        }
        let mut rest = s;
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        if rest.is_empty() {
            return Err(err(
                HcaErrorKind::Empty,
                None,
                format!("no devices listed in '{s}'"),
            ));
        }
        let mut entries: Vec<HcaEntry> = Vec::new();
        for (index, text) in rest.split(',').enumerate() {
            if text.is_empty() {
                return Err(err(
                    HcaErrorKind::EmptyEntry,
                    None,
                    format!("entry {} of '{s}' is empty (stray comma?)", index + 1),
                ));
            }
            let entry = parse_entry(text, mode, max_rails, exclude)?;
            if let Some(first) = entries
                .iter()
                .position(|e| e.name == entry.name && e.port == entry.port)
            {
                return Err(err(
                    HcaErrorKind::Duplicate,
                    Some(text),
                    format!("duplicate of entry {} (same device and port)", first + 1),
                ));
            }
            entries.push(entry);
            if entries.len() > MAX_HCA_ENTRIES {
                return Err(err(
                    HcaErrorKind::TooManyEntries,
                    None,
                    format!("more than {MAX_HCA_ENTRIES} devices listed"),
                ));
            }
        }
        Ok(HcaList {
            exclude,
            exact,
            entries,
        })
    }

    fn name_matches(&self, entry: &HcaEntry, dev: &str) -> bool {
        if self.exact {
            dev == entry.name
        } else {
            dev.starts_with(entry.name.as_str())
        }
    }

    /// Whether `dev`/`port` is used, and with which fabric id.
    pub fn select(&self, dev: &str, port: u32) -> Option<Selected> {
        let hit = self
            .entries
            .iter()
            .position(|e| self.name_matches(e, dev) && e.port.is_none_or(|p| p == port));
        match (self.exclude, hit) {
            (false, Some(i)) => Some(Selected {
                port,
                entry: Some(i),
                fabric: self.entries[i].fabric,
            }),
            (false, None) => None,
            (true, Some(_)) => None,
            (true, None) => Some(Selected {
                port,
                entry: None,
                fabric: None,
            }),
        }
    }

    /// Whether any port of `dev` can be used (an exclude entry with a port keeps the others).
    pub fn selects_device(&self, dev: &str) -> bool {
        if self.exclude {
            !self
                .entries
                .iter()
                .any(|e| e.port.is_none() && self.name_matches(e, dev))
        } else {
            self.entries.iter().any(|e| self.name_matches(e, dev))
        }
    }
}

/// Writes the list back in NCCL_IB_HCA syntax (the third field as written: id, or rail).
impl fmt::Display for HcaList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclude {
            f.write_str("^")?;
        }
        if self.exact {
            f.write_str("=")?;
        }
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&e.name)?;
            if let Some(port) = e.port {
                write!(f, ":{port}")?;
                if let Some(fabric) = e.fabric {
                    write!(f, ":{}", fabric.id)?;
                    if let Some(plane) = fabric.plane {
                        write!(f, ":{plane}")?;
                    }
                }
            }
        }
        Ok(())
    }
}
