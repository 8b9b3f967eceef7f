//! The C boundary never lets a panic or error escape: a forced panic becomes ncclInternalError,
//! bad pointers become ncclInvalidArgument, and output pointers are always written.

use std::ffi::c_void;
use std::ptr::{null_mut, NonNull};

use nccl_net_dqplb::ffi::sys::ncclResult_t;
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;

fn v() -> &'static nccl_net_dqplb::ffi::sys::ncclNet_v8_t {
    &ncclNetPlugin_v8.0
}

/// One test function: the panic knob and init are process-wide state.
#[test]
fn guard_contains_panics_errors_and_writes_outputs() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_DEBUG_PANIC", "devices");
    // SAFETY: calling our own vtable with valid pointers, as NCCL would.
    unsafe {
        assert_eq!(v().init.unwrap()(None), ncclResult_t::ncclSuccess);
        let mut n: i32 = 77;
        assert_eq!(
            v().devices.unwrap()(&mut n),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(n, 0, "ndev is written even when the entry point panicked");

        std::env::remove_var("NCCL_DQPLB_DEBUG_PANIC");
        assert_eq!(v().init.unwrap()(None), ncclResult_t::ncclSuccess);
        assert_eq!(v().devices.unwrap()(&mut n), ncclResult_t::ncclSuccess);
        assert_eq!(n, 1, "NCCL_SOCKET_IFNAME=lo gives exactly one device");
        assert_eq!(
            v().devices.unwrap()(null_mut()),
            ncclResult_t::ncclInvalidArgument
        );

        let mut props = std::mem::zeroed();
        assert_eq!(
            v().getProperties.unwrap()(0, &mut props),
            ncclResult_t::ncclSuccess
        );
        assert_eq!(std::ffi::CStr::from_ptr(props.name).to_str().unwrap(), "lo");
        // maxRecvs 8, as NCCL's net_ib (NCCL_NET_IB_MAX_RECVS).
        assert_eq!((props.ptrSupport, props.maxRecvs), (1, 8));
        assert_eq!(
            v().getProperties.unwrap()(5, &mut props),
            ncclResult_t::ncclInvalidArgument
        );

        // A handle that is not ours: connect fails and leaves sendComm NULL.
        let mut handle = [0u8; 128];
        let mut comm: *mut c_void = NonNull::dangling().as_ptr();
        let mut dev_comm = NonNull::dangling().as_ptr();
        let r = v().connect.unwrap()(0, handle.as_mut_ptr().cast(), &mut comm, &mut dev_comm);
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(comm.is_null() && dev_comm.is_null());

        // Listen returns at once with a handle; a connect to it starts and returns NULL or a comm.
        let mut listen: *mut c_void = null_mut();
        assert_eq!(
            v().listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen),
            ncclResult_t::ncclSuccess
        );
        assert!(!listen.is_null());
        assert_eq!(&handle[..4], b"DQPL");

        let mut req: *mut c_void = NonNull::dangling().as_ptr();
        let r = v().isend.unwrap()(null_mut(), null_mut(), 0, 0, null_mut(), &mut req);
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(req.is_null(), "request is written NULL on error");

        // NULL as in net_ib/net_socket: NCCL's net.cc calls irecvConsumed after every consumed
        // receive whenever it is set, and getDeviceMr is for device-offload plugins only.
        assert!(v().getDeviceMr.is_none() && v().irecvConsumed.is_none());
        let mut mh: *mut c_void = NonNull::dangling().as_ptr();
        let r = v().regMrDmaBuf.unwrap()(listen, null_mut(), 0, 4, 0, -1, &mut mh);
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(mh.is_null());
        assert_eq!(v().closeListen.unwrap()(listen), ncclResult_t::ncclSuccess);
    }
}
