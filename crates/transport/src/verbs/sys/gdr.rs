//! The optional libibverbs entry points of GPUDirect and fork support (dma-buf registration, fork
//! protection), resolved with dlvsym at the version that introduced each; absent ones stay None.

use super::library::{as_fn, lookup};
use super::objects::{ibv_mr, ibv_pd};
use libc::{c_int, c_void};
use std::ffi::CStr;
use std::sync::OnceLock;

// enum ibv_wr_opcode (verbs.h)
pub const IBV_WR_RDMA_READ: u32 = 4;

// enum ibv_fork_status (verbs.h, rdma-core 35+)
pub const IBV_FORK_DISABLED: u32 = 0;
pub const IBV_FORK_ENABLED: u32 = 1;
pub const IBV_FORK_UNNEEDED: u32 = 2;

/// `ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)`.
pub(crate) type RegDmabufMrFn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr;

/// The optional verbs (each None when this libibverbs predates it).
#[derive(Debug, Clone, Copy)]
pub struct GdrVerbs {
    /// `ibv_reg_dmabuf_mr@IBVERBS_1.12` (rdma-core 34).
    pub reg_dmabuf_mr: Option<RegDmabufMrFn>,
    /// `ibv_fork_init@IBVERBS_1.1`.
    pub fork_init: Option<unsafe extern "C" fn() -> c_int>,
    /// `ibv_is_fork_initialized@IBVERBS_1.13` (rdma-core 35): returns enum ibv_fork_status.
    pub is_fork_initialized: Option<unsafe extern "C" fn() -> u32>,
}

fn load() -> Option<GdrVerbs> {
    // SAFETY: dlopen of the soname the main table already holds open: the same handle, with one
    // more reference that is never dropped, so the pointers below stay valid.
    let handle = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if handle.is_null() {
        return None;
    }
    let find = |name: &'static CStr, version: &'static CStr| -> Option<*mut c_void> {
        lookup(handle, name, version).ok()
    };
    // SAFETY (all three): each symbol is libibverbs' function of that name and version, whose
    // verbs.h prototype is the field's type.
    Some(GdrVerbs {
        reg_dmabuf_mr: find(c"ibv_reg_dmabuf_mr", c"IBVERBS_1.12").map(|p| unsafe { as_fn(p) }),
        fork_init: find(c"ibv_fork_init", c"IBVERBS_1.1").map(|p| unsafe { as_fn(p) }),
        is_fork_initialized: find(c"ibv_is_fork_initialized", c"IBVERBS_1.13")
            .map(|p| unsafe { as_fn(p) }),
    })
}

/// The optional table (None when libibverbs.so.1 cannot be opened), loaded once per process.
pub fn gdr_verbs() -> Option<&'static GdrVerbs> {
    static TABLE: OnceLock<Option<GdrVerbs>> = OnceLock::new();
    TABLE.get_or_init(load).as_ref()
}
