//! `dqplb perf`'s calls into the plugin, made through the in-crate exported vtable
//! (`ffi::vtable::ncclNetPlugin_v8`) or a `--plugin` .so's, exactly as NCCL would, plus the
//! logger handed to init().

use nccl_net_dqplb::ffi::sys::{
    ncclDebugLogger_t, ncclNetDeviceHandle_v8_t, ncclNetProperties_v8_t, ncclNet_v8_t,
    ncclResult_t, NCCL_PTR_HOST,
};
use nccl_net_dqplb::ffi::vtable::ncclNetPlugin_v8;
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::path::Path;
use std::ptr::null_mut;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) type Ptr = *mut c_void;
pub(crate) const HANDLE_BYTES: usize = 128;

/// A failed plugin call: the call and the ncclResult_t it returned.
#[derive(Debug)]
pub(crate) struct NetErr(pub String);

impl std::fmt::Display for NetErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) type NetRes<T> = Result<T, NetErr>;

/// The `--plugin` .so's vtable once `use_plugin` loaded it; otherwise the in-crate one is used.
static PEER: OnceLock<PeerVtable> = OnceLock::new();

struct PeerVtable(&'static ncclNet_v8_t);

// SAFETY: the vtable is immutable static data of a library that is never unloaded (its raw
// `name` pointer is only read); NCCL calls its functions from several threads as well.
unsafe impl Sync for PeerVtable {}
unsafe impl Send for PeerVtable {}

fn vt() -> &'static ncclNet_v8_t {
    PEER.get().map_or(&ncclNetPlugin_v8.0, |p| p.0)
}

/// From now on every call goes to the `ncclNetPlugin_v8` of the plugin at `path` (dlopened as
/// NCCL does); returns the vtable's `name`.
pub(crate) fn use_plugin(path: &Path) -> NetRes<String> {
    let v = super::dl::open_v8(path).map_err(NetErr)?;
    let v = PEER.get_or_init(|| PeerVtable(v)).0;
    Ok(super::dl::name_of(v))
}

fn check(what: &str, rc: ncclResult_t) -> NetRes<()> {
    if rc == ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(NetErr(format!("plugin {what} returned {rc:?}")))
    }
}

macro_rules! f {
    ($name:ident) => {
        vt().$name
            .ok_or_else(|| NetErr(format!("vtable entry {} is NULL", stringify!($name))))?
    };
}

/// The plugin's INFO line describing the connection it set up (QPs, outstanding, segment).
static CONN_LINE: Mutex<Option<String>> = Mutex::new(None);
/// The verbs comm's "... op counts: k=v ..." line logged at close, if any.
static OPS_LINE: Mutex<Option<String>> = Mutex::new(None);

/// NCCL's logger type is C-variadic, which stable Rust cannot define. The plugin only ever calls
/// it as `(level, flags, file, line, "%s", msg)`: on the x86_64 SysV and AArch64 Linux ABIs a
/// variadic call passes those six integer/pointer arguments in the same registers as a
/// non-variadic call, so this six-argument function receives them correctly.
unsafe extern "C" fn perf_logger(
    level: c_int,
    _flags: c_ulong,
    _file: *const c_char,
    _line: c_int,
    fmt: *const c_char,
    arg: *const c_char,
) {
    if fmt.is_null() {
        return;
    }
    // SAFETY: fmt is a C string; with fmt "%s" the next argument is one too.
    let fmt = unsafe { CStr::from_ptr(fmt) };
    if fmt.to_bytes() != b"%s" || arg.is_null() {
        // Another plugin's own format: its arguments cannot be read here, so a warning is
        // shown as its format string.
        if level <= 2 {
            eprintln!(
                "dqplb perf: plugin warning (unformatted): {}",
                fmt.to_string_lossy().trim_end()
            );
        }
        return;
    }
    let msg = unsafe { CStr::from_ptr(arg) }.to_string_lossy();
    if let Some(at) = msg.find("op counts: ") {
        if let Ok(mut g) = OPS_LINE.lock() {
            *g = Some(msg[at + "op counts: ".len()..].to_string());
        }
    }
    if msg.contains("data QPs") {
        if let Ok(mut g) = CONN_LINE.lock() {
            *g = Some(msg.to_string());
        }
    }
    if level <= 2 {
        eprintln!("dqplb perf: plugin: {msg}");
    }
}

/// The connection line the plugin logged at connect, if any.
pub(crate) fn conn_line() -> Option<String> {
    CONN_LINE.lock().ok().and_then(|g| g.clone())
}

/// The `k=v` op counts the verbs comm logged when it closed (None on TCP or before close).
pub(crate) fn ops_line() -> Option<String> {
    OPS_LINE.lock().ok().and_then(|g| g.clone())
}

/// `ops` (`k=v` words) divided by `messages`, as "k=v.vv ..." (None if nothing parses).
pub(crate) fn per_message(ops: &str, messages: u64) -> Option<String> {
    let words: Vec<String> = ops
        .split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            Some(format!("{k}={:.2}", v as f64 / messages.max(1) as f64))
        })
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// init() with the perf logger; devices(); returns the device count.
pub(crate) fn init() -> NetRes<i32> {
    // SAFETY: perf_logger is ABI-compatible with the logger for the plugin's "%s" calls (above).
    let logger: ncclDebugLogger_t = unsafe {
        std::mem::transmute::<
            Option<
                unsafe extern "C" fn(
                    c_int,
                    c_ulong,
                    *const c_char,
                    c_int,
                    *const c_char,
                    *const c_char,
                ),
            >,
            ncclDebugLogger_t,
        >(Some(perf_logger))
    };
    // SAFETY: plain calls into the plugin with valid pointers.
    unsafe {
        check("init", f!(init)(logger))?;
        let mut n: c_int = 0;
        check("devices", f!(devices)(&mut n))?;
        if n < 1 {
            return Err(NetErr(
                "plugin reports no devices (is NCCL_SOCKET_IFNAME=lo usable?)".into(),
            ));
        }
        Ok(n)
    }
}

/// The device a run uses: the one named `want`, or device 0; returns (index, name). Fails if
/// no device has that name (listing the names) or if the device cannot take host buffers.
pub(crate) fn pick_device(devices: i32, want: Option<&str>) -> NetRes<(i32, String)> {
    pick_device_in(vt(), devices, want)
}

/// `pick_device` over the vtable `v`.
fn pick_device_in(v: &ncclNet_v8_t, devices: i32, want: Option<&str>) -> NetRes<(i32, String)> {
    let get = v
        .getProperties
        .ok_or_else(|| NetErr("vtable entry getProperties is NULL".into()))?;
    let mut names = Vec::new();
    for d in 0..devices {
        // SAFETY: all-zero is a valid ncclNetProperties_v8_t (NULL pointers, zero numbers).
        let mut p: ncclNetProperties_v8_t = unsafe { std::mem::zeroed() };
        // SAFETY: d is below the device count; p is writable.
        check("getProperties", unsafe { get(d, &mut p) })?;
        let name = if p.name.is_null() {
            String::new()
        } else {
            // SAFETY: the plugin's device name, a C string.
            unsafe { CStr::from_ptr(p.name) }
                .to_string_lossy()
                .into_owned()
        };
        if want.map_or(d == 0, |w| w == name) {
            if p.ptrSupport & NCCL_PTR_HOST as c_int == 0 {
                return Err(NetErr(format!(
                    "device {d} ({name}) does not support host buffers (NCCL_PTR_HOST missing from ptrSupport {:#x}); dqplb perf registers host memory only",
                    p.ptrSupport
                )));
            }
            return Ok((d, name));
        }
        names.push(name);
    }
    Err(NetErr(format!(
        "--plugin-dev {}: no such device; the plugin's devices are: {}",
        want.unwrap_or(""),
        names.join(", ")
    )))
}

pub(crate) fn listen(dev: i32) -> NetRes<([u8; HANDLE_BYTES], Ptr)> {
    let mut h = [0u8; HANDLE_BYTES];
    let mut c: Ptr = null_mut();
    // SAFETY: 128-byte handle and an out-pointer.
    check("listen", unsafe {
        f!(listen)(dev, h.as_mut_ptr().cast(), &mut c)
    })?;
    Ok((h, c))
}

/// Connect and accept on one thread, as NCCL's service thread does: call both until each
/// returns a comm. `listen` / `handle` may be absent for one-sided setups.
pub(super) fn establish(
    dev: i32,
    handle: Option<&mut [u8; HANDLE_BYTES]>,
    listen: Option<Ptr>,
    limit: Duration,
) -> NetRes<(Ptr, Ptr)> {
    let (mut sc, mut rc): (Ptr, Ptr) = (null_mut(), null_mut());
    let mut dh: *mut ncclNetDeviceHandle_v8_t = null_mut();
    let want_send = handle.is_some();
    let mut handle = handle;
    let start = Instant::now();
    loop {
        if let Some(h) = handle.as_deref_mut() {
            if sc.is_null() {
                // SAFETY: the same 128-byte handle buffer on every call.
                check("connect", unsafe {
                    f!(connect)(dev, h.as_mut_ptr().cast(), &mut sc, &mut dh)
                })?;
            }
        }
        if let Some(l) = listen {
            if rc.is_null() {
                // SAFETY: l came from listen.
                check("accept", unsafe { f!(accept)(l, &mut rc, &mut dh) })?;
            }
        }
        if (!want_send || !sc.is_null()) && (listen.is_none() || !rc.is_null()) {
            return Ok((sc, rc));
        }
        if start.elapsed() > limit {
            return Err(NetErr(format!(
                "connect/accept not complete after {limit:?}"
            )));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

pub(super) fn reg_mr(comm: Ptr, buf: &mut [u8]) -> NetRes<Ptr> {
    let mut mh: Ptr = null_mut();
    // SAFETY: buf outlives the registration (callers deregister before dropping it).
    check("regMr", unsafe {
        f!(regMr)(
            comm,
            buf.as_mut_ptr().cast(),
            buf.len(),
            NCCL_PTR_HOST as c_int,
            &mut mh,
        )
    })?;
    Ok(mh)
}

pub(super) fn dereg_mr(comm: Ptr, mh: Ptr) -> NetRes<()> {
    // SAFETY: mh came from reg_mr on comm.
    check("deregMr", unsafe { f!(deregMr)(comm, mh) })
}

/// isend; Ok(None) = try again later.
///
/// # Safety
/// `data` must point into the region registered as `mh` with `size` bytes, valid until done.
pub(super) unsafe fn isend(comm: Ptr, data: *mut u8, size: usize, mh: Ptr) -> NetRes<Option<Ptr>> {
    unsafe {
        let mut req: Ptr = null_mut();
        check(
            "isend",
            f!(isend)(comm, data.cast(), size as c_int, 0, mh, &mut req),
        )?;
        Ok((!req.is_null()).then_some(req))
    }
}

/// irecv of one buffer; Ok(None) = try again later.
///
/// # Safety
/// As for `isend`, with `size` writable bytes.
pub(super) unsafe fn irecv(comm: Ptr, data: *mut u8, size: usize, mh: Ptr) -> NetRes<Option<Ptr>> {
    unsafe {
        let mut d = data as Ptr;
        let mut s = size as c_int;
        let mut tag: c_int = 0;
        let mut m = mh;
        let mut req: Ptr = null_mut();
        check(
            "irecv",
            f!(irecv)(comm, 1, &mut d, &mut s, &mut tag, &mut m, &mut req),
        )?;
        Ok((!req.is_null()).then_some(req))
    }
}

/// test(); Some(size) once done.
pub(super) fn test(req: Ptr) -> NetRes<Option<usize>> {
    let mut done: c_int = 0;
    let mut size: c_int = 0;
    // SAFETY: req is a live request.
    check("test", unsafe { f!(test)(req, &mut done, &mut size) })?;
    Ok((done != 0).then_some(size.max(0) as usize))
}

pub(super) fn close_send(c: Ptr) -> NetRes<()> {
    // SAFETY: c came from connect.
    check("closeSend", unsafe { f!(closeSend)(c) })
}

pub(super) fn close_recv(c: Ptr) -> NetRes<()> {
    // SAFETY: c came from accept.
    check("closeRecv", unsafe { f!(closeRecv)(c) })
}

pub(super) fn close_listen(c: Ptr) -> NetRes<()> {
    // SAFETY: c came from listen.
    check("closeListen", unsafe { f!(closeListen)(c) })
}

pub(crate) fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn from_hex(s: &str) -> Option<[u8; HANDLE_BYTES]> {
    let s = s.trim();
    if s.len() != 2 * HANDLE_BYTES || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; HANDLE_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_net_dqplb::ffi::sys::NCCL_PTR_CUDA;

    /// A plugin with two devices: 0 "eth0" takes CUDA buffers only, 1 "lo" host and CUDA.
    unsafe extern "C" fn two_devices(dev: c_int, p: *mut ncclNetProperties_v8_t) -> ncclResult_t {
        let (name, ptr) = match dev {
            0 => (c"eth0", NCCL_PTR_CUDA),
            1 => (c"lo", NCCL_PTR_HOST | NCCL_PTR_CUDA),
            _ => return ncclResult_t::ncclInvalidArgument,
        };
        // SAFETY: the caller passes a writable properties struct.
        unsafe {
            (*p).name = name.as_ptr().cast_mut();
            (*p).ptrSupport = ptr as c_int;
        }
        ncclResult_t::ncclSuccess
    }

    fn vtable() -> ncclNet_v8_t {
        // SAFETY: all-zero is a valid ncclNet_v8_t (NULL name, no functions).
        let mut v: ncclNet_v8_t = unsafe { std::mem::zeroed() };
        v.getProperties = Some(two_devices);
        v
    }

    #[test]
    fn device_by_name_or_zero_and_host_buffers_required() {
        let v = vtable();
        assert_eq!(pick_device_in(&v, 2, Some("lo")).unwrap(), (1, "lo".into()));
        // Device 0 (the default) and device "eth0" lack NCCL_PTR_HOST.
        for want in [None, Some("eth0")] {
            assert_eq!(
                pick_device_in(&v, 2, want).unwrap_err().0,
                "device 0 (eth0) does not support host buffers (NCCL_PTR_HOST missing from ptrSupport 0x2); dqplb perf registers host memory only"
            );
        }
        assert_eq!(
            pick_device_in(&v, 2, Some("ib0")).unwrap_err().0,
            "--plugin-dev ib0: no such device; the plugin's devices are: eth0, lo"
        );
        // SAFETY: as in vtable().
        let empty: ncclNet_v8_t = unsafe { std::mem::zeroed() };
        assert_eq!(
            pick_device_in(&empty, 2, None).unwrap_err().0,
            "vtable entry getProperties is NULL"
        );
    }
}
