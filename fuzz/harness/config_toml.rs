//! Arbitrary text as a site-config file, an NCCL_IB_HCA value and NCCL_DQPLB_* variables: no panic,
//! every error displays a reason, and an accepted config only yields connections peers accept.

use std::path::Path;

use dqplb_config::{HcaList, HcaThirdField, SiteConfig};
use dqplb_engine::{EngineParams, Sender};
use nccl_net_dqplb::plugin::conn_params;

/// A file that never exists, so `load_with` falls back to the embedded default.
const NO_ETC: &str = "/nonexistent/dqplb-fuzz/nccl-dqplb.toml";

/// Input: byte 0 picks the HCA mode and max_rails; the rest, as UTF-8 (lossy), is split on NUL
/// into the TOML text, the NCCL_IB_HCA value, then `NAME=VALUE` environment entries.
pub fn check(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.split('\0');
    let toml_text = parts.next().unwrap_or("");
    let hca = parts.next().unwrap_or("");
    let vars: Vec<(String, String)> = parts
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv.to_string(), String::new()),
        })
        .collect();

    match dqplb_config::parse_str(toml_text, "fuzz") {
        Ok(cfg) => {
            accepted_config(&cfg, sel);
            hca_list(hca, cfg.fabric.hca_third_field, cfg.fabric.max_rails);
        }
        Err(e) => assert!(!e.to_string().trim().is_empty(), "empty config error"),
    }
    let mode = if sel & 1 == 0 {
        HcaThirdField::FabricId
    } else {
        HcaThirdField::RailPlane
    };
    // max_rails 0 is kept: it must be refused with a reason.
    hca_list(hca, mode, u32::from(sel >> 1));

    if vars.is_empty() {
        // The embedded default alone is covered by the seeds; skip its slow re-parse.
        return;
    }
    let no_conf = |_: &str| None;
    match dqplb_config::load_with(&no_conf, &vars, Path::new(NO_ETC)) {
        Ok(loaded) => accepted_config(&loaded.config, sel),
        Err(e) => assert!(!e.to_string().trim().is_empty(), "empty env error"),
    }
}

/// Plans, and the connection parameters the plugin derives, of a config the loader accepted.
fn accepted_config(cfg: &SiteConfig, sel: u8) {
    let _ = cfg.plans();
    let rails = cfg.fabric.max_rails;
    // Same rail, another rail, another data centre.
    let local = u32::from(sel) % rails.max(1);
    for (remote, tcp) in [local, local + 1, local + rails]
        .into_iter()
        .flat_map(|r| [(r, false), (r, true)])
    {
        match conn_params(cfg, local, remote, tcp) {
            Err(e) => panic!("accepted config gives no connection parameters: {e}"),
            Ok((class, p)) => {
                if let Err(e) = p.validate() {
                    panic!("accepted config makes {class:?} connections peers refuse: {e}");
                }
                let ep = EngineParams {
                    qps: usize::from(p.qps),
                    max_outstanding: p.outstanding,
                    segment_bytes: p.segment_bytes,
                    max_messages: p.max_messages as usize,
                    policy: p.policy,
                };
                if let Err(e) = Sender::new(&ep) {
                    panic!("accepted config makes {class:?} parameters the engine refuses: {e}");
                }
            }
        }
    }
}

fn hca_list(s: &str, mode: HcaThirdField, max_rails: u32) {
    match HcaList::parse(s, mode, max_rails) {
        Err(e) => assert!(!e.to_string().trim().is_empty(), "empty HCA error"),
        Ok(list) => {
            assert!(!list.entries.is_empty() && list.entries.len() <= 32);
            for e in &list.entries {
                assert!(!e.name.is_empty());
                let _ = list.select(&e.name, e.port.unwrap_or(1));
                let _ = list.selects_device(&e.name);
                if let (Some(f), HcaThirdField::FabricId) = (e.fabric, mode) {
                    assert_eq!(f.dc * max_rails + f.rail, f.id, "fabric id decomposition");
                }
            }
        }
    }
}
