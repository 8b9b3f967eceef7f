//! Misuse at the C boundary: every entry point checks the type tag of the comm or request it is
//! handed, so a comm of the wrong kind or a pointer that is not a live request is ncclInvalidArgument.

use std::ffi::c_void;
use std::ptr::null_mut;

use nccl_net_dqplb::ffi::sys::ncclResult_t;
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;

const BAD: ncclResult_t = ncclResult_t::ncclInvalidArgument;
const OK: ncclResult_t = ncclResult_t::ncclSuccess;

fn v() -> &'static nccl_net_dqplb::ffi::sys::ncclNet_v8_t {
    &ncclNetPlugin_v8.0
}

/// A listen comm and the send and receive comms of one connection to it, through the vtable.
unsafe fn comms() -> (*mut c_void, *mut c_void, *mut c_void) {
    let mut handle = [0u8; 128];
    let (mut listen, mut send, mut recv): (*mut c_void, *mut c_void, *mut c_void) =
        (null_mut(), null_mut(), null_mut());
    let mut dev = null_mut();
    // SAFETY: our own vtable, valid pointers, as NCCL calls it.
    unsafe {
        assert_eq!(
            v().listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen),
            OK
        );
        for _ in 0..1_000_000 {
            if send.is_null() {
                let r = v().connect.unwrap()(0, handle.as_mut_ptr().cast(), &mut send, &mut dev);
                assert_eq!(r, OK);
            }
            if recv.is_null() {
                assert_eq!(v().accept.unwrap()(listen, &mut recv, &mut dev), OK);
            }
            if !send.is_null() && !recv.is_null() {
                return (listen, send, recv);
            }
            std::thread::yield_now();
        }
    }
    panic!("connect/accept did not complete");
}

/// One function: init and the comms are process-wide state.
#[test]
fn every_entry_point_refuses_an_object_of_the_wrong_kind() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    // SAFETY: our own vtable. The pointers passed are live objects of this plugin of the wrong
    // kind, or readable memory that is not one: never unmapped memory.
    unsafe {
        assert_eq!(v().init.unwrap()(None), OK);
        let (listen, send, recv) = comms();
        let mut buf = [0u8; 64];
        let mut req: *mut c_void = std::ptr::dangling_mut::<c_void>();
        let mut dev = null_mut();

        // isend on a receive comm and on a listen comm.
        for wrong in [recv, listen] {
            req = std::ptr::dangling_mut::<c_void>();
            let r = v().isend.unwrap()(wrong, buf.as_mut_ptr().cast(), 64, 1, null_mut(), &mut req);
            assert_eq!(r, BAD);
            assert!(req.is_null());
        }
        // irecv on a send comm.
        let mut data: *mut c_void = buf.as_mut_ptr().cast();
        let (mut size, mut tag) = (64i32, 1i32);
        let r = v().irecv.unwrap()(
            send,
            1,
            &mut data,
            &mut size,
            &mut tag,
            null_mut(),
            &mut req,
        );
        assert_eq!((r, req.is_null()), (BAD, true));
        // accept on a send comm and on a receive comm.
        for wrong in [send, recv] {
            let mut out: *mut c_void = std::ptr::dangling_mut::<c_void>();
            assert_eq!(v().accept.unwrap()(wrong, &mut out, &mut dev), BAD);
            assert!(out.is_null());
        }
        // iflush on a send comm.
        let r = v().iflush.unwrap()(send, 1, &mut data, &mut size, null_mut(), &mut req);
        assert_eq!(r, BAD);
        // test() on comms and on memory that is not a request: done written 0, no crash.
        let zeros = [0u64; 8];
        for not_req in [send, recv, listen, zeros.as_ptr() as *mut c_void] {
            let mut done = 7;
            let mut sizes = 0;
            assert_eq!(v().test.unwrap()(not_req, &mut done, &mut sizes), BAD);
            assert_eq!(done, 0);
        }
        // Closing with the wrong entry point is refused and frees nothing.
        assert_eq!(v().closeSend.unwrap()(recv), BAD);
        assert_eq!(v().closeRecv.unwrap()(send), BAD);
        assert_eq!(v().closeListen.unwrap()(send), BAD);
        assert_eq!(v().closeSend.unwrap()(zeros.as_ptr() as *mut c_void), BAD);

        // The comms still work: one message, byte-exact, each request tested to done.
        let mut src: Vec<u8> = (0..64u8).collect();
        let mut dst = [0u8; 64];
        let mut data: *mut c_void = dst.as_mut_ptr().cast();
        let mut rreq: *mut c_void = null_mut();
        while rreq.is_null() {
            let r = v().irecv.unwrap()(
                recv,
                1,
                &mut data,
                &mut size,
                &mut tag,
                null_mut(),
                &mut rreq,
            );
            assert_eq!(r, OK);
        }
        let mut sreq: *mut c_void = null_mut();
        while sreq.is_null() {
            let r = v().isend.unwrap()(send, src.as_mut_ptr().cast(), 64, 1, null_mut(), &mut sreq);
            assert_eq!(r, OK);
        }
        let (mut sd, mut rd) = (0, 0);
        while sd == 0 || rd == 0 {
            let mut n = 0;
            if sd == 0 {
                assert_eq!(v().test.unwrap()(sreq, &mut sd, &mut n), OK);
            }
            if rd == 0 {
                assert_eq!(v().test.unwrap()(rreq, &mut rd, &mut n), OK);
            }
        }
        assert_eq!(&dst[..], &src[..]);
        // A send request handed to isend as a comm is refused too.
        let r = v().isend.unwrap()(sreq, buf.as_mut_ptr().cast(), 64, 1, null_mut(), &mut req);
        assert_eq!(r, BAD);

        assert_eq!(v().closeSend.unwrap()(send), OK);
        assert_eq!(v().closeRecv.unwrap()(recv), OK);
        assert_eq!(v().closeListen.unwrap()(listen), OK);
    }
}
