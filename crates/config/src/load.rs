//! Finding and loading the site config: NCCL_DQPLB_CONF, then /etc/nccl-dqplb.toml, then the
//! embedded default; then NCCL_DQPLB_* overrides. The environment is passed in, so tests need none.

use std::path::Path;

use super::env::apply_env;
use super::error::{ConfigError, ConfigErrorKind, EMBEDDED_ORIGIN};
use super::parse::parse_str;
use super::schema::SiteConfig;

/// The configuration compiled into the plugin (plugin-conf/default.toml).
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../plugin-conf/default.toml");
/// The system-wide config file looked at when NCCL_DQPLB_CONF is unset.
pub const ETC_PATH: &str = "/etc/nccl-dqplb.toml";
/// The variable naming a config file.
pub const CONF_VAR: &str = "NCCL_DQPLB_CONF";

/// A loaded configuration and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub config: SiteConfig,
    /// The file path, or `<embedded default>`.
    pub source: String,
    /// The NCCL_DQPLB_* overrides applied, as (variable, value), aliases first.
    pub overrides: Vec<(String, String)>,
    /// One line per NCCL_DQPLB_* variable that is not ours (ignored), naming the nearest
    /// accepted name: the plugin logs each as one WARN.
    pub warnings: Vec<String>,
}

/// Largest site config read, in bytes: a real one is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Linux's O_NONBLOCK (the same value on x86_64 and aarch64): opening a FIFO returns at once
/// instead of waiting for a writer, so the type check below can refuse it.
const O_NONBLOCK: i32 = 0o4000;

/// Reads a config file: only a regular file (after symlinks) of at most [`MAX_CONFIG_BYTES`];
/// a FIFO, device (/dev/zero), directory or socket is refused without blocking or reading it.
/// Err(Ok(why)) for those, Err(Err(io)) when opening or reading fails.
fn read_bounded(path: &Path) -> Result<String, Result<String, std::io::Error>> {
    use std::io::Read as _;
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(Err)?;
    let meta = file.metadata().map_err(Err)?;
    let t = meta.file_type();
    if !t.is_file() {
        let what = if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(Ok(format!("is {what}, not a regular file")));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(Ok(format!(
            "is {} bytes, larger than the {MAX_CONFIG_BYTES} bytes a config file may have",
            meta.len()
        )));
    }
    let mut text = String::new();
    let read = file
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(Err)?;
    if read as u64 > MAX_CONFIG_BYTES {
        return Err(Ok(format!(
            "grew past the {MAX_CONFIG_BYTES} bytes a config file may have while being read"
        )));
    }
    Ok(text)
}

fn read_file(path: &Path, how: &str) -> Result<String, ConfigError> {
    read_bounded(path).map_err(|e| {
        let why = match e {
            Ok(refused) => refused,
            Err(io) => io.to_string(),
        };
        ConfigError::new(
            ConfigErrorKind::Unreadable,
            &path.display().to_string(),
            format!("cannot read the config file named by {how}: {why}"),
        )
    })
}

/// Parses `text` (named `origin` in messages) and applies the NCCL_DQPLB_* overrides in
/// `vars`: what every loader here ends with, for callers that hold the text themselves.
pub fn load_text(
    text: &str,
    origin: &str,
    vars: &[(String, String)],
) -> Result<LoadedConfig, ConfigError> {
    let parsed = parse_str(text, origin)?;
    let (config, overrides, warnings) = apply_env(&parsed, vars, origin, text)?;
    Ok(LoadedConfig {
        config,
        source: origin.to_string(),
        overrides,
        warnings,
    })
}

/// Loads with an injected environment: `env` answers single lookups (NCCL_DQPLB_CONF),
/// `env_vars` lists every variable (for NCCL_DQPLB_* overrides), `etc_path` replaces /etc's file.
pub fn load_with(
    env: &dyn Fn(&str) -> Option<String>,
    env_vars: &[(String, String)],
    etc_path: &Path,
) -> Result<LoadedConfig, ConfigError> {
    // Empty is unset, as NCCL reads its own variables.
    if let Some(conf) = env(CONF_VAR).filter(|c| !c.is_empty()) {
        let path = Path::new(&conf);
        let text = read_file(path, CONF_VAR)?;
        return load_text(&text, &conf, env_vars);
    }
    match read_bounded(etc_path) {
        Ok(text) => load_text(&text, &etc_path.display().to_string(), env_vars),
        Err(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            load_text(EMBEDDED_DEFAULT, EMBEDDED_ORIGIN, env_vars)
        }
        Err(e) => Err(ConfigError::new(
            ConfigErrorKind::Unreadable,
            &etc_path.display().to_string(),
            format!(
                "cannot read the system config file: {}",
                e.unwrap_or_else(|io| io.to_string())
            ),
        )),
    }
}

/// Loads an explicit file (e.g. `dqplb plan --config F`), still applying NCCL_DQPLB_* overrides.
pub fn load_path(path: &Path, env_vars: &[(String, String)]) -> Result<LoadedConfig, ConfigError> {
    let text = read_file(path, "--config")?;
    load_text(&text, &path.display().to_string(), env_vars)
}

/// The process environment as (name, value) pairs, skipping names or values that are not UTF-8.
pub fn process_env_vars() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Loads from the real process environment and /etc/nccl-dqplb.toml.
pub fn load_from_process_env() -> Result<LoadedConfig, ConfigError> {
    let vars = process_env_vars();
    let lookup = |name: &str| std::env::var(name).ok();
    load_with(&lookup, &vars, Path::new(ETC_PATH))
}

/// The embedded default, parsed (it is validated by the test suite, so this cannot fail there).
pub fn embedded_default() -> Result<SiteConfig, ConfigError> {
    parse_str(EMBEDDED_DEFAULT, EMBEDDED_ORIGIN)
}
