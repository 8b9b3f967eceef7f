//! The shipped library driven through dlopen, as NCCL loads it: no thread of it outlives the last
//! close or a dlclose, and a panic forced into each of the 16 v8 entry points comes back as
//! ncclInternalError with its outputs written.
//!
//! CI runs this against target/release/libnccl-net-dqplb.so (DQPLB_PLUGIN_SO, scripts/test.sh
//! "release artifact" step); plain `cargo test` uses the cdylib built next to this executable.

use dqplb_test_support::dl::{plugin_path, Plugin};
use dqplb_test_support::nccl::{
    DeviceHandleV8, NetV8, PropertiesV8, INTERNAL_ERROR, PTR_HOST, SUCCESS,
};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// The library, dlopen'ed with NCCL's flags, and its ncclNetPlugin_v8.
fn open() -> Plugin {
    Plugin::load(&plugin_path()).unwrap_or_else(|e| panic!("{e}"))
}

fn close(lib: Plugin) {
    lib.lib.close().unwrap_or_else(|e| panic!("{e}"));
}

/// A connected pair on device 0 (loopback) plus registrations, made in one thread as NCCL's GDR
/// probe does (listen, then connect/accept until both are up).
struct Pair {
    listen: *mut c_void,
    send: *mut c_void,
    recv: *mut c_void,
}

unsafe fn connect_pair(n: &NetV8) -> Pair {
    let mut handle = [0u8; 128];
    let mut listen = null_mut();
    // SAFETY: (whole fn) pointers to live locals, comms from this plugin; NCCL's calling pattern.
    unsafe {
        assert_eq!(
            n.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen),
            SUCCESS
        );
        let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let (mut dev_s, mut dev_r) = (null_mut(), null_mut());
        let t0 = Instant::now();
        while send.is_null() || recv.is_null() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "connect/accept hung"
            );
            if send.is_null() {
                assert_eq!(
                    n.connect.unwrap()(0, handle.as_mut_ptr().cast(), &mut send, &mut dev_s),
                    SUCCESS
                );
            }
            if recv.is_null() {
                assert_eq!(n.accept.unwrap()(listen, &mut recv, &mut dev_r), SUCCESS);
            }
        }
        Pair { listen, send, recv }
    }
}

/// One message of `len` bytes from `p.send` to `p.recv`, byte-exact.
unsafe fn transfer(n: &NetV8, p: &Pair, len: usize) {
    let src: Vec<u8> = (0..len).map(|i| (i * 131 + i / 4096) as u8).collect();
    let mut dst = vec![0u8; len];
    // SAFETY: (whole fn) buffers outlive the requests, which are tested to completion.
    unsafe {
        let (mut mh_s, mut mh_r) = (null_mut(), null_mut());
        assert_eq!(
            n.reg_mr.unwrap()(
                p.send,
                src.as_ptr() as *mut c_void,
                len,
                PTR_HOST,
                &mut mh_s
            ),
            SUCCESS
        );
        assert_eq!(
            n.reg_mr.unwrap()(p.recv, dst.as_mut_ptr().cast(), len, PTR_HOST, &mut mh_r),
            SUCCESS
        );
        let (mut sreq, mut rreq): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let mut data = dst.as_mut_ptr().cast::<c_void>();
        let (mut size, mut tag) = (len as c_int, 7);
        let t0 = Instant::now();
        while rreq.is_null() {
            assert!(t0.elapsed() < Duration::from_secs(30), "irecv never posted");
            assert_eq!(
                n.irecv.unwrap()(p.recv, 1, &mut data, &mut size, &mut tag, &mut mh_r, &mut rreq),
                SUCCESS
            );
        }
        while sreq.is_null() {
            assert!(t0.elapsed() < Duration::from_secs(30), "isend never posted");
            assert_eq!(
                n.isend.unwrap()(
                    p.send,
                    src.as_ptr() as *mut c_void,
                    len as c_int,
                    7,
                    mh_s,
                    &mut sreq
                ),
                SUCCESS
            );
        }
        let (mut sdone, mut rdone, mut got) = (0, 0, -1);
        while sdone == 0 || rdone == 0 {
            assert!(t0.elapsed() < Duration::from_secs(60), "transfer hung");
            if sdone == 0 {
                assert_eq!(n.test.unwrap()(sreq, &mut sdone, null_mut()), SUCCESS);
            }
            if rdone == 0 {
                assert_eq!(n.test.unwrap()(rreq, &mut rdone, &mut got), SUCCESS);
            }
        }
        assert_eq!(got, len as c_int);
        assert!(dst == src, "received bytes differ");
        assert_eq!(n.dereg_mr.unwrap()(p.send, mh_s), SUCCESS);
        assert_eq!(n.dereg_mr.unwrap()(p.recv, mh_r), SUCCESS);
    }
}

unsafe fn close_pair(n: &NetV8, p: Pair) {
    // SAFETY: comms from this plugin, each closed once.
    unsafe {
        assert_eq!(n.close_send.unwrap()(p.send), SUCCESS);
        assert_eq!(n.close_recv.unwrap()(p.recv), SUCCESS);
        assert_eq!(n.close_listen.unwrap()(p.listen), SUCCESS);
    }
}

fn setup_env() {
    std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
    std::env::set_var("NCCL_DQPLB_TRANSPORT", "tcp");
    // Two TCP helper threads per comm over four streams: they start with the first segment of
    // at least 64 KiB and must be joined by the close like every other plugin thread.
    std::env::set_var("NCCL_SOCKET_NTHREADS", "2");
    std::env::set_var("NCCL_DQPLB_QPS", "4");
    std::env::remove_var("NCCL_DQPLB_DEBUG_PANIC");
}

/// One test function: env knobs and the dlopen'ed library are process-wide.
#[test]
fn no_thread_outlives_close_and_every_entry_contains_panics() {
    setup_env();
    let before = threads();
    for cycle in 0..2 {
        let lib = open();
        let n = lib.net;
        // SAFETY: NCCL's call sequence on this plugin's vtable.
        unsafe {
            assert_eq!(n.init.unwrap()(None), SUCCESS);
            let mut ndev = 0;
            assert_eq!(n.devices.unwrap()(&mut ndev), SUCCESS);
            assert!(ndev >= 1);
            let p = connect_pair(n);
            let idle = threads();
            transfer(n, &p, 3);
            assert_eq!(
                threads(),
                idle,
                "cycle {cycle}: a thread for a 3-byte message"
            );
            transfer(n, &p, 1 << 20);
            assert_eq!(
                threads(),
                idle + 4,
                "cycle {cycle}: two helper threads per comm after a 1 MiB message"
            );
            transfer(n, &p, 3);
            close_pair(n, p);
        }
        assert_eq!(
            threads(),
            before,
            "cycle {cycle}: a plugin thread is alive after the last close"
        );
        close(lib);
        assert_eq!(threads(), before, "cycle {cycle}: a thread after dlclose");
    }

    // Panic containment: NCCL_DQPLB_DEBUG_PANIC=<entry> (read at init) makes that entry panic;
    // the guard must turn it into ncclInternalError and leave the plugin usable.
    let lib = open();
    let n = lib.net;
    // SAFETY: as above; every call gets valid pointers.
    unsafe {
        assert_eq!(n.init.unwrap()(None), SUCCESS);
        let p = connect_pair(n);
        let arm = |entry: &str| {
            std::env::set_var("NCCL_DQPLB_DEBUG_PANIC", entry);
            let rc = n.init.unwrap()(None);
            assert_eq!(
                rc == INTERNAL_ERROR,
                entry == "init",
                "init with {entry} armed"
            );
        };
        let mut checked = Vec::new();
        let mut expect = |entry: &str, rc: c_int| {
            assert_eq!(rc, INTERNAL_ERROR, "{entry}: a panic came back as {rc}");
            checked.push(entry.to_string());
        };
        arm("init");
        expect("init", n.init.unwrap()(None));
        arm("devices");
        let mut ndev = 9;
        expect("devices", n.devices.unwrap()(&mut ndev));
        assert_eq!(ndev, 0, "devices writes its output even after a panic");
        arm("getProperties");
        let mut props: PropertiesV8 = std::mem::zeroed();
        expect("getProperties", n.get_properties.unwrap()(0, &mut props));
        arm("listen");
        let mut h = [0u8; 128];
        let mut l = std::ptr::dangling_mut::<c_void>();
        expect(
            "listen",
            n.listen.unwrap()(0, h.as_mut_ptr().cast(), &mut l),
        );
        assert!(l.is_null(), "listen writes NULL after a panic");
        arm("connect");
        let (mut s, mut d) = (
            std::ptr::dangling_mut::<c_void>(),
            std::ptr::dangling_mut::<DeviceHandleV8>(),
        );
        expect(
            "connect",
            n.connect.unwrap()(0, h.as_mut_ptr().cast(), &mut s, &mut d),
        );
        assert!(s.is_null() && d.is_null(), "connect writes both outputs");
        arm("accept");
        let mut r = std::ptr::dangling_mut::<c_void>();
        d = std::ptr::dangling_mut::<DeviceHandleV8>();
        expect("accept", n.accept.unwrap()(p.listen, &mut r, &mut d));
        assert!(r.is_null() && d.is_null(), "accept writes both outputs");
        let mut buf = vec![0u8; 4096];
        arm("regMr");
        let mut mh = std::ptr::dangling_mut::<c_void>();
        expect(
            "regMr",
            n.reg_mr.unwrap()(p.send, buf.as_mut_ptr().cast(), 4096, PTR_HOST, &mut mh),
        );
        assert!(mh.is_null());
        arm("none");
        assert_eq!(
            n.reg_mr.unwrap()(p.send, buf.as_mut_ptr().cast(), 4096, PTR_HOST, &mut mh),
            SUCCESS
        );
        arm("deregMr");
        expect("deregMr", n.dereg_mr.unwrap()(p.send, mh));
        arm("regMrDmaBuf");
        let mut dmh = std::ptr::dangling_mut::<c_void>();
        expect(
            "regMrDmaBuf",
            n.reg_mr_dma_buf.unwrap()(p.send, buf.as_mut_ptr().cast(), 4096, 4, 0, -1, &mut dmh),
        );
        assert!(dmh.is_null(), "regMrDmaBuf writes NULL after a panic");
        arm("isend");
        let mut req = std::ptr::dangling_mut::<c_void>();
        expect(
            "isend",
            n.isend.unwrap()(p.send, buf.as_mut_ptr().cast(), 8, 1, null_mut(), &mut req),
        );
        assert!(req.is_null());
        arm("irecv");
        let mut data = buf.as_mut_ptr().cast::<c_void>();
        let (mut size, mut tag) = (8, 1);
        let mut mhs = null_mut();
        expect(
            "irecv",
            n.irecv.unwrap()(
                p.recv, 1, &mut data, &mut size, &mut tag, &mut mhs, &mut req,
            ),
        );
        assert!(req.is_null());
        // test() needs a live request: post one unarmed, then arm test.
        arm("none");
        req = null_mut();
        while req.is_null() {
            assert_eq!(
                n.irecv.unwrap()(p.recv, 1, &mut data, &mut size, &mut tag, &mut mhs, &mut req),
                SUCCESS
            );
        }
        arm("test");
        let mut done = 5;
        expect("test", n.test.unwrap()(req, &mut done, null_mut()));
        assert_eq!(done, 0, "test writes done = 0 after a panic");
        arm("iflush");
        let mut freq = std::ptr::dangling_mut::<c_void>();
        expect(
            "iflush",
            n.iflush.unwrap()(p.recv, 1, &mut data, &mut size, &mut mhs, &mut freq),
        );
        assert!(freq.is_null(), "iflush writes NULL after a panic");
        arm("none");
        // Still usable after all of that.
        std::env::remove_var("NCCL_DQPLB_DEBUG_PANIC");
        assert_eq!(n.init.unwrap()(None), SUCCESS);
        let fresh = connect_pair(n);
        transfer(n, &fresh, 100_000);
        close_pair(n, fresh);
        // The closes, each armed: the comm is freed, then the forced panic comes back as 3.
        arm("closeSend");
        expect("closeSend", n.close_send.unwrap()(p.send));
        arm("closeRecv");
        expect("closeRecv", n.close_recv.unwrap()(p.recv));
        arm("closeListen");
        expect("closeListen", n.close_listen.unwrap()(p.listen));
        std::env::remove_var("NCCL_DQPLB_DEBUG_PANIC");
        assert_eq!(n.init.unwrap()(None), SUCCESS);
        assert_eq!(
            checked,
            [
                "init",
                "devices",
                "getProperties",
                "listen",
                "connect",
                "accept",
                "regMr",
                "deregMr",
                "regMrDmaBuf",
                "isend",
                "irecv",
                "test",
                "iflush",
                "closeSend",
                "closeRecv",
                "closeListen"
            ]
        );
    }
    close(lib);
    assert_eq!(threads(), before, "a thread after the panic cycle");
}
