//! Calls into a loaded plugin the way NCCL's proxy threads make them: results checked, NULL
//! comms and NULL requests retried, tests issued in posting order with at most 32 in flight.

use super::listen_handle;
use dqplb_test_support::dl::Plugin;
use dqplb_test_support::logger::CLogger;
use dqplb_test_support::nccl::{
    DeviceHandleV8, NetV8, PropertiesV8, HANDLE_BYTES, MAX_REQUESTS, PTR_HOST, SUCCESS,
};
use std::collections::VecDeque;
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

pub(crate) type Ptr = *mut c_void;

/// maxRecvs the plugin reports (net_ib's NCCL_NET_IB_MAX_RECVS).
pub(crate) const MAX_RECVS: usize = 8;

/// A failed call: which call, and the raw ncclResult_t it returned (0 for harness-side failures).
#[derive(Debug)]
pub(crate) struct CallError {
    pub what: String,
    pub rc: c_int,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (ncclResult_t {})", self.what, self.rc)
    }
}

pub(crate) type CallResult<T> = Result<T, CallError>;

fn check(what: impl FnOnce() -> String, rc: c_int) -> CallResult<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(CallError { what: what(), rc })
    }
}

fn timeout(what: String) -> CallError {
    CallError {
        what: format!("timed out: {what}"),
        rc: 0,
    }
}

macro_rules! entry {
    ($net:expr, $f:ident) => {
        $net.$f.ok_or_else(|| CallError {
            what: format!("vtable entry {} is NULL", stringify!($f)),
            rc: 0,
        })?
    };
}

/// The plugin's vtable plus the device chosen after `init_and_check`.
pub(crate) struct Net {
    pub net: &'static NetV8,
    /// Pass NULL for connect/accept's device-handle argument (NCCL may).
    pub null_dev_handles: bool,
}

impl Net {
    pub(crate) fn new(p: &Plugin) -> Net {
        let nulls = std::env::var("DQPLB_HARNESS_NULLS").is_ok_and(|v| v == "1");
        Net {
            net: p.net,
            null_dev_handles: nulls,
        }
    }

    fn devh_arg(&self, slot: &mut *mut DeviceHandleV8) -> *mut *mut DeviceHandleV8 {
        if self.null_dev_handles {
            null_mut()
        } else {
            slot
        }
    }

    /// init(logger), devices(), getProperties() for every device with sanity checks on every
    /// field; returns the device count.
    pub(crate) fn init_and_check(&self, logger: &CLogger) -> CallResult<c_int> {
        let init = entry!(self.net, init);
        // SAFETY: the logger is a live C function of ncclDebugLogger_t's type.
        check(|| "init".into(), unsafe { init(Some(logger.logger)) })?;
        let devices = entry!(self.net, devices);
        let mut ndev: c_int = -1;
        // SAFETY: valid out-pointer.
        check(|| "devices".into(), unsafe { devices(&mut ndev) })?;
        if ndev < 1 {
            return Err(CallError {
                what: format!("devices() reported {ndev} devices"),
                rc: 0,
            });
        }
        for dev in 0..ndev {
            let p = self.properties(dev)?;
            sane_properties(dev, &p)?;
        }
        let gp = entry!(self.net, get_properties);
        let mut p = poisoned_properties();
        // SAFETY: valid out-pointer; the device index is deliberately out of range.
        let rc = unsafe { gp(ndev, &mut p) };
        if rc == SUCCESS {
            return Err(CallError {
                what: format!("getProperties({ndev}) of a missing device succeeded"),
                rc,
            });
        }
        Ok(ndev)
    }

    pub(crate) fn properties(&self, dev: c_int) -> CallResult<PropertiesV8> {
        let gp = entry!(self.net, get_properties);
        let mut p = poisoned_properties();
        // SAFETY: valid out-pointer.
        check(|| format!("getProperties({dev})"), unsafe {
            gp(dev, &mut p)
        })?;
        Ok(p)
    }

    pub(crate) fn listen(&self, dev: c_int) -> CallResult<([u8; HANDLE_BYTES], Ptr)> {
        let f = entry!(self.net, listen);
        let mut handle = [0u8; HANDLE_BYTES];
        let mut comm: Ptr = null_mut();
        // SAFETY: 128-byte handle buffer and out-pointer as the ABI requires.
        check(|| format!("listen({dev})"), unsafe {
            f(dev, handle.as_mut_ptr().cast(), &mut comm)
        })?;
        if comm.is_null() {
            return Err(CallError {
                what: "listen returned success with a NULL listenComm".into(),
                rc: 0,
            });
        }
        listen_handle::parse_handle(&handle).map_err(|e| CallError {
            what: format!("listen handle: {e}"),
            rc: 0,
        })?;
        Ok((handle, comm))
    }

    /// One connect attempt on the (persistent) handle buffer; Ok(None) means "call again".
    pub(crate) fn connect_once(
        &self,
        dev: c_int,
        handle: &mut [u8; HANDLE_BYTES],
    ) -> CallResult<Option<Ptr>> {
        let f = entry!(self.net, connect);
        let mut comm: Ptr = null_mut();
        let mut devh: *mut DeviceHandleV8 = null_mut();
        let devh = self.devh_arg(&mut devh);
        // SAFETY: handle is the 128-byte buffer NCCL keeps across calls.
        check(|| "connect".into(), unsafe {
            f(dev, handle.as_mut_ptr().cast(), &mut comm, devh)
        })?;
        Ok((!comm.is_null()).then_some(comm))
    }

    pub(crate) fn accept_once(&self, listen: Ptr) -> CallResult<Option<Ptr>> {
        let f = entry!(self.net, accept);
        let mut comm: Ptr = null_mut();
        let mut devh: *mut DeviceHandleV8 = null_mut();
        let devh = self.devh_arg(&mut devh);
        // SAFETY: listen comm came from listen().
        check(|| "accept".into(), unsafe { f(listen, &mut comm, devh) })?;
        Ok((!comm.is_null()).then_some(comm))
    }

    pub(crate) fn connect(
        &self,
        dev: c_int,
        handle: &mut [u8; HANDLE_BYTES],
        limit: Duration,
    ) -> CallResult<Ptr> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.connect_once(dev, handle)? {
                return Ok(c);
            }
            if start.elapsed() > limit {
                return Err(timeout(format!("connect still NULL after {limit:?}")));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub(crate) fn accept(&self, listen: Ptr, limit: Duration) -> CallResult<Ptr> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.accept_once(listen)? {
                return Ok(c);
            }
            if start.elapsed() > limit {
                return Err(timeout(format!("accept still NULL after {limit:?}")));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub(crate) fn reg_mr(&self, comm: Ptr, buf: &mut [u8]) -> CallResult<Ptr> {
        let f = entry!(self.net, reg_mr);
        let mut mh: Ptr = null_mut();
        let len = buf.len();
        // SAFETY: buf stays alive until after deregMr and close (callers' duty).
        check(|| format!("regMr({len} bytes)"), unsafe {
            f(comm, buf.as_mut_ptr().cast(), len, PTR_HOST, &mut mh)
        })?;
        Ok(mh)
    }

    pub(crate) fn dereg_mr(&self, comm: Ptr, mh: Ptr) -> CallResult<()> {
        let f = entry!(self.net, dereg_mr);
        // SAFETY: mh came from regMr on comm.
        check(|| "deregMr".into(), unsafe { f(comm, mh) })
    }

    /// # Safety
    /// `data..data+size` must lie in the region registered as `mh` and stay valid until done.
    pub(crate) unsafe fn isend(
        &self,
        comm: Ptr,
        data: *mut u8,
        size: usize,
        tag: c_int,
        mh: Ptr,
    ) -> CallResult<Option<Ptr>> {
        unsafe {
            let f = entry!(self.net, isend);
            let mut req: Ptr = null_mut();
            check(
                || format!("isend({size} bytes)"),
                f(comm, data.cast(), size as c_int, tag, mh, &mut req),
            )?;
            Ok((!req.is_null()).then_some(req))
        }
    }

    /// # Safety
    /// As for `isend`, with `capacity` bytes writable.
    pub(crate) unsafe fn irecv(
        &self,
        comm: Ptr,
        data: *mut u8,
        capacity: usize,
        tag: c_int,
        mh: Ptr,
    ) -> CallResult<Option<Ptr>> {
        unsafe {
            let f = entry!(self.net, irecv);
            let mut data = data as Ptr;
            let mut size = capacity as c_int;
            let mut tag = tag;
            let mut mh = mh;
            let mut req: Ptr = std::ptr::without_provenance_mut(1); // NCCL >= 2.24 pre-sets a hint; the plugin must overwrite it.
            check(
                || format!("irecv({capacity} bytes)"),
                f(comm, 1, &mut data, &mut size, &mut tag, &mut mh, &mut req),
            )?;
            if req == std::ptr::without_provenance_mut(1) {
                return Err(CallError {
                    what: "irecv left *request untouched".into(),
                    rc: 0,
                });
            }
            Ok((!req.is_null()).then_some(req))
        }
    }

    /// A grouped irecv of `bufs.len()` (data, capacity, tag) buffers in region `mh`, as NCCL's
    /// recvProxyProgress posts them; n outside 1..=8 is passed through unchecked.
    ///
    /// # Safety
    /// As for `irecv`, for every buffer.
    pub(crate) unsafe fn irecv_group(
        &self,
        comm: Ptr,
        bufs: &[(*mut u8, usize, c_int)],
        mh: Ptr,
    ) -> CallResult<Option<Ptr>> {
        unsafe {
            let f = entry!(self.net, irecv);
            let n = bufs.len();
            let mut data: Vec<Ptr> = bufs.iter().map(|b| b.0 as Ptr).collect();
            let mut sizes: Vec<c_int> = bufs.iter().map(|b| b.1 as c_int).collect();
            let mut tags: Vec<c_int> = bufs.iter().map(|b| b.2).collect();
            let mut mhs: Vec<Ptr> = vec![mh; n.max(1)];
            data.push(null_mut());
            sizes.push(0);
            tags.push(0);
            let mut req: Ptr = std::ptr::without_provenance_mut(1);
            check(
                || format!("irecv(n = {n})"),
                f(
                    comm,
                    n as c_int,
                    data.as_mut_ptr(),
                    sizes.as_mut_ptr(),
                    tags.as_mut_ptr(),
                    mhs.as_mut_ptr(),
                    &mut req,
                ),
            )?;
            if req == std::ptr::without_provenance_mut(1) {
                return Err(CallError {
                    what: "irecv left *request untouched".into(),
                    rc: 0,
                });
            }
            Ok((!req.is_null()).then_some(req))
        }
    }

    /// test() of a grouped receive of `n` buffers: Ok(Some(sizes)) once done; exactly `n` sizes
    /// must be written (the entries past them are poisoned and checked untouched).
    pub(crate) fn test_group(&self, req: Ptr, n: usize) -> CallResult<Option<Vec<usize>>> {
        let f = entry!(self.net, test);
        let mut done: c_int = 0;
        let mut sizes = [-7 as c_int; MAX_RECVS + 1];
        // SAFETY: req is a live request; sizes has room for more than n entries.
        check(|| format!("test(n = {n})"), unsafe {
            f(req, &mut done, sizes.as_mut_ptr())
        })?;
        let bad = |what: String| Err(CallError { what, rc: 0 });
        match done {
            0 if sizes.iter().all(|s| *s == -7) => Ok(None),
            0 => bad(format!("test wrote sizes {sizes:?} without done")),
            1 if sizes[n..].iter().any(|s| *s != -7) => bad(format!(
                "test of a {n}-buffer receive wrote sizes {sizes:?} past entry {n}"
            )),
            1 if sizes[..n].iter().any(|s| *s < 0) => {
                bad(format!("test done with sizes {:?}", &sizes[..n]))
            }
            1 => Ok(Some(sizes[..n].iter().map(|s| *s as usize).collect())),
            d => bad(format!("test set done={d}")),
        }
    }

    /// test() with a NULL `sizes` argument (allowed by the ABI); Ok(true) when done.
    pub(crate) fn test_without_size(&self, req: Ptr) -> CallResult<bool> {
        let f = entry!(self.net, test);
        let mut done: c_int = 0;
        // SAFETY: req is a live request; sizes may be NULL.
        check(|| "test(sizes=NULL)".into(), unsafe {
            f(req, &mut done, null_mut())
        })?;
        match done {
            0 | 1 => Ok(done == 1),
            d => Err(CallError {
                what: format!("test set done={d}"),
                rc: 0,
            }),
        }
    }

    /// test(); Ok(Some(size)) when done.
    pub(crate) fn test(&self, req: Ptr) -> CallResult<Option<usize>> {
        let f = entry!(self.net, test);
        let mut done: c_int = 0;
        let mut size: c_int = -7;
        // SAFETY: req is a live request from isend/irecv.
        check(|| "test".into(), unsafe { f(req, &mut done, &mut size) })?;
        match done {
            0 => Ok(None),
            1 if size >= 0 => Ok(Some(size as usize)),
            1 => Err(CallError {
                what: format!("test done with size {size}"),
                rc: 0,
            }),
            d => Err(CallError {
                what: format!("test set done={d}"),
                rc: 0,
            }),
        }
    }

    pub(crate) fn close_send(&self, c: Ptr) -> CallResult<()> {
        let f = entry!(self.net, close_send);
        // SAFETY: c came from connect.
        check(|| "closeSend".into(), unsafe { f(c) })
    }
    pub(crate) fn close_recv(&self, c: Ptr) -> CallResult<()> {
        let f = entry!(self.net, close_recv);
        // SAFETY: c came from accept.
        check(|| "closeRecv".into(), unsafe { f(c) })
    }
    pub(crate) fn close_listen(&self, c: Ptr) -> CallResult<()> {
        let f = entry!(self.net, close_listen);
        // SAFETY: c came from listen.
        check(|| "closeListen".into(), unsafe { f(c) })
    }
}

/// A properties block with every field set to a recognisable junk value, so that a field the
/// plugin forgets to write is caught by the sanity checks.
fn poisoned_properties() -> PropertiesV8 {
    PropertiesV8 {
        name: std::ptr::null(),
        pci_path: std::ptr::without_provenance(1),
        guid: 0xdead_beef_dead_beef,
        ptr_support: -1,
        reg_is_global: -1,
        speed: -1,
        port: -1,
        latency: f32::NAN,
        max_comms: -1,
        max_recvs: -1,
        net_device_type: -1,
        net_device_version: -1,
    }
}

fn cstr(p: *const std::os::raw::c_char) -> Option<String> {
    // SAFETY: non-null pointers from getProperties are C strings per the ABI.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn sane_properties(dev: c_int, p: &PropertiesV8) -> CallResult<()> {
    let bad = |what: String| {
        Err(CallError {
            what: format!("getProperties({dev}): {what}"),
            rc: 0,
        })
    };
    match cstr(p.name) {
        Some(n) if !n.is_empty() && n.len() < 256 => {}
        other => return bad(format!("name is {other:?}")),
    }
    if p.pci_path == std::ptr::without_provenance(1) {
        return bad("pciPath left unwritten".into());
    }
    if p.ptr_support & PTR_HOST == 0 || p.ptr_support & !7 != 0 {
        return bad(format!(
            "ptrSupport {:#x} lacks NCCL_PTR_HOST or has unknown bits",
            p.ptr_support
        ));
    }
    if !(0..=1).contains(&p.reg_is_global) {
        return bad(format!("regIsGlobal {}", p.reg_is_global));
    }
    if p.speed <= 0 {
        return bad(format!("speed {} Mbps", p.speed));
    }
    if p.port < 0 {
        return bad(format!("port {}", p.port));
    }
    if !p.latency.is_finite() || p.latency < 0.0 {
        return bad(format!("latency {}", p.latency));
    }
    if p.max_comms <= 0 {
        return bad(format!("maxComms {}", p.max_comms));
    }
    if p.max_recvs != 8 {
        return bad(format!(
            "maxRecvs {} (contract says 8, as net_ib)",
            p.max_recvs
        ));
    }
    if p.net_device_type != 0 || p.net_device_version != 0 {
        return bad(format!(
            "netDeviceType/Version {}/{}",
            p.net_device_type, p.net_device_version
        ));
    }
    Ok(())
}

/// Posts up to `total` operations with at most 32 in flight, retrying NULL requests, testing
/// the oldest request each step (NCCL tests in posting order).
pub(crate) struct Pump {
    total: usize,
    next: usize,
    inflight: VecDeque<(usize, Ptr)>,
    pub window: usize,
    /// Test every other request with sizes=NULL; `done` then gets `usize::MAX` as the size.
    pub null_sizes: bool,
}

impl Pump {
    pub(crate) fn new(total: usize) -> Pump {
        Pump {
            total,
            next: 0,
            inflight: VecDeque::new(),
            window: MAX_REQUESTS,
            null_sizes: false,
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.next == self.total && self.inflight.is_empty()
    }

    /// Index of the oldest unfinished operation.
    pub(crate) fn oldest(&self) -> usize {
        self.inflight.front().map(|x| x.0).unwrap_or(self.next)
    }

    /// One step; returns whether anything progressed.
    pub(crate) fn step(
        &mut self,
        net: &Net,
        mut post: impl FnMut(usize) -> CallResult<Option<Ptr>>,
        mut done: impl FnMut(usize, usize) -> CallResult<()>,
    ) -> CallResult<bool> {
        let mut progressed = false;
        if self.next < self.total && self.inflight.len() < self.window {
            if let Some(r) = post(self.next)? {
                self.inflight.push_back((self.next, r));
                self.next += 1;
                progressed = true;
            }
        }
        if let Some(&(i, r)) = self.inflight.front() {
            let r = if self.null_sizes && i % 2 == 1 {
                net.test_without_size(r).map(|d| d.then_some(usize::MAX))
            } else {
                net.test(r)
            };
            if let Some(size) = r.map_err(|e| CallError {
                what: format!("{} of op {i}", e.what),
                rc: e.rc,
            })? {
                self.inflight.pop_front();
                done(i, size)?;
                progressed = true;
            }
        }
        Ok(progressed)
    }
}

/// Tracks stalls: errors out when nothing progressed for `limit`.
pub(crate) struct Watchdog {
    last: Instant,
    limit: Duration,
}

impl Watchdog {
    pub(crate) fn new(limit: Duration) -> Watchdog {
        Watchdog {
            last: Instant::now(),
            limit,
        }
    }
    pub(crate) fn tick(
        &mut self,
        progressed: bool,
        what: impl FnOnce() -> String,
    ) -> CallResult<()> {
        if progressed {
            self.last = Instant::now();
        } else if self.last.elapsed() > self.limit {
            return Err(timeout(format!(
                "no progress for {:?}: {}",
                self.limit,
                what()
            )));
        } else {
            std::thread::yield_now();
        }
        Ok(())
    }
}
