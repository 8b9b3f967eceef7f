//! NCCL_IB_HCA parsing with NCCL's semantics (`^` exclude, `=` exact, else prefix match) plus the
//! third/fourth fields (fabric id = dc * max_rails + rail, or 2.30's rail[:plane]); lenient like NCCL.

use std::fmt;

use serde::Serialize;

use super::schema::HcaThirdField;

/// NCCL's limit on NCCL_IB_HCA entries: net_ib reads the list with
/// `parseStringList(userIbEnv, userIfs, MAX_IB_DEVS)` and MAX_IB_DEVS is 32 (src/transport/net_ib.cc
/// 2.20.3-2.28.9, src/transport/net_ib/common.h 2.29.2-2.30.7); parseStringList stops after that
/// many non-empty entries, duplicates included (src/misc/utils.cc).
pub const MAX_HCA_ENTRIES: usize = 32;
/// Largest accepted port number.
pub(crate) const MAX_PORT: u32 = 255;
/// Largest accepted fabric id in `fabric-id` mode.
pub(crate) const MAX_FABRIC_ID: u32 = 65535;
/// Largest accepted plane (NCCL stores it as int16).
pub(crate) const MAX_PLANE: u32 = 32767;
/// Longest accepted device name (IB_DEVICE_NAME_MAX - 1).
pub(crate) const MAX_NAME_LEN: usize = 63;

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
            Some(entry) => write!(
                f,
                "NCCL_IB_HCA entry '{}': {}",
                crate::clip(entry),
                self.message
            ),
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

/// NCCL reads numeric fields with `atoi`: leading blanks, an optional sign, then digits; anything
/// after is ignored and no digits read as 0 (None when the value does not fit i64).
fn atoi(text: &str) -> Option<i64> {
    let t = text.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = digits.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 {
        return Some(0);
    }
    let v = digits[..n].parse::<i64>().ok()?;
    Some(if neg { -v } else { v })
}

/// Reads a numeric field (empty = absent) and records a diagnostic, ending in `consequence`,
/// when the text is not a plain decimal in `lo..=hi`. Ok(None) = absent; Err(()) = diagnosed.
#[allow(clippy::too_many_arguments)]
fn number(
    diags: &mut Vec<HcaError>,
    entry: &str,
    what: &str,
    text: &str,
    lo: u32,
    hi: u32,
    kind: HcaErrorKind,
    consequence: &str,
) -> Result<Option<u32>, ()> {
    if text.is_empty() {
        return Ok(None);
    }
    let range = format!("expected {lo}..={hi}");
    let problem = if !text.bytes().all(|b| b.is_ascii_digit()) {
        "is not a number"
    } else {
        match text.parse::<u32>() {
            Ok(v) if (lo..=hi).contains(&v) => return Ok(Some(v)),
            _ => "is out of range",
        }
    };
    diags.push(err(
        kind,
        Some(entry),
        format!("{what} '{text}' {problem} ({range}); {consequence}"),
    ));
    Err(())
}

/// Characters of the device and interface names NCCL matches (mlx5_0, rxe0, bnxt_re0, eth0,
/// bond0.100, ...). A name with any other character can match no device: it is refused.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A device name as NCCL keeps it (at most 63 bytes), with a diagnostic when it is cut. Ok(None)
/// when the name is empty (entry skipped); Err for a character no device name has.
fn parse_name(
    diags: &mut Vec<HcaError>,
    entry: &str,
    name: &str,
) -> Result<Option<String>, HcaError> {
    use HcaErrorKind::BadName;
    if name.is_empty() {
        diags.push(err(
            BadName,
            Some(entry),
            "device name is empty; entry ignored (as NCCL does)".into(),
        ));
        return Ok(None);
    }
    if let Some(c) = name.chars().find(|c| *c == '^' || *c == '=') {
        return Err(err(
            BadName,
            Some(entry),
            format!("'{c}' is only accepted once, at the start of the whole list; no device name contains it"),
        ));
    }
    if let Some(c) = name.chars().find(|c| !name_char(*c)) {
        let hint = if c == ';' || c.is_whitespace() {
            "; separate devices with ','"
        } else {
            ""
        };
        return Err(err(
            BadName,
            Some(entry),
            format!("device name contains {c:?}, which no RDMA device or interface name has (letters, digits, '_', '-', '.'){hint}"),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        diags.push(err(
            BadName,
            Some(entry),
            format!(
                "device name is {} bytes long; NCCL keeps the first {MAX_NAME_LEN}",
                name.len()
            ),
        ));
        let mut cut = MAX_NAME_LEN;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        return Ok(Some(name[..cut].to_string()));
    }
    Ok(Some(name.to_string()))
}

/// Port that NCCL's `atoi` makes of a field that is not a clean port number: such an entry
/// matches no port (NCCL compares the number with 1-based port numbers).
const NO_PORT: u32 = 0;

fn parse_entry(
    diags: &mut Vec<HcaError>,
    entry: &str,
    mode: HcaThirdField,
    max_rails: u32,
    exclude: bool,
) -> Result<Option<HcaEntry>, HcaError> {
    // NCCL (src/misc/utils.cc parseStringList, 2.30) reads at most four ':' fields; empty ones
    // mean "absent" (-1), so `mlx5_0::0:0` is "any port, rail 0, plane 0".
    let fields: Vec<&str> = entry.split(':').collect();
    if fields.len() > 4 {
        diags.push(err(
            HcaErrorKind::TooManyFields,
            Some(entry),
            format!(
                "{} fields; expected dev[:port[:third[:fourth]]]; fields after the fourth are ignored",
                fields.len()
            ),
        ));
    }
    let Some(name) = parse_name(diags, entry, fields[0])? else {
        return Ok(None);
    };
    let port = match fields.get(1) {
        Some(p) => match number(
            diags,
            entry,
            "port",
            p,
            1,
            MAX_PORT,
            HcaErrorKind::BadPort,
            "this entry matches no port",
        ) {
            Ok(v) => v,
            // What NCCL's atoi makes of it: -1 is "any port", other numbers are kept.
            Err(()) => match atoi(p) {
                Some(-1) => None,
                Some(v) if (1..=i64::from(MAX_PORT)).contains(&v) => Some(v as u32),
                _ => Some(NO_PORT),
            },
        },
        None => None,
    };
    let third = fields.get(2).copied().unwrap_or("");
    let fourth = fields.get(3).copied().unwrap_or("");
    if exclude {
        if !third.is_empty() || !fourth.is_empty() {
            diags.push(err(
                HcaErrorKind::FabricInExcludeList,
                Some(entry),
                "a fabric id has no meaning in an exclude ('^') list; ignored".into(),
            ));
        }
        return Ok(Some(HcaEntry {
            name,
            port,
            fabric: None,
        }));
    }
    let plane = number(
        diags,
        entry,
        "plane",
        fourth,
        0,
        MAX_PLANE,
        HcaErrorKind::BadPlane,
        "plane ignored",
    )
    .unwrap_or(None);
    let fabric = match mode {
        HcaThirdField::FabricId => number(
            diags,
            entry,
            "fabric id",
            third,
            0,
            MAX_FABRIC_ID,
            HcaErrorKind::BadFabricId,
            "the site's default fabric id is used",
        )
        .unwrap_or(None)
        .map(|id| FabricId {
            plane,
            ..FabricId::from_id(id, max_rails)
        }),
        HcaThirdField::RailPlane => number(
            diags,
            entry,
            "rail",
            third,
            0,
            max_rails - 1,
            HcaErrorKind::BadRail,
            "the site's default fabric id is used",
        )
        .unwrap_or(None)
        .map(|rail| FabricId {
            id: rail,
            dc: 0,
            rail,
            plane,
        }),
    };
    if fabric.is_none() && plane.is_some() {
        diags.push(err(
            HcaErrorKind::BadPlane,
            Some(entry),
            "a plane without a rail/fabric id is ignored".into(),
        ));
    }
    Ok(Some(HcaEntry { name, port, fabric }))
}

impl HcaList {
    /// Parses an NCCL_IB_HCA value strictly, for operators (`dqplb plan`): anything NCCL would
    /// silently ignore or reinterpret is an error naming the entry. `mode` and `max_rails` come
    /// from `[fabric]`.
    pub fn parse(s: &str, mode: HcaThirdField, max_rails: u32) -> Result<HcaList, HcaError> {
        let (list, mut diags) = Self::parse_lenient(s, mode, max_rails)?;
        if diags.is_empty() {
            Ok(list)
        } else {
            Err(diags.swap_remove(0))
        }
    }

    /// Parses an NCCL_IB_HCA value the way NCCL does (src/misc/utils.cc parseStringList, 2.20
    /// through 2.30): empty entries and fields are skipped, numbers are read with `atoi`, the
    /// first of duplicate entries wins, entries past the 32nd non-empty one are dropped unread,
    /// and an empty list selects every device. Linear in the value's length. Returns the list
    /// and one short diagnostic per thing NCCL would ignore or reinterpret (entries echoed cut
    /// to 64 characters), for the caller to log as one WARN. Fails for a bad `max_rails` (site
    /// config) and for a device name with a character no device name has ("mlx5_0;mlx5_1").
    pub fn parse_lenient(
        s: &str,
        mode: HcaThirdField,
        max_rails: u32,
    ) -> Result<(HcaList, Vec<HcaError>), HcaError> {
        if max_rails == 0 {
            return Err(err(
                HcaErrorKind::BadMaxRails,
                None,
                "max-rails must be at least 1".into(),
            ));
        }
        let mut diags = Vec::new();
        let mut rest = s;
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let mut entries: Vec<HcaEntry> = Vec::new();
        // Non-empty entries read so far, duplicates included (what NCCL's 32 counts).
        let mut read = 0;
        let mut tokens = rest.split(',').enumerate();
        for (index, text) in tokens.by_ref() {
            if text.is_empty() {
                if !rest.is_empty() {
                    diags.push(err(
                        HcaErrorKind::EmptyEntry,
                        None,
                        format!("entry {} is empty (stray comma?); skipped", index + 1),
                    ));
                }
                continue;
            }
            if read == MAX_HCA_ENTRIES {
                let more = 1 + tokens.filter(|(_, t)| !t.is_empty()).count();
                diags.push(err(
                    HcaErrorKind::TooManyEntries,
                    None,
                    format!("more than {MAX_HCA_ENTRIES} entries listed; the {more} after the first {MAX_HCA_ENTRIES} are ignored (as NCCL does: MAX_IB_DEVS)"),
                ));
                break;
            }
            read += 1;
            let Some(entry) = parse_entry(&mut diags, text, mode, max_rails, exclude)? else {
                continue;
            };
            if let Some(first) = entries
                .iter()
                .position(|e| e.name == entry.name && e.port == entry.port)
            {
                diags.push(err(
                    HcaErrorKind::Duplicate,
                    Some(text),
                    format!(
                        "duplicate of entry {} (same device and port); the first one wins",
                        first + 1
                    ),
                ));
                continue;
            }
            entries.push(entry);
        }
        if entries.is_empty() {
            diags.push(err(
                HcaErrorKind::Empty,
                None,
                format!(
                    "no devices listed in '{}'; every device is used (as NCCL does)",
                    crate::clip(s)
                ),
            ));
        }
        Ok((
            HcaList {
                exclude,
                exact,
                entries,
            },
            diags,
        ))
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
        if self.entries.is_empty() {
            // NCCL's matchIfList: an empty list selects everything.
            return Some(Selected {
                port,
                entry: None,
                fabric: None,
            });
        }
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
        if self.entries.is_empty() {
            return true;
        }
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
            if e.port.is_some() || e.fabric.is_some() {
                f.write_str(":")?;
            }
            if let Some(port) = e.port {
                write!(f, "{port}")?;
            }
            if let Some(fabric) = e.fabric {
                write!(f, ":{}", fabric.id)?;
                if let Some(plane) = fabric.plane {
                    write!(f, ":{plane}")?;
                }
            }
        }
        Ok(())
    }
}
