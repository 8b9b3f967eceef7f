//! GPUDirect paths on rxe0 (run in the Soft-RoCE VM) with host memory standing in for GPU memory:
//! capability detection and the dma-buf probe, regMrDmaBuf, the cache, and iflush's RDMA READ.
#![cfg(feature = "verbs")]

mod verbs_support;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Instant;

use dqplb_transport::regcache::Lookup;
use dqplb_transport::verbs::caps::{DmaBufProbe, PTR_CUDA, PTR_HOST};
use dqplb_transport::verbs::{fork, mrcache, MemSource, VerbsDomain};
use dqplb_transport::UserBuf;
use nccl_net_dqplb::ffi::sys::ncclResult_t;
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;
use nccl_net_dqplb::plugin::{self, RegRequest};
use verbs_support::{
    pattern, plugin_pair, require_device, use_verbs_on_loopback, vm_tuning, DEADLINE,
};

/// rxe0's sent_pkts, fresh: the core caches hardware counters for `lifespan` ms (12 in the VM),
/// so wait past that before reading.
fn sent_pkts(dev: &str) -> u64 {
    let dir = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters");
    let lifespan: u64 = std::fs::read_to_string(format!("{dir}/lifespan"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(10);
    std::thread::sleep(std::time::Duration::from_millis(3 * lifespan + 10));
    let p = format!("{dir}/sent_pkts");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .expect("counter")
}

/// Detection without the test switch, the dma-buf probe and regMrDmaBuf on rxe, the cache
/// through the domain; then (switch on) iflush through the plugin API and through the v8 vtable.
/// One test: the switch and plugin init are process-wide.
#[test]
#[ignore = "needs an RDMA device: scripts/verbs-tests.sh runs it in the Soft-RoCE VM"]
fn gdr_paths_on_rxe() {
    let dev = require_device("gdr_paths_on_rxe");
    let fork = fork::prepare();
    println!("FORK {}: {fork:?}: {}", dev.name, fork.describe());

    // 1. detection as net_ib: no peer-memory client in the VM; rxe cannot register dma-bufs
    std::env::remove_var("DQPLB_TEST_FORCE_GDR");
    let domain = VerbsDomain::open(&dev, dev.ports[0].port, vm_tuning()).expect("open");
    let caps = domain.caps().clone();
    println!("CAPS {}", caps.describe(&dev.name));
    println!(
        "DMABUF_PROBE {}: {:?}",
        dev.name,
        DmaBufProbe::run(domain.pd())
    );
    assert_eq!(
        DmaBufProbe::run(domain.pd()),
        DmaBufProbe::Unsupported {
            errno: libc::EOPNOTSUPP
        },
        "rdma_rxe of Linux 6.1 has no reg_user_mr_dmabuf"
    );
    assert_eq!((caps.cuda, caps.dmabuf, caps.flush), (false, false, false));
    assert_eq!(caps.ptr_support(), PTR_HOST);

    // 2. regMrDmaBuf's verbs call on rxe: iova = the page-aligned address; rxe refuses before it
    // looks at the fd (a memfd here; /dev/udmabuf is absent from the VM kernel, see below)
    let udmabuf = std::path::Path::new("/dev/udmabuf").exists();
    println!("UDMABUF /dev/udmabuf present: {udmabuf}");
    // SAFETY: plain memfd_create with a static name.
    let fd = unsafe { libc::memfd_create(c"dqplb-dmabuf".as_ptr(), 0) };
    assert!(fd >= 0);
    let mut host = vec![0u8; 3 * 4096];
    let addr = (host.as_mut_ptr() as usize + 4095) & !4095;
    // SAFETY: `host` outlives the attempt (which fails anyway).
    let err = unsafe {
        mrcache::register(
            &domain,
            addr + 100,
            5000,
            MemSource::DmaBuf { fd, offset: 0 },
        )
    }
    .unwrap_err()
    .to_string();
    println!("REG_DMABUF {}: {err}", dev.name);
    assert_eq!(
        err,
        format!(
            "ibv_reg_dmabuf_mr of 8192 bytes of dma-buf fd {fd} from offset 0 (iova {addr:#x}) failed on RDMA device {}: Operation not supported (os error 95) (errno 95)",
            dev.name
        )
    );
    assert_eq!(
        domain.reg_cache().stats().entries,
        0,
        "a failed registration is not cached"
    );
    // SAFETY: our fd.
    unsafe { libc::close(fd) };

    // 3. the cache on the device: one registration, sub-ranges hit, released to zero
    // SAFETY: `host` lives until the handles are dropped below.
    let whole = unsafe { mrcache::register(&domain, addr, 8192, MemSource::Pointer) }.unwrap();
    let part = unsafe { mrcache::register(&domain, addr + 4000, 100, MemSource::Pointer) }.unwrap();
    assert_eq!(
        (whole.lookup(), part.lookup()),
        (Lookup::Registered, Lookup::Hit)
    );
    assert_eq!(whole.mr().rkey(), part.mr().rkey());
    assert_eq!((whole.mr().addr(), whole.mr().len()), (addr as u64, 8192));
    drop(part);
    drop(whole);
    let s = domain.reg_cache().stats();
    assert_eq!(
        (s.registrations, s.hits, s.removals, s.entries),
        (1, 1, 1, 0)
    );
    memlock_failure_is_named(&domain);
    drop(domain);

    // 4. the test switch: CUDA advertised, a flush QP per receive comm, iflush READs
    std::env::set_var("DQPLB_TEST_FORCE_GDR", "1");
    use_verbs_on_loopback();
    plugin::init(None).expect("init");
    let props = plugin::properties(0).expect("properties");
    assert_eq!(props.ptr_support, PTR_HOST | PTR_CUDA);
    assert_eq!(props.reg_is_global, 1);
    plugin_flush(&dev.name);
    vtable_flush(&dev.name);
}

/// CAP_IPC_LOCK in this thread's effective set on or off (capabilities are per thread; the
/// permitted set keeps it, so it can come back).
fn ipc_lock_effective(on: bool) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const V3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut h = Header {
        version: V3,
        pid: 0,
    };
    let mut d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset with a v3 header and two data words, for this thread.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        assert!(
            d[0].permitted & (1 << CAP_IPC_LOCK) != 0,
            "the VM runs tests as root"
        );
        if on {
            d[0].effective |= 1 << CAP_IPC_LOCK;
        } else {
            d[0].effective &= !(1 << CAP_IPC_LOCK);
        }
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
    }
}

/// A registration over RLIMIT_MEMLOCK (root's CAP_IPC_LOCK dropped from this thread, the soft
/// limit lowered to 64 KiB): the kernel's pinned-page accounting refuses it with ENOMEM, and the
/// error names the limit with its value.
fn memlock_failure_is_named(domain: &std::sync::Arc<VerbsDomain>) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old), 0);
        let low = libc::rlimit {
            rlim_cur: 65536,
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &low), 0);
    }
    ipc_lock_effective(false);
    let mut big = vec![1u8; (1 << 20) + 4096];
    let addr = (big.as_mut_ptr() as usize + 4095) & !4095;
    // SAFETY: `big` outlives the attempt.
    let r = unsafe { mrcache::register(domain, addr, 1 << 20, MemSource::Pointer) };
    ipc_lock_effective(true);
    // SAFETY: restores the limit read above.
    unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &old), 0) };
    let err = r.unwrap_err().to_string();
    println!("MEMLOCK {}: {err}", domain.name());
    let op = if domain.pd().relaxed_ordering() {
        "ibv_reg_mr_iova2"
    } else {
        "ibv_reg_mr"
    };
    let hard = if old.rlim_max == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        format!("{} bytes", old.rlim_max)
    };
    assert_eq!(
        err,
        format!(
            "{op} of 1048576 bytes at {addr:#x} failed on RDMA device {}: Cannot allocate memory (os error 12) (errno 12); \
             pinned memory is capped by RLIMIT_MEMLOCK = 65536 bytes (hard {hard}): raise it (ulimit -l unlimited, or \
             LimitMEMLOCK=infinity / docker --ulimit memlock=-1)",
            domain.name()
        )
    );
    assert_eq!(domain.reg_cache().stats().entries, 0);
    // with the capability back, the same registration works
    // SAFETY: as above.
    let ok =
        unsafe { mrcache::register(domain, addr, 1 << 20, MemSource::Pointer) }.expect("regMr");
    assert_eq!(ok.mr().len(), 1 << 20);
    drop(ok);
    drop(big);
}

fn plugin_flush(dev: &str) {
    let (mut send, mut recv) = plugin_pair(0);
    let start = Instant::now();
    assert!(recv.flush_enabled());
    let len = 100_000;
    let mut src = pattern(7, len);
    let mut dst = vec![0u8; len];
    let reg = |b: &mut [u8], kind| RegRequest {
        addr: b.as_mut_ptr() as usize,
        len: b.len(),
        kind,
        dmabuf: None,
    };
    let smh = send.reg_mr(reg(&mut src, PTR_HOST)).expect("regMr host");
    // host memory registered as NCCL_PTR_CUDA (allowed by the switch)
    let rmh = recv.reg_mr(reg(&mut dst, PTR_CUDA)).expect("regMr cuda");
    let rreq = recv
        .irecv(&[(UserBuf::from_slice(&mut dst), 1)], &[Some(&rmh)])
        .unwrap()
        .unwrap();
    let mut rd = None;
    let sreq = loop {
        if let Some(r) = send
            .isend(UserBuf::from_slice(&mut src), 1, Some(&smh))
            .unwrap()
        {
            break r;
        }
        if rd.is_none() {
            rd = recv.test(rreq).unwrap();
        }
        assert!(start.elapsed() < DEADLINE);
    };
    let mut sd = None;
    while sd.is_none() || rd.is_none() {
        if sd.is_none() {
            sd = send.test(sreq).unwrap();
        }
        if rd.is_none() {
            rd = recv.test(rreq).unwrap();
        }
        assert!(start.elapsed() < DEADLINE, "transfer timed out");
    }
    assert!(dst == src, "payload");
    let d = dst.as_ptr() as usize;
    // NULL requests: every size 0; a host-memory buffer (no GDR involved)
    assert_eq!(recv.iflush(&[(d, 0, Some(&rmh))]).unwrap(), None);
    assert_eq!(recv.iflush(&[(d, 64, Some(&smh))]).unwrap(), None);
    assert_eq!(recv.flusher().unwrap().counters().reads_posted, 0);
    // the last non-empty buffer of a group: [d+100: 5 bytes, d+200: 0 bytes] reads at d+100
    let slot = recv
        .iflush(&[(d + 100, 5, Some(&rmh)), (d + 200, 0, Some(&rmh))])
        .unwrap()
        .expect("a flush request");
    let mut polls = 0;
    while !recv.test_flush(slot).unwrap() {
        polls += 1;
        assert!(start.elapsed() < DEADLINE, "flush never completed");
    }
    let f = recv.flusher().unwrap();
    println!(
        "FLUSH {dev}: plugin API: {:?} after {polls} empty tests",
        f.counters()
    );
    assert_eq!(
        (f.counters().reads_posted, f.counters().reads_completed),
        (1, 1)
    );
    assert_eq!(
        f.landed_byte().unwrap(),
        src[100],
        "the READ fetched the buffer's byte"
    );
    assert_eq!(f.in_use(), 0);
    // a second test of the same slot is an error naming it
    let err = recv.test_flush(slot).unwrap_err().msg;
    assert!(err.contains(&format!("flush request {slot}")), "{err}");
    // outside the registration
    let err = recv
        .iflush(&[(d + len - 2, 5, Some(&rmh))])
        .unwrap_err()
        .msg;
    assert!(err.contains("lies outside its registration"), "{err}");
}

/// iflush as NCCL calls it (recvProxyProgress, NCCL 2.28.3 src/transport/net.cc): through the v8
/// vtable, its request tested with sizes NULL until done.
fn vtable_flush(dev: &str) {
    let v = &ncclNetPlugin_v8.0;
    let ok = ncclResult_t::ncclSuccess;
    // SAFETY: our own vtable, called with valid pointers as NCCL would.
    unsafe {
        assert_eq!(v.init.unwrap()(None), ok);
        let mut props = std::mem::zeroed();
        assert_eq!(v.getProperties.unwrap()(0, &mut props), ok);
        assert_eq!(
            (props.ptrSupport, props.regIsGlobal),
            (PTR_HOST | PTR_CUDA, 1)
        );
        let mut handle = [0u8; 128];
        let (mut l, mut s, mut r): (*mut c_void, *mut c_void, *mut c_void) =
            (null_mut(), null_mut(), null_mut());
        assert_eq!(v.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut l), ok);
        let start = Instant::now();
        while s.is_null() || r.is_null() {
            if s.is_null() {
                assert_eq!(
                    v.connect.unwrap()(0, handle.as_mut_ptr().cast(), &mut s, null_mut()),
                    ok
                );
            }
            if r.is_null() {
                assert_eq!(v.accept.unwrap()(l, &mut r, null_mut()), ok);
            }
            assert!(start.elapsed() < DEADLINE);
        }
        let len = 1 << 20;
        let mut src = pattern(9, len);
        let mut dst = vec![0u8; len];
        let (mut smh, mut rmh): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        assert_eq!(
            v.regMr.unwrap()(s, src.as_mut_ptr().cast(), len, PTR_CUDA, &mut smh),
            ok
        );
        assert_eq!(
            v.regMr.unwrap()(r, dst.as_mut_ptr().cast(), len, PTR_CUDA, &mut rmh),
            ok
        );
        // an unknown memory type is refused, the handle written NULL
        let mut bad: *mut c_void = std::ptr::NonNull::dangling().as_ptr();
        assert_eq!(
            v.regMr.unwrap()(r, dst.as_mut_ptr().cast(), len, 8, &mut bad),
            ncclResult_t::ncclInvalidArgument
        );
        assert!(bad.is_null());
        let mut data = [dst.as_mut_ptr().cast::<c_void>()];
        let mut sizes = [len as i32];
        let mut tags = [3];
        let mut mhs = [rmh];
        let mut rreq: *mut c_void = null_mut();
        assert_eq!(
            v.irecv.unwrap()(
                r,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut rreq
            ),
            ok
        );
        let mut sreq: *mut c_void = null_mut();
        let mut rdone = 0;
        let mut got = [0i32; 8];
        while sreq.is_null() {
            assert_eq!(
                v.isend.unwrap()(s, src.as_mut_ptr().cast(), len as i32, 3, smh, &mut sreq),
                ok
            );
            // progress the receive until the send is taken (a request is never tested after done)
            if rdone == 0 {
                assert_eq!(v.test.unwrap()(rreq, &mut rdone, got.as_mut_ptr()), ok);
            }
            assert!(start.elapsed() < DEADLINE);
        }
        let mut sdone = 0;
        while sdone == 0 || rdone == 0 {
            if sdone == 0 {
                assert_eq!(v.test.unwrap()(sreq, &mut sdone, null_mut()), ok);
            }
            if rdone == 0 {
                assert_eq!(v.test.unwrap()(rreq, &mut rdone, got.as_mut_ptr()), ok);
            }
            assert!(start.elapsed() < DEADLINE);
        }
        assert_eq!(got[0], len as i32);
        assert!(dst == src);
        let before = sent_pkts(dev);
        let mut freq: *mut c_void = null_mut();
        sizes[0] = got[0];
        assert_eq!(
            v.iflush.unwrap()(
                r,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut freq
            ),
            ok
        );
        assert!(!freq.is_null(), "a GDR receive gets a flush request");
        let mut done = 0;
        let mut tests = 0;
        while done == 0 {
            assert_eq!(v.test.unwrap()(freq, &mut done, null_mut()), ok);
            tests += 1;
            assert!(start.elapsed() < DEADLINE, "flush never completed");
        }
        let after = sent_pkts(dev);
        println!(
            "FLUSH {dev}: vtable: done after {tests} tests, rxe sent_pkts +{}",
            after - before
        );
        // the READ request and its response both leave rxe0 (loopback)
        assert!(after - before >= 2, "sent_pkts {before} -> {after}");
        // an empty receive: NULL request
        sizes[0] = 0;
        let mut freq: *mut c_void = std::ptr::NonNull::dangling().as_ptr();
        assert_eq!(
            v.iflush.unwrap()(
                r,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut freq
            ),
            ok
        );
        assert!(freq.is_null());
        assert_eq!(v.deregMr.unwrap()(s, smh), ok);
        assert_eq!(v.deregMr.unwrap()(r, rmh), ok);
        assert_eq!(v.closeRecv.unwrap()(r), ok);
        assert_eq!(v.closeSend.unwrap()(s), ok);
        assert_eq!(v.closeListen.unwrap()(l), ok);
    }
}
