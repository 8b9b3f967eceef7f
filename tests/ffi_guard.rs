//! The C boundary never lets a panic or error escape: a forced panic becomes ncclInternalError,
//! bad pointers become ncclInvalidArgument, and output pointers are always written.

use std::ffi::c_void;
use std::ptr::{null_mut, NonNull};

use nccl_net_dqplb::ffi::sys::ncclResult_t;
use nccl_net_dqplb::ffi::sys::{ncclNetAttr_v11_t, ncclNetCommConfig_v11_t};
use nccl_net_dqplb::ffi::vtable::{
    ncclNetPlugin_v10, ncclNetPlugin_v11, ncclNetPlugin_v12, ncclNetPlugin_v8, ncclNetPlugin_v9,
};

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

        newer_versions();
    }
}

/// v9-v12 adapters: the same guard, their new outputs and arguments.
unsafe fn newer_versions() {
    unsafe {
        let (v9, v10, v11, v12) = (
            &ncclNetPlugin_v9.0,
            &ncclNetPlugin_v10.0,
            &ncclNetPlugin_v11.0,
            &ncclNetPlugin_v12.0,
        );
        assert_eq!(v9.init.unwrap()(None), ncclResult_t::ncclSuccess);
        let mut p9 = std::mem::zeroed::<nccl_net_dqplb::ffi::sys::ncclNetProperties_v9_t>();
        assert_eq!(
            v9.getProperties.unwrap()(0, &mut p9),
            ncclResult_t::ncclSuccess
        );
        assert_eq!(
            (p9.vProps.ndevs, p9.vProps.devs[0], p9.forceFlush),
            (1, 0, 0)
        );
        assert!(p9.maxP2pBytes > 0 && p9.maxP2pBytes <= 1 << 40);
        assert!(p9.maxCollBytes > 0 && p9.maxCollBytes <= 1 << 40);
        // A failed getProperties zeroes the struct.
        assert_eq!(
            v9.getProperties.unwrap()(9, &mut p9),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!((p9.vProps.ndevs, p9.maxP2pBytes), (0, 0));

        // size_t sizes beyond what test() can report are refused, and *request written.
        let mut req: *mut c_void = NonNull::dangling().as_ptr();
        let big = 1usize << 33;
        let r = v9.isend.unwrap()(
            NonNull::dangling().as_ptr(),
            NonNull::dangling().as_ptr(),
            big,
            0,
            null_mut(),
            &mut req,
        );
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(req.is_null());
        // The NCCL_NET_OPTIONAL_RECV_COMPLETION hint: *request == 0x1 on entry is always overwritten.
        let mut req =
            nccl_net_dqplb::ffi::sys::NCCL_NET_OPTIONAL_RECV_COMPLETION as usize as *mut c_void;
        let r = v9.irecv.unwrap()(
            null_mut(),
            1,
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            &mut req,
        );
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(req.is_null(), "the 0x1 hint is overwritten");

        // v10: init with a profiler callback, connect with a traffic class (bad handle: error, NULL).
        unsafe extern "C" fn prof(
            _e: *mut *mut c_void,
            _t: i32,
            _p: *mut c_void,
            _id: i64,
            _x: *mut c_void,
        ) -> ncclResult_t {
            ncclResult_t::ncclSuccess
        }
        assert_eq!(
            v10.init.unwrap()(None, Some(prof)),
            ncclResult_t::ncclSuccess
        );
        assert!(nccl_net_dqplb::ffi::vtable::profiler_registered());
        let mut cfg = ncclNetCommConfig_v11_t { trafficClass: 0x48 };
        let mut handle = [0u8; 128];
        let mut comm: *mut c_void = NonNull::dangling().as_ptr();
        let mut dev_comm = NonNull::dangling().as_ptr();
        let r = v10.connect.unwrap()(
            0,
            &mut cfg,
            handle.as_mut_ptr().cast(),
            &mut comm,
            &mut dev_comm,
        );
        assert_eq!(r, ncclResult_t::ncclInvalidArgument);
        assert!(comm.is_null() && dev_comm.is_null());

        // v11: a panicking init writes ctx NULL; then init, setNetAttr, finalize.
        std::env::set_var("NCCL_DQPLB_DEBUG_PANIC", "init");
        let mut ctx: *mut c_void = NonNull::dangling().as_ptr();
        let r = v11.init.unwrap()(&mut ctx, 7, &mut cfg, None, None);
        assert_eq!(r, ncclResult_t::ncclInternalError);
        assert!(ctx.is_null());
        std::env::remove_var("NCCL_DQPLB_DEBUG_PANIC");
        let before = nccl_net_dqplb::plugin::state::live_contexts();
        assert_eq!(
            v11.init.unwrap()(&mut ctx, 7, &mut cfg, None, None),
            ncclResult_t::ncclSuccess
        );
        assert!(!ctx.is_null());
        assert_eq!(nccl_net_dqplb::plugin::state::live_contexts(), before + 1);
        let mut attr = std::mem::zeroed::<ncclNetAttr_v11_t>();
        attr.sendCommAttr.maxConcurrentPeers = 8;
        attr.op = 2;
        assert_eq!(
            v11.setNetAttr.unwrap()(ctx, &mut attr),
            ncclResult_t::ncclSuccess
        );
        let c = &*(ctx as *const nccl_net_dqplb::plugin::CommContext);
        let got = c.net_attr().unwrap();
        assert_eq!(
            (got.send.max_concurrent_peers, got.op, c.traffic_class),
            (8, 2, Some(0x48))
        );
        assert_eq!(
            v11.setNetAttr.unwrap()(ctx, null_mut()),
            ncclResult_t::ncclInvalidArgument
        );
        let mut listen: *mut c_void = null_mut();
        assert_eq!(
            v11.listen.unwrap()(ctx, 0, handle.as_mut_ptr().cast(), &mut listen),
            ncclResult_t::ncclSuccess
        );
        // A connect through the context that has not finished yet is dropped by finalize, with its
        // sockets (on loopback the kernel may complete every stream at once: then it is a comm).
        let pending = nccl_net_dqplb::plugin::pending_connects();
        let mut comm: *mut c_void = NonNull::dangling().as_ptr();
        let r = v11.connect.unwrap()(ctx, 0, handle.as_mut_ptr().cast(), &mut comm, null_mut());
        assert_eq!(r, ncclResult_t::ncclSuccess);
        if comm.is_null() {
            assert_eq!(nccl_net_dqplb::plugin::pending_connects(), pending + 1);
        } else {
            assert_eq!(v11.closeSend.unwrap()(comm), ncclResult_t::ncclSuccess);
        }
        assert_eq!(v11.closeListen.unwrap()(listen), ncclResult_t::ncclSuccess);
        assert_eq!(v11.finalize.unwrap()(ctx), ncclResult_t::ncclSuccess);
        assert_eq!(nccl_net_dqplb::plugin::pending_connects(), pending);
        assert_eq!(nccl_net_dqplb::plugin::state::live_contexts(), before);
        assert_eq!(
            v11.finalize.unwrap()(null_mut()),
            ncclResult_t::ncclInvalidArgument
        );

        // v12: rail/plane unknown without NCCL_IB_HCA.
        let mut ctx: *mut c_void = null_mut();
        assert_eq!(
            v12.init.unwrap()(&mut ctx, 8, null_mut(), None, None),
            ncclResult_t::ncclSuccess
        );
        let mut p12 = std::mem::zeroed::<nccl_net_dqplb::ffi::sys::ncclNetProperties_v12_t>();
        assert_eq!(
            v12.getProperties.unwrap()(0, &mut p12),
            ncclResult_t::ncclSuccess
        );
        assert_eq!(
            (p12.railId, p12.planeId, p12.maxMultiRequestSize),
            (-1, -1, 1)
        );
        assert_eq!((p12.vProps.ndevs, p12.vProps.devs[0]), (1, 0));
        assert_eq!(v12.finalize.unwrap()(ctx), ncclResult_t::ncclSuccess);
    }
}
