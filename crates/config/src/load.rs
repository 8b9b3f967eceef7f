//! Finding and loading the site config: NCCL_DQPLB_CONF, then /etc/nccl-dqplb.toml, then the
//! embedded default; then NCCL_DQPLB_* overrides. The environment is passed in, so tests need none.

use std::path::Path;

use super::env::apply_env;
use super::error::{ConfigError, ConfigErrorKind, EMBEDDED_ORIGIN, ENV_ORIGIN};
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
}

fn read_file(path: &Path, how: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            ConfigErrorKind::Unreadable,
            &path.display().to_string(),
            format!("cannot read the config file named by {how}: {e}"),
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
    let (config, overrides) = apply_env(&parsed, vars, origin, text)?;
    Ok(LoadedConfig {
        config,
        source: origin.to_string(),
        overrides,
    })
}

/// Loads with an injected environment: `env` answers single lookups (NCCL_DQPLB_CONF),
/// `env_vars` lists every variable (for NCCL_DQPLB_* overrides), `etc_path` replaces /etc's file.
pub fn load_with(
    env: &dyn Fn(&str) -> Option<String>,
    env_vars: &[(String, String)],
    etc_path: &Path,
) -> Result<LoadedConfig, ConfigError> {
    if let Some(conf) = env(CONF_VAR) {
        if conf.is_empty() {
            return Err(ConfigError::new(
                ConfigErrorKind::Unreadable,
                ENV_ORIGIN,
                "is set but empty; it must name a config file",
            )
            .variable(CONF_VAR));
        }
        let path = Path::new(&conf);
        let text = read_file(path, CONF_VAR)?;
        return load_text(&text, &conf, env_vars);
    }
    match std::fs::read_to_string(etc_path) {
        Ok(text) => load_text(&text, &etc_path.display().to_string(), env_vars),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            load_text(EMBEDDED_DEFAULT, EMBEDDED_ORIGIN, env_vars)
        }
        Err(e) => Err(ConfigError::new(
            ConfigErrorKind::Unreadable,
            &etc_path.display().to_string(),
            format!("cannot read the system config file: {e}"),
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
