//! Which RDMA devices to check: all found ones, filtered by an NCCL_IB_HCA-style string
//! (comma list of `dev[:port...]`, leading `^` excludes, leading `=` exact names, else prefixes).

/// Filters `all` (sorted device names) by `hca`; `None` or an empty string keeps all. Port and
/// later `:` fields are ignored (every port of a device is read). Errors name the bad entry.
pub fn select_devices(all: Vec<String>, hca: Option<&str>) -> Result<Vec<String>, String> {
    let Some(spec) = hca.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(all);
    };
    let (exclude, rest) = match spec.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let mut names = Vec::new();
    for entry in rest.split(',') {
        let entry = entry.trim();
        let name = entry.split(':').next().unwrap_or("").trim();
        if name.is_empty() {
            return Err(format!(
                "HCA list \"{spec}\": empty device name in entry \"{entry}\""
            ));
        }
        if name.contains(['^', '=', ' ', '/']) {
            return Err(format!("HCA list \"{spec}\": bad device name \"{name}\""));
        }
        names.push(name.to_string());
    }
    let matches = |dev: &str| {
        names.iter().any(|n| {
            if exact {
                dev == n
            } else {
                dev.starts_with(n.as_str())
            }
        })
    };
    Ok(all.into_iter().filter(|d| matches(d) != exclude).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devs() -> Vec<String> {
        ["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn selects_like_nccl_ib_hca() {
        assert_eq!(select_devices(devs(), None).unwrap(), devs());
        assert_eq!(select_devices(devs(), Some("")).unwrap(), devs());
        assert_eq!(
            select_devices(devs(), Some("mlx5_1")).unwrap(),
            vec!["mlx5_1", "mlx5_10"]
        );
        assert_eq!(
            select_devices(devs(), Some("=mlx5_1:1")).unwrap(),
            vec!["mlx5_1"]
        );
        assert_eq!(select_devices(devs(), Some("^mlx5")).unwrap(), vec!["rxe0"]);
        assert_eq!(
            select_devices(devs(), Some("^=mlx5_1")).unwrap(),
            vec!["mlx5_0", "mlx5_10", "rxe0"]
        );
        assert_eq!(
            select_devices(devs(), Some("mlx5_0:1:0,rxe0")).unwrap(),
            vec!["mlx5_0", "rxe0"]
        );
        assert!(select_devices(devs(), Some("mlx5_0,,rxe0"))
            .unwrap_err()
            .contains("empty"));
        assert!(select_devices(devs(), Some(":1")).is_err());
    }
}
