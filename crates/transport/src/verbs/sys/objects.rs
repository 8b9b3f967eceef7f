//! The verbs objects as libibverbs lays them out (ibv_device, ibv_context with its `ops` table,
//! ibv_pd, ibv_cq, ibv_srq, ibv_qp, ibv_mr); only the data-path ops are typed, the rest are opaque.

use super::wr::{ibv_recv_wr, ibv_send_wr, ibv_wc};
use libc::{c_char, c_int, c_void};

/// Length of the name arrays in `ibv_device` (IBV_SYSFS_NAME_MAX).
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// Length of the path arrays in `ibv_device` (IBV_SYSFS_PATH_MAX).
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// A slot of a function-pointer table this transport never calls.
pub(crate) type OpaqueFn = Option<unsafe extern "C" fn()>;

pub(crate) type PollCqFn =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
pub(crate) type PostSendFn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int;
pub(crate) type PostRecvFn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;
pub(crate) type PostSrqRecvFn = unsafe extern "C" fn(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;

#[repr(C)]
pub struct _ibv_device_ops {
    pub _dummy1: OpaqueFn,
    pub _dummy2: OpaqueFn,
}

#[repr(C)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: u32,
    pub transport_type: u32,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct ibv_context_ops`: the inline verbs (ibv_poll_cq, ibv_post_send, ibv_post_recv) call
/// through these slots; the `_compat_*` slots are ABI padding.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: OpaqueFn,
    pub _compat_query_port: OpaqueFn,
    pub _compat_alloc_pd: OpaqueFn,
    pub _compat_dealloc_pd: OpaqueFn,
    pub _compat_reg_mr: OpaqueFn,
    pub _compat_rereg_mr: OpaqueFn,
    pub _compat_dereg_mr: OpaqueFn,
    pub alloc_mw: OpaqueFn,
    pub bind_mw: OpaqueFn,
    pub dealloc_mw: OpaqueFn,
    pub _compat_create_cq: OpaqueFn,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: OpaqueFn,
    pub _compat_cq_event: OpaqueFn,
    pub _compat_resize_cq: OpaqueFn,
    pub _compat_destroy_cq: OpaqueFn,
    pub _compat_create_srq: OpaqueFn,
    pub _compat_modify_srq: OpaqueFn,
    pub _compat_query_srq: OpaqueFn,
    pub _compat_destroy_srq: OpaqueFn,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: OpaqueFn,
    pub _compat_query_qp: OpaqueFn,
    pub _compat_modify_qp: OpaqueFn,
    pub _compat_destroy_qp: OpaqueFn,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: OpaqueFn,
    pub _compat_destroy_ah: OpaqueFn,
    pub _compat_attach_mcast: OpaqueFn,
    pub _compat_detach_mcast: OpaqueFn,
    pub _compat_async_event: OpaqueFn,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    /// `struct ibv_comp_channel *` (never used here).
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq`: a shared receive queue (the receive side's data QPs draw from one).
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}
