//! Site configuration: TOML schema, lookup order, environment overrides, NCCL_IB_HCA parsing and
//! the per-connection-class plan (QPs, outstanding depth, segment size).

#![forbid(unsafe_code)]

pub mod clip;
pub mod dcqcn;
pub mod env;
pub mod error;
pub mod hca;
pub mod keys;
pub mod load;
pub mod parse;
pub mod pinning;
pub mod plan;
pub mod schema;
mod spans;
pub mod tcp_segment;
mod validate;

pub use clip::clip;
pub use error::{ConfigError, ConfigErrorDetails, ConfigErrorKind, EMBEDDED_ORIGIN, ENV_ORIGIN};
pub use hca::{FabricId, HcaEntry, HcaError, HcaErrorKind, HcaList, Selected};
pub use load::{
    embedded_default, load_from_process_env, load_path, load_with, LoadedConfig, CONF_VAR,
    EMBEDDED_DEFAULT, ETC_PATH,
};
pub use parse::parse_str;
pub use pinning::{BucketSelectName, HashFamilyName, HashField, PathPinning, PathsSection};
pub use plan::{classify, ClassPlan, ConnClass};
pub use schema::{
    ClassSections, ClassSpec, DepthRuleSpec, EngineSection, FabricSection, HcaThirdField, LogLevel,
    LogSection, PatternPolicy, PatternsSection, PolicyName, RepinRuleSpec, SiteConfig,
    StatsSection, TcpSection, TransportKind,
};
