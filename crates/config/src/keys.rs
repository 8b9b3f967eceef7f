//! The registry of site-config keys: dotted path, value kind, accepted range and environment name.
//! Range checks, environment overrides and error messages are all driven from this one table.

use toml::Value;

/// The kind and accepted range of one key's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyKind {
    /// An integer in `min..=max` that is a multiple of `multiple_of` (1 = any).
    Int {
        min: i64,
        max: i64,
        multiple_of: i64,
    },
    /// A finite number greater than `min_exclusive` and at most `max`.
    Float { min_exclusive: f64, max: f64 },
    /// `true` or `false`.
    Bool,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
    /// Any string of at most `max_len` bytes without NUL (a path template).
    Text { max_len: usize },
    /// A non-empty array of distinct strings from a fixed set (environment: comma-separated).
    List(&'static [&'static str]),
}

/// One key of the site config (sections owned elsewhere, like `[dcqcn]`, are not listed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpec {
    /// Dotted path, e.g. `class.cross-dc.qps`.
    pub path: &'static str,
    pub kind: KeyKind,
    /// Whether the key may be absent (no default value).
    pub optional: bool,
}

/// Smallest and largest accepted segment size (bytes); segments are multiples of 128 bytes.
pub(crate) const SEGMENT_MIN: i64 = 4096;
pub(crate) const SEGMENT_MAX: i64 = 64 * 1024 * 1024;
/// Prefix of every environment variable the plugin reads.
pub(crate) const ENV_PREFIX: &str = "NCCL_DQPLB_";

const SEGMENT: KeyKind = KeyKind::Int {
    min: SEGMENT_MIN,
    max: SEGMENT_MAX,
    multiple_of: 128,
};
const OUTSTANDING: KeyKind = KeyKind::Int {
    min: 1,
    max: 256,
    multiple_of: 1,
};
const fn int(min: i64, max: i64) -> KeyKind {
    KeyKind::Int {
        min,
        max,
        multiple_of: 1,
    }
}
const fn key(path: &'static str, kind: KeyKind) -> KeySpec {
    KeySpec {
        path,
        kind,
        optional: false,
    }
}
const fn optional(path: &'static str, kind: KeyKind) -> KeySpec {
    KeySpec {
        path,
        kind,
        optional: true,
    }
}

/// Accepted `engine.policy` values.
pub(crate) const POLICY_NAMES: &[&str] = &[
    "dqplb",
    "dqplb-led",
    "static-split",
    "round-robin-message",
    "single-qp",
];

macro_rules! class_keys {
    ($c:literal) => {
        [
            key(
                concat!("class.", $c, ".rate-gbps"),
                KeyKind::Float {
                    min_exclusive: 0.0,
                    max: 3200.0,
                },
            ),
            key(
                concat!("class.", $c, ".rtt-us"),
                KeyKind::Float {
                    min_exclusive: 0.0,
                    max: 1_000_000.0,
                },
            ),
            key(concat!("class.", $c, ".qps"), int(1, 128)),
            key(concat!("class.", $c, ".min-outstanding"), OUTSTANDING),
            key(concat!("class.", $c, ".max-outstanding"), OUTSTANDING),
            optional(concat!("class.", $c, ".segment-bytes"), SEGMENT),
            key(
                concat!("class.", $c, ".rehash-ratio"),
                KeyKind::Float {
                    min_exclusive: 1.0,
                    max: 1000.0,
                },
            ),
            key(concat!("class.", $c, ".rehash-window"), int(1, 65536)),
            key(
                concat!("class.", $c, ".rehash-cooldown-ms"),
                int(0, 3_600_000),
            ),
            key(concat!("class.", $c, ".rehash-max-per-minute"), int(0, 64)),
            key(
                concat!("class.", $c, ".stall-timeout-ms"),
                int(0, 3_600_000),
            ),
            key(
                concat!("class.", $c, ".path-pinning"),
                KeyKind::Choice(PATH_PINNING_NAMES),
            ),
            optional(concat!("class.", $c, ".ecmp-width"), int(1, ECMP_WIDTH_MAX)),
            key(
                concat!("class.", $c, ".depth-ratio"),
                KeyKind::Float {
                    min_exclusive: 1.0,
                    max: 1000.0,
                },
            ),
            optional(concat!("class.", $c, ".depth-raised"), int(0, 256)),
            key(concat!("class.", $c, ".depth-hold"), int(1, 65536)),
            key(
                concat!("class.", $c, ".repin-ratio"),
                KeyKind::Float {
                    min_exclusive: 1.0,
                    max: 1000.0,
                },
            ),
            optional(concat!("class.", $c, ".repin-persist"), int(0, 65536)),
            key(concat!("class.", $c, ".repin-settle"), int(1, 65536)),
            key(concat!("class.", $c, ".repin-budget"), int(1, 65536)),
        ]
    };
}

/// Accepted `class.*.path-pinning` values.
pub(crate) const PATH_PINNING_NAMES: &[&str] = &["off", "relative", "absolute"];
/// Largest `ecmp-width`: 14 free source-port bits tell at most 2^14 buckets apart.
pub(crate) const ECMP_WIDTH_MAX: i64 = 1 << 14;

const SAME_RAIL: [KeySpec; 20] = class_keys!("same-rail");
const CROSS_RAIL: [KeySpec; 20] = class_keys!("cross-rail");
const CROSS_DC: [KeySpec; 20] = class_keys!("cross-dc");

const PATHS: [KeySpec; 7] = [
    key(
        "paths.hash",
        KeyKind::Choice(&["crc32", "crc16-ccitt", "xor-fold"]),
    ),
    key("paths.select", KeyKind::Choice(&["low-bits", "mod"])),
    key("paths.fields", KeyKind::List(super::pinning::FIELD_NAMES)),
    key("paths.hash-dest-qpn", KeyKind::Bool),
    key("paths.seed", int(0, u32::MAX as i64)),
    optional("paths.polynomial", int(1, u32::MAX as i64)),
    key("paths.base-port", int(49152, 65535)),
];

/// Accepted `patterns.*` policy values: `default` (= engine.policy) or a policy.
pub(crate) const PATTERN_POLICY_NAMES: &[&str] = &[
    "default",
    "dqplb",
    "dqplb-led",
    "static-split",
    "round-robin-message",
    "single-qp",
];

const OTHER: [KeySpec; 25] = [
    key(
        "fabric.hca-third-field",
        KeyKind::Choice(&["fabric-id", "rail:plane"]),
    ),
    key("fabric.max-rails", int(1, 256)),
    key(
        "fabric.transport",
        KeyKind::Choice(&["auto", "tcp", "verbs"]),
    ),
    key("fabric.control-traffic-class", int(-1, 255)),
    key("engine.policy", KeyKind::Choice(POLICY_NAMES)),
    key("engine.segment-bytes", SEGMENT),
    key("engine.max-messages", int(32, 4096)),
    key("engine.inflight-budget-bytes", int(1 << 20, 1 << 40)),
    key("patterns.collective", KeyKind::Choice(PATTERN_POLICY_NAMES)),
    key("patterns.p2p", KeyKind::Choice(PATTERN_POLICY_NAMES)),
    key("patterns.alltoall", KeyKind::Choice(PATTERN_POLICY_NAMES)),
    key("patterns.alltoall-qps", int(0, 128)),
    key("patterns.alltoall-min-peers", int(1, 1 << 20)),
    key("tcp.socket-buffer-bytes", int(0, i32::MAX as i64)),
    key("tcp.nodelay", KeyKind::Bool),
    key("tcp.fabric-id", int(0, 1 << 24)),
    key("tcp.src-port-base", int(0, 65000)),
    key(
        "tcp.segment-bytes",
        KeyKind::Int {
            min: 0,
            max: SEGMENT_MAX,
            multiple_of: 4096,
        },
    ),
    key("stats.log-on-close", KeyKind::Bool),
    key("stats.log-interval-ms", int(0, 86_400_000)),
    key("stats.file", KeyKind::Text { max_len: 4096 }),
    key("stats.file-interval-ms", int(1000, 3_600_000)),
    key("stats.textfile-dir", KeyKind::Text { max_len: 4096 }),
    key("stats.textfile-pid-peer", KeyKind::Bool),
    optional("log.level", KeyKind::Choice(&["warn", "info", "trace"])),
];

/// Every key this module validates, in documentation order.
pub fn all_keys() -> impl Iterator<Item = &'static KeySpec> {
    OTHER
        .iter()
        .chain(SAME_RAIL.iter())
        .chain(CROSS_RAIL.iter())
        .chain(CROSS_DC.iter())
        .chain(PATHS.iter())
}

/// The spec of a dotted key path, if this registry knows it.
pub(crate) fn find_key(path: &str) -> Option<&'static KeySpec> {
    all_keys().find(|k| k.path == path)
}

/// The environment variable naming a dotted key: `NCCL_DQPLB_` + path upper-cased, `-`/`.` -> `_`.
pub fn env_name(path: &str) -> String {
    let tail: String = path
        .chars()
        .map(|c| {
            if c == '-' || c == '.' {
                '_'
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect();
    format!("{ENV_PREFIX}{tail}")
}

impl KeyKind {
    /// Human description of the accepted values, e.g. `an integer in 1..=128`.
    pub fn accepted(&self) -> String {
        match *self {
            KeyKind::Int {
                min,
                max,
                multiple_of: 1,
            } => format!("an integer in {min}..={max}"),
            KeyKind::Int {
                min,
                max,
                multiple_of,
            } => {
                format!("a multiple of {multiple_of} in {min}..={max}")
            }
            KeyKind::Float { min_exclusive, max } => {
                format!("a number greater than {min_exclusive} and at most {max}")
            }
            KeyKind::Bool => "true or false".to_string(),
            KeyKind::Choice(names) => {
                let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
            KeyKind::Text { max_len } => format!("a string of at most {max_len} bytes"),
            KeyKind::List(names) => {
                let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
                format!("a list of distinct entries of {}", quoted.join(", "))
            }
        }
    }

    /// Checks a parsed value against this kind; the error is a short reason (no key, no origin).
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match (*self, value) {
            (
                KeyKind::Int {
                    min,
                    max,
                    multiple_of,
                },
                Value::Integer(v),
            ) => {
                if *v < min || *v > max {
                    Err(format!("value {v} is out of range"))
                } else if v % multiple_of != 0 {
                    Err(format!("value {v} is not a multiple of {multiple_of}"))
                } else {
                    Ok(())
                }
            }
            (KeyKind::Float { min_exclusive, max }, v @ (Value::Float(_) | Value::Integer(_))) => {
                let x = match v {
                    Value::Float(f) => *f,
                    Value::Integer(i) => *i as f64,
                    _ => f64::NAN,
                };
                if x.is_finite() && x > min_exclusive && x <= max {
                    Ok(())
                } else {
                    Err(format!("value {x} is out of range"))
                }
            }
            (KeyKind::Bool, Value::Boolean(_)) => Ok(()),
            (KeyKind::Text { max_len }, Value::String(s)) => {
                if s.len() > max_len {
                    Err(format!(
                        "a string of {} bytes is longer than {max_len}",
                        s.len()
                    ))
                } else if s.contains('\0') {
                    Err("a string with a NUL byte is not accepted".to_string())
                } else {
                    Ok(())
                }
            }
            (KeyKind::Choice(names), Value::String(s)) => {
                if names.contains(&s.as_str()) {
                    Ok(())
                } else {
                    Err(format!("value \"{s}\" is not accepted"))
                }
            }
            (KeyKind::List(names), Value::Array(items)) => {
                if items.is_empty() {
                    return Err("an empty list is not accepted".to_string());
                }
                let mut seen: Vec<&str> = Vec::new();
                for item in items {
                    let Value::String(s) = item else {
                        return Err(format!(
                            "an entry of type {} is not accepted",
                            item.type_str()
                        ));
                    };
                    if !names.contains(&s.as_str()) {
                        return Err(format!("entry \"{s}\" is not accepted"));
                    }
                    if seen.contains(&s.as_str()) {
                        return Err(format!("entry \"{s}\" is listed twice"));
                    }
                    seen.push(s);
                }
                Ok(())
            }
            (_, other) => Err(format!(
                "value of type {} is not accepted",
                other.type_str()
            )),
        }
    }

    /// Parses an environment variable's text into a TOML value of this kind and checks its range.
    pub(crate) fn parse_env(&self, raw: &str) -> Result<Value, String> {
        let text = raw.trim();
        let value = match *self {
            KeyKind::Int { .. } => text
                .parse::<i64>()
                .map(Value::Integer)
                .map_err(|_| format!("'{}' is not an integer", crate::clip(raw)))?,
            KeyKind::Float { .. } => text
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| format!("'{}' is not a number", crate::clip(raw)))?,
            KeyKind::Bool => match text.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Value::Boolean(true),
                "false" | "0" | "no" | "off" => Value::Boolean(false),
                _ => return Err(format!("'{}' is not a boolean", crate::clip(raw))),
            },
            KeyKind::Text { .. } => Value::String(raw.to_string()),
            KeyKind::Choice(names) => {
                let lower = text.to_ascii_lowercase();
                match names.iter().find(|n| **n == lower) {
                    Some(n) => Value::String((*n).to_string()),
                    None => return Err(format!("'{}' is not accepted", crate::clip(raw))),
                }
            }
            KeyKind::List(_) => Value::Array(
                text.split(',')
                    .map(|e| Value::String(e.trim().to_ascii_lowercase()))
                    .collect(),
            ),
        };
        self.check(&value).map(|()| value)
    }
}

/// The value at a dotted path in a TOML tree.
pub(crate) fn get_path<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(root, |node, part| node.as_table()?.get(part))
}

/// Sets the value at a dotted path, creating intermediate tables; false if a non-table is in the way.
pub(crate) fn set_path(root: &mut Value, path: &str, value: Value) -> bool {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else {
        return false;
    };
    let mut node = root;
    for part in parts {
        let Some(table) = node.as_table_mut() else {
            return false;
        };
        node = table
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(toml::Table::new()));
    }
    match node.as_table_mut() {
        Some(table) => {
            table.insert(last.to_string(), value);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_the_rule() {
        assert_eq!(
            env_name("class.cross-dc.qps"),
            "NCCL_DQPLB_CLASS_CROSS_DC_QPS"
        );
        assert_eq!(env_name("engine.policy"), "NCCL_DQPLB_ENGINE_POLICY");
        assert_eq!(
            env_name("tcp.socket-buffer-bytes"),
            "NCCL_DQPLB_TCP_SOCKET_BUFFER_BYTES"
        );
    }

    #[test]
    fn registry_paths_are_unique_and_env_names_too() {
        let paths: Vec<&str> = all_keys().map(|k| k.path).collect();
        assert_eq!(paths.len(), 92);
        let mut dedup = paths.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), paths.len());
        let mut envs: Vec<String> = paths.iter().map(|p| env_name(p)).collect();
        envs.sort();
        envs.dedup();
        assert_eq!(envs.len(), paths.len());
    }

    #[test]
    fn segment_kind_checks_multiple_and_range() {
        let k = find_key("engine.segment-bytes").map(|k| k.kind);
        assert_eq!(k, Some(SEGMENT));
        assert_eq!(SEGMENT.check(&Value::Integer(524288)), Ok(()));
        assert_eq!(
            SEGMENT.check(&Value::Integer(4100)),
            Err("value 4100 is not a multiple of 128".to_string())
        );
        assert_eq!(
            SEGMENT.check(&Value::Integer(2048)),
            Err("value 2048 is out of range".into())
        );
        assert_eq!(SEGMENT.accepted(), "a multiple of 128 in 4096..=67108864");
    }

    #[test]
    fn env_values_parse_per_kind() {
        assert_eq!(int(1, 128).parse_env(" 16 "), Ok(Value::Integer(16)));
        assert_eq!(
            int(1, 128).parse_env("0"),
            Err("value 0 is out of range".to_string())
        );
        assert_eq!(
            int(1, 128).parse_env("x"),
            Err("'x' is not an integer".to_string())
        );
        assert_eq!(KeyKind::Bool.parse_env("off"), Ok(Value::Boolean(false)));
        // The accepted spellings are the schema's policies, in its order (and `default` first
        // for the patterns).
        let names: Vec<&str> = super::super::schema::PolicyName::ALL
            .iter()
            .map(|p| p.as_str())
            .collect();
        assert_eq!(POLICY_NAMES, names.as_slice());
        assert_eq!(PATTERN_POLICY_NAMES[0], "default");
        assert_eq!(&PATTERN_POLICY_NAMES[1..], names.as_slice());
        let policy = KeyKind::Choice(POLICY_NAMES);
        assert_eq!(
            policy.parse_env("Single-QP"),
            Ok(Value::String("single-qp".into()))
        );
        assert_eq!(
            policy.parse_env("fast"),
            Err("'fast' is not accepted".to_string())
        );
        let rate = KeyKind::Float {
            min_exclusive: 0.0,
            max: 3200.0,
        };
        assert_eq!(
            rate.parse_env("0"),
            Err("value 0 is out of range".to_string())
        );
        assert_eq!(
            rate.parse_env("inf"),
            Err("value inf is out of range".to_string())
        );
    }

    #[test]
    fn field_lists_parse_and_check() {
        let k = find_key("paths.fields")
            .map(|k| k.kind)
            .expect("registered");
        let v = k.parse_env("src-ip, DST-IP,src-port").expect("valid list");
        assert_eq!(
            v,
            Value::Array(vec![
                Value::String("src-ip".into()),
                Value::String("dst-ip".into()),
                Value::String("src-port".into()),
            ])
        );
        assert_eq!(
            k.parse_env("src-port,src-port"),
            Err("entry \"src-port\" is listed twice".to_string())
        );
        assert_eq!(
            k.parse_env("src-port,vlan"),
            Err("entry \"vlan\" is not accepted".to_string())
        );
        assert_eq!(
            k.check(&Value::Array(vec![])),
            Err("an empty list is not accepted".to_string())
        );
        assert!(k
            .accepted()
            .starts_with("a list of distinct entries of \"src-ip\""));
        let w = find_key("class.cross-rail.ecmp-width").expect("registered");
        assert!(w.optional);
        assert_eq!(w.kind.parse_env("16384"), Ok(Value::Integer(16384)));
        assert_eq!(
            w.kind.parse_env("16385"),
            Err("value 16385 is out of range".to_string())
        );
    }

    #[test]
    fn set_and_get_paths() {
        let mut root = Value::Table(toml::Table::new());
        assert!(set_path(
            &mut root,
            "class.cross-dc.qps",
            Value::Integer(32)
        ));
        assert_eq!(
            get_path(&root, "class.cross-dc.qps"),
            Some(&Value::Integer(32))
        );
        assert!(!set_path(
            &mut root,
            "class.cross-dc.qps.x",
            Value::Integer(1)
        ));
        assert_eq!(get_path(&root, "class.same-rail.qps"), None);
    }
}
