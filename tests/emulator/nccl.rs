//! NCCL's plugin life cycle for a v8 plugin: dlopen, name before init, init once (directly or via
//! the v8 compat shim), devices, getProperties, the GDR probe, and dlclose after the last comm.

use super::plan::PROXY_MAX_SUBS;
use dqplb_test_support::dl::{self, Library};
use dqplb_test_support::logger::CLogger;
use dqplb_test_support::nccl::{
    NetV8, PropertiesV8, HANDLE_BYTES, NET_DEVICE_HOST, PTR_CUDA, PTR_DMABUF, PTR_HOST, SUCCESS,
};
use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

pub(crate) type P = *mut c_void;

/// Which NCCL generation's loader to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loader {
    /// NCCL 2.20-2.23, src/net.cc ncclNetPluginInit/ncclNetInit: v8 is the native version; the
    /// plugin is dlopened once per process, init(ncclDebugLog) is called once, and the library is
    /// never dlclosed (2.20.3 only dlcloses on a failed load).
    Direct,
    /// NCCL 2.24-2.30: the v8 compat shim calls v8 init once per load: in 2.24-2.27
    /// ncclNet_v8_as_v9_init (src/net.cc) runs from netGetState while ncclNetStates is Init,
    /// which ncclNetPluginUnload resets; in 2.28-2.30 ncclNet_init (src/plugin/net/net_v8.cc)
    /// runs per communicator but calls v8 init only when its static refCount goes 0 -> 1. The
    /// plugin is never finalized (v8 has no finalize). ncclNetPluginUnload (src/net.cc 2.24) /
    /// ncclNetFinalize (src/plugin/net.cc 2.28-2.30) dlcloses the library when the last
    /// communicator using it is destroyed (reference count 0; NCCL_NET_PLUGIN_REF_COUNT default 0).
    Shim,
}

/// The NCCL version emulated: `DQPLB_EMU_NCCL` = 2.20, 2.24, 2.26, 2.28 (default) or 2.30.
pub(crate) fn version() -> u32 {
    match std::env::var("DQPLB_EMU_NCCL").as_deref() {
        Ok("2.20") => 220,
        Ok("2.24") => 224,
        Ok("2.26") => 226,
        Ok("2.30") => 230,
        _ => 228,
    }
}

impl Loader {
    pub(crate) fn from_env() -> Loader {
        if version() < 224 {
            Loader::Direct
        } else {
            Loader::Shim
        }
    }
}

/// Turns a plugin result into `Err` naming the call; every non-zero result is an error to NCCL
/// (NCCLCHECK in src/include/checks.h).
pub(crate) fn ok(call: &str, rc: c_int) -> Result<(), String> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(format!("{call} returned ncclResult_t {rc}"))
    }
}

/// Emulated process-wide state of libnccl: the loaded plugin, NCCL's own reference counts.
pub(crate) struct Nccl {
    pub loader: Loader,
    pub log: CLogger,
    lib: Option<Library>,
    net: Option<&'static NetV8>,
    /// `refCount[NET_INDEX]` of net_v8.cc (lives in libnccl, so it survives a plugin dlclose).
    shim_refs: usize,
    /// `ncclNetPluginRefCount` (src/plugin/net.cc 2.28+): communicators using the plugin.
    plugin_refs: usize,
    /// Direct loader: init already called in this process.
    direct_inited: bool,
    /// devices() result of the current load (2.20-2.27 call devices only together with init).
    ndev: c_int,
    pub dlopens: usize,
    /// maxRecvs the last communicator used (reported in the OK line).
    pub max_recvs: c_int,
    pub inits: usize,
    pub dlcloses: usize,
    /// v11+ finalize(ctx) calls.
    pub finalizes: usize,
}

/// What a communicator learned at init.
pub(crate) struct CommNet {
    pub net: &'static NetV8,
    pub ndev: c_int,
    pub props: Vec<PropertiesV8>,
    pub dev: c_int,
}

impl Nccl {
    pub(crate) fn new() -> Result<Nccl, String> {
        Ok(Nccl {
            loader: Loader::from_env(),
            log: CLogger::load()?,
            lib: None,
            net: None,
            shim_refs: 0,
            plugin_refs: 0,
            direct_inited: false,
            ndev: 0,
            max_recvs: 0,
            dlopens: 0,
            inits: 0,
            dlcloses: 0,
            finalizes: 0,
        })
    }

    /// ncclCommInitRank's network part for one communicator.
    pub(crate) fn comm_init(&mut self) -> Result<CommNet, String> {
        if self.lib.is_none() {
            let lib = Library::open(&dl::plugin_path())?;
            // 2.20-2.30 look for the newest symbol they know first and fall back to v8
            // (src/plugin/net.cc getNcclNet[]: v12 first in 2.30, v11 in 2.28, v10 in 2.26, v9 in
            // 2.24; 2.20-2.23 know v8 only).
            let want = super::versions::first_version(version());
            let (found, table) = super::versions::find(&lib, want)?;
            if found != want {
                return Err(format!(
                    "NCCL {} looks for ncclNetPlugin_v{want} first; the plugin lacks it (found v{found})",
                    version()
                ));
            }
            let net = super::versions::adopt(found, table);
            if found == 8 {
                // The v8 table is the plugin's own: the same one dl::net_v8 finds.
                debug_assert!(std::ptr::eq(net, dl::net_v8(&lib)?));
            }
            self.dlopens += 1;
            // The name is read before init: NCCL prints it at load time and compares NCCL_NET
            // against it case-insensitively (src/net.cc 2.20-2.27 ncclNetPluginLoad/netGetState;
            // src/plugin/net.cc ncclNetPluginAssignToComm, strcasecmp, 2.28-2.30).
            if net.name.is_null() {
                return Err("ncclNetPlugin_v8.name is NULL before init".into());
            }
            // SAFETY: non-NULL static C string of the plugin.
            let name = unsafe { CStr::from_ptr(net.name) }
                .to_string_lossy()
                .into_owned();
            let want = std::env::var("NCCL_NET").unwrap_or_else(|_| "dqplb".into());
            if !name.eq_ignore_ascii_case(&want) {
                return Err(format!(
                    "plugin name {name:?} does not match NCCL_NET={want:?}"
                ));
            }
            self.lib = Some(lib);
            self.net = Some(net);
        }
        let net = self.net.expect("loaded");
        let native = super::versions::version();
        let must_init = match self.loader {
            Loader::Direct => !self.direct_inited,
            // v11+: ncclNetPluginInit calls init for every communicator ("Init must be called for
            // each new comm to set the right context", src/plugin/net.cc 2.28-2.30); v8 through
            // the shim and native v9/v10 once per load.
            Loader::Shim => native >= 11 || self.shim_refs == 0,
        };
        if must_init {
            if native == 8 {
                let init = net.init.ok_or("init is NULL")?;
                // SAFETY: logger is a real variadic C function.
                ok("init", unsafe { init(Some(self.log.logger)) })?;
            } else {
                // commHash: any per-communicator 64-bit id.
                let hash = 0xc0ffee00_u64 + self.dlopens as u64 * 16 + self.plugin_refs as u64;
                super::versions::init(self.log.logger, hash)?;
            }
            self.inits += 1;
            self.direct_inited = true;
        }
        if self.loader == Loader::Shim {
            self.shim_refs += 1;
        }
        self.plugin_refs += 1;
        // devices(): right after init in netGetState (src/net.cc 2.20-2.27, once per load), per
        // communicator in ncclNetPluginInit (src/plugin/net.cc 2.28-2.30); ndev <= 0 disables
        // the plugin in both.
        if must_init || version() >= 228 {
            let mut ndev: c_int = -1;
            let devices = net.devices.ok_or("devices is NULL")?;
            // SAFETY: valid out pointer.
            ok("devices", unsafe { devices(&mut ndev) })?;
            if ndev <= 0 {
                return Err(format!("devices reported {ndev}: NCCL disables the plugin"));
            }
            self.ndev = ndev;
        }
        let ndev = self.ndev;
        // getProperties for every device: ncclTopoGetSystem (src/graph/topo.cc, 2.20-2.30) fills
        // the NET nodes of the topology from name, pciPath, guid, speed, port, latency and
        // maxComms ("maxconn"); ncclNetCheckDeviceVersion (src/net.cc 2.24, src/plugin/net.cc
        // 2.28-2.30) reads netDeviceType/Version of device 0.
        let mut props = Vec::new();
        for d in 0..ndev {
            props.push(get_props(net, d)?);
        }
        let p0 = &props[0];
        if p0.net_device_type != NET_DEVICE_HOST {
            return Err(format!(
                "netDeviceType {} on a host plugin: ncclNetCheckDeviceVersion only accepts HOST or UNPACK",
                p0.net_device_type
            ));
        }
        // GDR probe (ncclGpuGdrSupport: src/net.cc 2.20-2.27, src/plugin/net.cc 2.28-2.30): only
        // for devices advertising NCCL_PTR_CUDA, and only on CUDA drivers < 11.3 (newer ones query
        // cudaDevAttrGPUDirectRDMASupported). The emulator runs it for every CUDA device; with
        // host memory, since there is no GPU here.
        for (d, p) in props.iter().enumerate() {
            if p.ptr_support & PTR_CUDA != 0 {
                gdr_probe(net, d as c_int, Duration::from_secs(30), PTR_CUDA)?;
            }
        }
        Ok(CommNet {
            net,
            ndev,
            props,
            dev: 0,
        })
    }

    /// ncclCommDestroy/ncclCommAbort's network part: ncclNetFinalize.
    pub(crate) fn comm_finalize(&mut self) -> Result<(), String> {
        self.plugin_refs -= 1;
        // v11+: ncclNetFinalize calls finalize(comm->netContext) for every communicator, before
        // the plugin may be unloaded (src/plugin/net.cc 2.28-2.30).
        if self.net.is_some() && super::versions::finalize()? {
            self.finalizes += 1;
        }
        if self.loader == Loader::Shim {
            // net_v8.cc ncclNet_finalize: refCount-- only; v8 has no finalize to call.
            self.shim_refs -= 1;
            if self.plugin_refs == 0 {
                // ncclNetPluginUnload: dlclose at reference count 0 (2.24 src/net.cc, 2.28-2.30
                // src/plugin/net.cc); the next communicator dlopens again.
                self.net = None;
                if let Some(lib) = self.lib.take() {
                    lib.close()?;
                    self.dlcloses += 1;
                }
            }
        }
        Ok(())
    }
}

/// NCCL declares `ncclNetProperties_t props;` on the stack without initialising it
/// (sendProxySetup/recvProxySetup in src/transport/net.cc): stack garbage, emulated here.
fn uninit_props() -> PropertiesV8 {
    PropertiesV8 {
        name: std::ptr::null(),
        pci_path: std::ptr::null(),
        guid: 0x5a5a_5a5a_5a5a_5a5a,
        ptr_support: 0x5a5a_5a5a,
        reg_is_global: 0x5a5a_5a5a,
        speed: -0x5a5a,
        port: -0x5a5a,
        latency: f32::NAN,
        max_comms: -0x5a5a,
        max_recvs: -0x5a5a,
        net_device_type: 0x5a5a,
        net_device_version: 0x5a5a,
    }
}

/// getProperties into an uninitialised (garbage-filled) struct, checking what NCCL reads.
pub(crate) fn get_props(net: &NetV8, dev: c_int) -> Result<PropertiesV8, String> {
    let f = net.get_properties.ok_or("getProperties is NULL")?;
    let mut p = uninit_props();
    // SAFETY: valid out pointer to a v8 properties struct.
    ok("getProperties", unsafe { f(dev, &mut p) })?;
    if p.name.is_null() {
        return Err(format!("getProperties({dev}): name NULL"));
    }
    // NCCL's struct is uninitialised stack memory: a field the plugin leaves alone is garbage.
    let u = uninit_props();
    let untouched = [
        ("guid", p.guid == u.guid),
        ("ptrSupport", p.ptr_support == u.ptr_support),
        ("regIsGlobal", p.reg_is_global == u.reg_is_global),
        ("speed", p.speed == u.speed),
        ("port", p.port == u.port),
        ("latency", p.latency.is_nan()),
        ("maxComms", p.max_comms == u.max_comms),
        ("maxRecvs", p.max_recvs == u.max_recvs),
        ("netDeviceType", p.net_device_type == u.net_device_type),
        (
            "netDeviceVersion",
            p.net_device_version == u.net_device_version,
        ),
    ];
    if let Some((f, _)) = untouched.iter().find(|(_, t)| *t) {
        return Err(format!(
            "getProperties({dev}) left {f} unwritten (NCCL would read stack garbage)"
        ));
    }
    // recvProxySetup/sendProxySetup store maxRecvs; recvProxyProgress groups up to it.
    if !(1..=PROXY_MAX_SUBS as c_int).contains(&p.max_recvs) {
        return Err(format!("getProperties({dev}): maxRecvs {}", p.max_recvs));
    }
    // NCCL_PTR_HOST is what the net transport registers its host buffers with.
    if p.ptr_support & PTR_HOST == 0 || p.ptr_support & !(PTR_HOST | PTR_CUDA | PTR_DMABUF) != 0 {
        return Err(format!(
            "getProperties({dev}): ptrSupport {:#x}",
            p.ptr_support
        ));
    }
    if p.reg_is_global != 0 && p.reg_is_global != 1 {
        return Err(format!(
            "getProperties({dev}): regIsGlobal {}",
            p.reg_is_global
        ));
    }
    // speed (Mbps) and maxComms go into the topology XML ("speed", "maxconn") and come back in
    // ncclTopoAddNet (src/graph/topo.cc, 2.20-2.30) as net.bw = speed/8000 GB/s, with speed <= 0
    // replaced by 10000 ("Some NICs define speed = -1"), and net.maxChannels = maxComms: the most
    // channels NCCL puts on the NIC. maxComms <= 0 would leave NCCL no channel on the device.
    if p.max_comms <= 0 {
        return Err(format!("getProperties({dev}): maxComms {}", p.max_comms));
    }
    if p.latency < 0.0 {
        return Err(format!("getProperties({dev}): latency {}", p.latency));
    }
    Ok(p)
}

/// ncclGpuGdrSupport's probe, in one thread: listen; connect and accept alternately, each
/// called again only while its comm is still NULL, until both are non-NULL (device-handle
/// argument NULL); regMr/deregMr a 2 MiB buffer on the send comm, then on the receive comm;
/// closeRecv, closeSend, closeListen. NCCL registers cudaMalloc'ed memory with NCCL_PTR_CUDA
/// (`kind`; src/plugin/net.cc ncclGpuGdrSupport, 2.28.3); this emulator has no GPU, so host
/// memory stands in (NCCL_PTR_HOST for devices without CUDA: the same call sequence).
pub(crate) fn gdr_probe(
    net: &NetV8,
    dev: c_int,
    limit: Duration,
    kind: c_int,
) -> Result<(), String> {
    const GPU_BUF_SIZE: usize = 2 * 1024 * 1024;
    let listen = net.listen.ok_or("listen NULL")?;
    let connect = net.connect.ok_or("connect NULL")?;
    let accept = net.accept.ok_or("accept NULL")?;
    let reg = net.reg_mr.ok_or("regMr NULL")?;
    let dereg = net.dereg_mr.ok_or("deregMr NULL")?;
    let mut handle = [0u8; HANDLE_BYTES];
    let (mut l, mut s, mut r): (P, P, P) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: out pointers valid; handle buffer 128 bytes.
    ok("probe listen", unsafe {
        listen(dev, handle.as_mut_ptr().cast(), &mut l)
    })?;
    let start = Instant::now();
    while s.is_null() || r.is_null() {
        if s.is_null() {
            // SAFETY: same handle buffer on every call, NULL device handle as the probe passes.
            ok("probe connect", unsafe {
                connect(
                    dev,
                    handle.as_mut_ptr().cast(),
                    &mut s,
                    std::ptr::null_mut(),
                )
            })?;
        }
        if r.is_null() {
            // SAFETY: l from listen.
            ok("probe accept", unsafe {
                accept(l, &mut r, std::ptr::null_mut())
            })?;
        }
        if start.elapsed() > limit {
            return Err(format!(
                "GDR probe: not connected after {limit:?} (send {s:?} recv {r:?})"
            ));
        }
    }
    let mut buf = vec![0u8; GPU_BUF_SIZE];
    let mut mh: P = std::ptr::null_mut();
    // SAFETY: buf lives across reg/dereg.
    unsafe {
        ok(
            "probe regMr(sendComm)",
            reg(s, buf.as_mut_ptr().cast(), GPU_BUF_SIZE, kind, &mut mh),
        )?;
        ok("probe deregMr(sendComm)", dereg(s, mh))?;
        ok(
            "probe regMr(recvComm)",
            reg(r, buf.as_mut_ptr().cast(), GPU_BUF_SIZE, kind, &mut mh),
        )?;
        ok("probe deregMr(recvComm)", dereg(r, mh))?;
        ok(
            "probe closeRecv",
            net.close_recv.ok_or("closeRecv NULL")?(r),
        )?;
        ok(
            "probe closeSend",
            net.close_send.ok_or("closeSend NULL")?(s),
        )?;
        ok(
            "probe closeListen",
            net.close_listen.ok_or("closeListen NULL")?(l),
        )?;
    }
    Ok(())
}
