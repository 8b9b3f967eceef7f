//! The one optional libmlx5 entry point path pinning uses, `mlx5dv_modify_qp_udp_sport`, dlopen'ed
//! from libmlx5.so.1 once per process; None where the library or the symbol is absent (non-mlx5).

use super::objects::ibv_qp;
use libc::c_int;
use std::sync::OnceLock;

/// `int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t udp_sport)` (mlx5dv.h): changes
/// the UDP source port of an RC/UC QP in RTS; fails (EOPNOTSUPP) where the device lacks the
/// `rts2rts_qp_udp_sport` capability.
pub type ModifyQpUdpSportFn = unsafe extern "C" fn(qp: *mut ibv_qp, udp_sport: u16) -> c_int;

fn load() -> Option<ModifyQpUdpSportFn> {
    // SAFETY: dlopen of a system library by soname; the handle is never closed, so the pointer
    // taken from it stays valid for the life of the process.
    let handle =
        unsafe { libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: live handle, NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, c"mlx5dv_modify_qp_udp_sport".as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: the symbol is libmlx5's function of this name, whose mlx5dv.h prototype is
    // `ModifyQpUdpSportFn`.
    Some(unsafe { super::library::as_fn(p) })
}

/// Whether RDMA device `name` is driven by mlx5 (`/sys/class/infiniband/<name>/device/driver` is
/// mlx5_core): mlx5dv entry points cast the QP to mlx5's own, so only such QPs may be passed.
pub fn is_mlx5_device(name: &str) -> bool {
    is_mlx5_driver_link(
        std::fs::read_link(format!("/sys/class/infiniband/{name}/device/driver")).ok(),
    )
}

fn is_mlx5_driver_link(link: Option<std::path::PathBuf>) -> bool {
    link.as_deref()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "mlx5_core")
}

/// `mlx5dv_modify_qp_udp_sport` when libmlx5.so.1 has it, looked up once per process.
pub fn modify_qp_udp_sport() -> Option<ModifyQpUdpSportFn> {
    static FN: OnceLock<Option<ModifyQpUdpSportFn>> = OnceLock::new();
    *FN.get_or_init(load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mlx5_core_counts_as_mlx5() {
        let l = |p: &str| Some(std::path::PathBuf::from(p));
        assert!(is_mlx5_driver_link(l("../../../bus/pci/drivers/mlx5_core")));
        assert!(!is_mlx5_driver_link(l("../../../bus/pci/drivers/bnxt_en")));
        assert!(!is_mlx5_driver_link(None));
        // rxe has no device/driver link: never mlx5.
        assert!(!is_mlx5_device("no-such-rdma-device"));
    }
}
