//! File-name facts of the mlx5 DCQCN interface: cc_params names in kernel order, the congestion
//! counters, and the one table mapping each cc_params name to its mlxconfig (firmware) name.

/// Every cc_params file name the mlx5 driver may create, in kernel order. Older kernels lack
/// `rp_max_rate` and `np_min_time_between_cnps`; only newer ones have the two `rtt_resp_*` names.
pub(crate) const CC_PARAM_NAMES: [&str; 22] = [
    "rp_clamp_tgt_rate",
    "rp_clamp_tgt_rate_ati",
    "rp_time_reset",
    "rp_byte_reset",
    "rp_threshold",
    "rp_ai_rate",
    "rp_max_rate",
    "rp_hai_rate",
    "rp_min_dec_fac",
    "rp_min_rate",
    "rp_rate_to_set_on_first_cnp",
    "rp_dce_tcp_g",
    "rp_dce_tcp_rtt",
    "rp_rate_reduce_monitor_period",
    "rp_initial_alpha_value",
    "rp_gd",
    "np_min_time_between_cnps",
    "np_cnp_dscp",
    "np_cnp_prio_mode",
    "np_cnp_prio",
    "rtt_resp_dscp_valid",
    "rtt_resp_dscp",
];

/// The congestion counters under `ports/<p>/hw_counters/`, in display order.
pub(crate) const COUNTER_NAMES: [&str; 4] = [
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
];

/// cc_params name -> mlxconfig parameter stem (append `_P<port>`). Names verified against
/// `mlxconfig -d <dev> q` dumps of ConnectX-5 firmware (NV_ROCE_CC_ECN group). Three cc_params
/// have no mlxconfig equivalent and map to `None`: `np_cnp_prio_mode`, `rtt_resp_dscp_valid`
/// and `rtt_resp_dscp`; for those only the runtime form can be printed.
pub(crate) const MLXCONFIG_NAMES: [(&str, Option<&str>); 22] = [
    ("rp_clamp_tgt_rate", Some("CLAMP_TGT_RATE")),
    (
        "rp_clamp_tgt_rate_ati",
        Some("CLAMP_TGT_RATE_AFTER_TIME_INC"),
    ),
    ("rp_time_reset", Some("RPG_TIME_RESET")),
    ("rp_byte_reset", Some("RPG_BYTE_RESET")),
    ("rp_threshold", Some("RPG_THRESHOLD")),
    ("rp_ai_rate", Some("RPG_AI_RATE")),
    ("rp_max_rate", Some("RPG_MAX_RATE")),
    ("rp_hai_rate", Some("RPG_HAI_RATE")),
    ("rp_min_dec_fac", Some("RPG_MIN_DEC_FAC")),
    ("rp_min_rate", Some("RPG_MIN_RATE")),
    (
        "rp_rate_to_set_on_first_cnp",
        Some("RATE_TO_SET_ON_FIRST_CNP"),
    ),
    ("rp_dce_tcp_g", Some("DCE_TCP_G")),
    ("rp_dce_tcp_rtt", Some("DCE_TCP_RTT")),
    (
        "rp_rate_reduce_monitor_period",
        Some("RATE_REDUCE_MONITOR_PERIOD"),
    ),
    ("rp_initial_alpha_value", Some("INITIAL_ALPHA_VALUE")),
    ("rp_gd", Some("RPG_GD")),
    ("np_min_time_between_cnps", Some("MIN_TIME_BETWEEN_CNPS")),
    ("np_cnp_dscp", Some("CNP_DSCP")),
    ("np_cnp_prio_mode", None),
    ("np_cnp_prio", Some("CNP_802P_PRIO")),
    ("rtt_resp_dscp_valid", None),
    ("rtt_resp_dscp", None),
];

/// mlxconfig stem of the per-port bitmask of priorities with RoCE congestion control enabled;
/// the persistent counterpart of the `ecn/roce_rp|roce_np/enable/<prio>` files.
pub(crate) const MLXCONFIG_PRIO_MASK: &str = "ROCE_CC_PRIO_MASK";

/// The mlxconfig stem for a cc_params name, `None` when it has none (or is not a cc_param).
pub(crate) fn mlxconfig_name(cc_param: &str) -> Option<&'static str> {
    MLXCONFIG_NAMES
        .iter()
        .find(|(name, _)| *name == cc_param)
        .and_then(|(_, stem)| *stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlxconfig_table_covers_every_cc_param_in_kernel_order() {
        let table: Vec<&str> = MLXCONFIG_NAMES.iter().map(|(n, _)| *n).collect();
        assert_eq!(table, CC_PARAM_NAMES.to_vec());
        assert_eq!(mlxconfig_name("rp_threshold"), Some("RPG_THRESHOLD"));
        assert_eq!(mlxconfig_name("np_cnp_prio"), Some("CNP_802P_PRIO"));
        assert_eq!(mlxconfig_name("np_cnp_prio_mode"), None);
        assert_eq!(mlxconfig_name("bogus"), None);
    }
}
