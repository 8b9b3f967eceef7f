//! Site configuration: TOML schema, lookup order, environment overrides, NCCL_IB_HCA parsing and
//! the per-connection-class plan (QPs, outstanding depth, segment size).

pub mod dcqcn;
