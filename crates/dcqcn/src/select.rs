//! Which RDMA devices to check: all found ones, filtered by an NCCL_IB_HCA string (comma list
//! of `dev[:port[:...]]`, leading `^` excludes, leading `=` exact names, else prefixes).

use dqplb_config::hca::HcaList;
use dqplb_config::schema::FabricSection;

/// Filters `all` (sorted device names) by `hca` with the site's NCCL_IB_HCA parser (`fabric`
/// says how the third field reads); `None` or a blank string keeps all. A device is kept when
/// any of its ports is selected (every port of it is then read). Parsed leniently, as NCCL does
/// (plugin::init logs the diagnostics once); only a bad `max-rails` is an error.
pub fn select_devices(
    all: Vec<String>,
    hca: Option<&str>,
    fabric: &FabricSection,
) -> Result<Vec<String>, String> {
    let Some(spec) = hca.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(all);
    };
    let (list, _diags) = HcaList::parse_lenient(spec, fabric.hca_third_field, fabric.max_rails)
        .map_err(|e| e.to_string())?;
    Ok(all.into_iter().filter(|d| list.selects_device(d)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(hca: Option<&str>) -> Result<Vec<String>, String> {
        select_devices(devs(), hca, &FabricSection::default())
    }

    fn devs() -> Vec<String> {
        ["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn selects_like_nccl_ib_hca() {
        assert_eq!(sel(None).unwrap(), devs());
        assert_eq!(sel(Some("")).unwrap(), devs());
        assert_eq!(sel(Some("mlx5_1")).unwrap(), vec!["mlx5_1", "mlx5_10"]);
        assert_eq!(sel(Some("=mlx5_1:1")).unwrap(), vec!["mlx5_1"]);
        assert_eq!(sel(Some("^mlx5")).unwrap(), vec!["rxe0"]);
        assert_eq!(
            sel(Some("^=mlx5_1")).unwrap(),
            vec!["mlx5_0", "mlx5_10", "rxe0"]
        );
        assert_eq!(
            sel(Some("mlx5_0:1:0,rxe0")).unwrap(),
            vec!["mlx5_0", "rxe0"]
        );
        // NCCL skips empty entries and reads a bad port as one that matches nothing.
        assert_eq!(sel(Some("mlx5_0,,rxe0,")).unwrap(), vec!["mlx5_0", "rxe0"]);
        assert_eq!(sel(Some("mlx5_0:x,rxe0")).unwrap(), vec!["mlx5_0", "rxe0"]);
        assert_eq!(sel(Some("mlx5_0::0:0")).unwrap(), vec!["mlx5_0"]);
    }
}
