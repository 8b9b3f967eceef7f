//! Connection setup and teardown as src/transport/net.cc does it: listen in recvProxySetup,
//! connect/accept repeated in sendProxyConnect/recvProxyConnect, regMr per buffer, free.

use super::nccl::{ok, P};
use super::plan::{Proto, P2P_CHUNK, SHARED_STEPS};
use super::rendezvous::Rendezvous;
use dqplb_test_support::nccl::{DeviceHandleV8, NetV8, HANDLE_BYTES, PTR_CUDA, PTR_HOST};
use std::alloc::Layout;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

/// Host memory as ncclCudaHostCalloc gives it: page aligned, zeroed.
pub(crate) struct HostBuf {
    pub ptr: *mut u8,
    pub len: usize,
}

impl HostBuf {
    pub(crate) fn new(len: usize) -> HostBuf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for {len} bytes");
        HostBuf { ptr, len }
    }

    /// # Safety
    /// `off + n <= len`, and no plugin operation writes the range meanwhile (the buffer is
    /// shared with the plugin through raw pointers, as NCCL's host buffers are).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, off: usize, n: usize) -> &mut [u8] {
        unsafe {
            assert!(off + n <= self.len, "slice {off}+{n} past {}", self.len);
            std::slice::from_raw_parts_mut(self.ptr.add(off), n)
        }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 4096).expect("layout");
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// Identity of one NCCL connection (one per peer, channel and, for the emulated PXN case, sub).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub peer: usize,
    pub ch: usize,
    pub g: usize,
}

/// sendNetResources / recvNetResources, reduced to what touches the plugin.
pub(crate) struct Conn {
    pub key: Key,
    pub send: bool,
    /// resources->shared: p2p connections use the per-process shared buffer pool.
    pub shared: bool,
    /// The comm this connection uses (its own, or the shared one).
    pub comm: P,
    pub listen: P,
    pub handle: [u8; HANDLE_BYTES],
    /// isend tag (resources->tpRank) / irecv tag (resources->tpRemoteRank).
    pub tag: c_int,
    /// Per protocol: the registered buffer (index into `Setup::bufs`) and its mhandle.
    pub buf: [Option<usize>; 3],
    pub mh: [P; 3],
    /// resources->step: where the next op's steps start (ROUNDUP to chunkSteps).
    pub step: u64,
    pub connected: bool,
}

/// ncclSharedNetComms for one (peer, channel): one comm shared by several connections, with
/// sendRefCount/recvRefCount (used when maxRecvs > 1 and NCCL_NET_SHARED_COMMS=1, the default).
struct SharedComm {
    comm: P,
    refs: usize,
}

pub(crate) struct Setup<'n> {
    pub net: &'n NetV8,
    pub dev: c_int,
    pub conns: Vec<Conn>,
    pub bufs: Vec<HostBuf>,
    /// The shared p2p pools (send, recv): nChannels * NCCL_SHARED_STEPS * p2pChunkSize each.
    pub pool: [Option<usize>; 2],
    shared_send: HashMap<(usize, usize), SharedComm>,
    shared_recv: HashMap<(usize, usize), SharedComm>,
    pub share_comms: bool,
    pub stats: Stats,
    /// resources->useGdr of the receive side: its buffers are device memory, registered with
    /// NCCL_PTR_CUDA (recvProxyConnect, src/transport/net.cc 2.28.3: NCCL_NET_MAP_ADD_POINTER
    /// with devMem = useGdr for every protocol and for the shared pool).
    pub gdr_recv: bool,
    /// comm->nRanks and nChannels, for the connect-time setNetAttr hints.
    pub nranks: i32,
    pub nchannels: i32,
}

#[derive(Default, Debug, Clone)]
pub(crate) struct Stats {
    pub listens: usize,
    pub connect_calls: usize,
    pub accept_calls: usize,
    pub reg: usize,
    pub dereg: usize,
    pub closes: usize,
    pub listen_closed_unaccepted: usize,
}

macro_rules! f {
    ($net:expr, $name:ident) => {
        $net.$name
            .ok_or(concat!(stringify!($name), " is NULL in the vtable"))?
    };
}

impl<'n> Setup<'n> {
    /// `max_recvs` > 1 turns on NCCL's shared comms for p2p connections (sendProxyConnect:
    /// `resources->maxRecvs > 1 && ncclParamNetSharedComms()`, 2.20-2.30).
    pub(crate) fn new(net: &'n NetV8, dev: c_int, max_recvs: c_int) -> Setup<'n> {
        Setup {
            net,
            dev,
            conns: Vec::new(),
            bufs: Vec::new(),
            pool: [None, None],
            shared_send: HashMap::new(),
            shared_recv: HashMap::new(),
            share_comms: max_recvs > 1,
            stats: Stats::default(),
            gdr_recv: false,
            nranks: 2,
            nchannels: 1,
        }
    }

    /// recvProxySetup for every receive connection: getProperties, then listen into the
    /// connect-info buffer (respBuff) that NCCL ships to the peer through the bootstrap.
    /// sendProxySetup only reads getProperties. Handles are published through `rv`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn proxy_setup(
        &mut self,
        my_rank: usize,
        keys_recv: &[Key],
        keys_send: &[Key],
        tag_send: impl Fn(Key) -> c_int,
        tag_recv: impl Fn(Key) -> c_int,
        shared: bool,
        rv: &Rendezvous,
    ) -> Result<(), String> {
        let listen = f!(self.net, listen);
        for &key in keys_send {
            super::nccl::get_props(self.net, self.dev)?;
            self.conns.push(Conn::new(key, true, shared, tag_send(key)));
        }
        for &key in keys_recv {
            super::nccl::get_props(self.net, self.dev)?;
            let mut c = Conn::new(key, false, shared, tag_recv(key));
            // SAFETY: 128-byte handle buffer, valid out pointer.
            ok("listen", unsafe {
                listen(self.dev, c.handle.as_mut_ptr().cast(), &mut c.listen)
            })?;
            self.stats.listens += 1;
            if c.listen.is_null() {
                return Err("listen returned success with a NULL listenComm".into());
            }
            rv.publish(
                &format!("h_{}_{}_{}_{}", key.peer, my_rank, key.ch, key.g),
                &c.handle,
            )?;
            self.conns.push(c);
        }
        Ok(())
    }

    /// A listen comm that is closed without ever being accepted on: what NCCL's
    /// ncclGpuGdrSupport does when it aborts (cleanup2 closes lComm), and what recvProxyConnect
    /// does for a connection whose shared recvComm already exists (it skips accept and closes its
    /// own listenComm).
    pub(crate) fn listen_and_close_unaccepted(&mut self) -> Result<(), String> {
        let listen = f!(self.net, listen);
        let close = f!(self.net, close_listen);
        let mut h = [0u8; HANDLE_BYTES];
        let mut l: P = std::ptr::null_mut();
        // SAFETY: valid buffers.
        ok("listen (unaccepted)", unsafe {
            listen(self.dev, h.as_mut_ptr().cast(), &mut l)
        })?;
        // SAFETY: l from listen.
        ok("closeListen (unaccepted)", unsafe { close(l) })?;
        self.stats.listen_closed_unaccepted += 1;
        Ok(())
    }

    /// The proxy service thread's async-op loop (proxyProgressAsync in src/proxy.cc,
    /// 2.20-2.30): every pending ncclProxyMsgConnect is re-run until it reports done; for
    /// sends that is sendProxyConnect = connect(dev, req->handle, &netSendComm, &devHandle) on
    /// the SAME handle buffer until netSendComm is non-NULL; for receives recvProxyConnect =
    /// accept(netListenComm, &netRecvComm, &devHandle) until non-NULL, then closeListen at once.
    /// Then both register each of their buffers with regMr(comm, buf, size, NCCL_PTR_HOST).
    #[allow(clippy::needless_range_loop)]
    pub(crate) fn proxy_connect(
        &mut self,
        my_rank: usize,
        rv: &Rendezvous,
        limit: Duration,
    ) -> Result<(), String> {
        let connect = f!(self.net, connect);
        let accept = f!(self.net, accept);
        let close_listen = f!(self.net, close_listen);
        // sendConnect receives the peer's connect info from the bootstrap exchange first.
        for c in self.conns.iter_mut().filter(|c| c.send) {
            let k = c.key;
            c.handle = rv.wait(&format!("h_{}_{}_{}_{}", my_rank, k.peer, k.ch, k.g), limit)?;
        }
        let start = Instant::now();
        // ncclNetGetDeviceHandle: host plugins (netDeviceType HOST) get a NULL device handle
        // pointer stored in resources->netDeviceHandle, whose address NCCL passes.
        let mut dev_handles: Vec<*mut DeviceHandleV8> =
            vec![std::ptr::null_mut(); self.conns.len()];
        loop {
            let mut pending = 0;
            for i in 0..self.conns.len() {
                if self.conns[i].connected {
                    continue;
                }
                let k = self.conns[i].key;
                let send = self.conns[i].send;
                let use_shared = self.conns[i].shared && self.share_comms;
                if use_shared {
                    // Shared comms: only the first connection (g = 0) of a (peer, channel) connects
                    // or accepts; later ones reuse the comm and bump the reference count. (NCCL
                    // issues connections in the same order on both sides; the emulator keeps g = 0
                    // first so that the connect and accept that pair up are the same.)
                    let map = if send {
                        &mut self.shared_send
                    } else {
                        &mut self.shared_recv
                    };
                    if let Some(sc) = map.get_mut(&(k.peer, k.ch)) {
                        sc.refs += 1;
                        self.conns[i].comm = sc.comm;
                    } else if k.g != 0 {
                        pending += 1;
                        continue;
                    }
                }
                if self.conns[i].comm.is_null() {
                    // setNetAttrs(proxyState, &req->netAttr) opens every sendProxyConnect and
                    // recvProxyConnect call (v11+); shared-buffer connections are p2pOnly.
                    let p2p = self.conns[i].shared;
                    super::versions::connect_net_attr(p2p, self.nranks, self.nchannels)?;
                    let c = &mut self.conns[i];
                    if send {
                        self.stats.connect_calls += 1;
                        // SAFETY: handle buffer stays in place across calls; out pointers valid.
                        ok("connect", unsafe {
                            connect(
                                self.dev,
                                c.handle.as_mut_ptr().cast(),
                                &mut c.comm,
                                &mut dev_handles[i],
                            )
                        })?;
                    } else {
                        self.stats.accept_calls += 1;
                        // SAFETY: listen comm from listen, not yet closed.
                        ok("accept", unsafe {
                            accept(c.listen, &mut c.comm, &mut dev_handles[i])
                        })?;
                    }
                    if c.comm.is_null() {
                        pending += 1;
                        continue;
                    }
                    if use_shared {
                        let map = if send {
                            &mut self.shared_send
                        } else {
                            &mut self.shared_recv
                        };
                        map.insert(
                            (k.peer, k.ch),
                            SharedComm {
                                comm: c.comm,
                                refs: 1,
                            },
                        );
                    }
                }
                if !dev_handles[i].is_null() {
                    return Err(format!(
                        "{} wrote a device handle for a HOST plugin",
                        if send { "connect" } else { "accept" }
                    ));
                }
                if !send {
                    // recvProxyConnect: closeListen right after the connection is established
                    // (also when a shared recvComm was reused and this listen never accepted).
                    let l = std::mem::replace(&mut self.conns[i].listen, std::ptr::null_mut());
                    // SAFETY: l from listen, closed once.
                    ok("closeListen", unsafe { close_listen(l) })?;
                    if use_shared && k.g != 0 {
                        self.stats.listen_closed_unaccepted += 1;
                    }
                }
                self.register(i)?;
                self.conns[i].connected = true;
            }
            if pending == 0 {
                break;
            }
            if start.elapsed() > limit {
                let left: Vec<String> = self
                    .conns
                    .iter()
                    .filter(|c| !c.connected)
                    .map(|c| format!("{}{:?}", if c.send { "send" } else { "recv" }, c.key))
                    .collect();
                return Err(format!(
                    "connections still not established after {limit:?}: {left:?}"
                ));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// The buffers sendProxyConnect/recvProxyConnect register on their comm, per connection:
    /// dedicated (ring/tree, resources->shared == 0): one host buffer per protocol
    /// (buffSizes[LL], [LL128], [SIMPLE]), type NCCL_PTR_HOST when not GDR; shared (p2p): the
    /// process's shared pool for the direction, registered again on every connection that uses
    /// it, even on the same shared comm (the LL buffer only with NCCL_ALLOC_P2P_NET_LL_BUFFERS=1,
    /// off by default). getDeviceMr is not called: only when netDeviceHandle is set (send) or
    /// netDeviceType != HOST (recv).
    fn register(&mut self, i: usize) -> Result<(), String> {
        let reg = f!(self.net, reg_mr);
        let protos: Vec<Proto> = if self.conns[i].shared {
            vec![Proto::Simple]
        } else {
            Proto::ALL.to_vec()
        };
        for p in protos {
            let b = if self.conns[i].shared {
                let dir = if self.conns[i].send { 0 } else { 1 };
                *self.pool[dir].as_ref().ok_or("shared pool not allocated")?
            } else {
                self.bufs.push(HostBuf::new(p.buff_size()));
                self.bufs.len() - 1
            };
            let (ptr, len) = (self.bufs[b].ptr, self.bufs[b].len);
            let kind = if self.gdr_recv && !self.conns[i].send {
                PTR_CUDA
            } else {
                PTR_HOST
            };
            let c = &mut self.conns[i];
            // SAFETY: buffer outlives the registration (deregistered before it is freed).
            ok("regMr", unsafe {
                reg(c.comm, ptr.cast(), len, kind, &mut c.mh[p as usize])
            })?;
            self.stats.reg += 1;
            c.buf[p as usize] = Some(b);
        }
        Ok(())
    }

    /// sharedNetBuffersInit: nChannels * NCCL_SHARED_STEPS * p2pChunkSize per direction.
    pub(crate) fn alloc_pools(&mut self, nch: usize) {
        for dir in 0..2 {
            self.bufs
                .push(HostBuf::new(nch * SHARED_STEPS as usize * P2P_CHUNK));
            self.pool[dir] = Some(self.bufs.len() - 1);
        }
    }

    /// sendProxyFree/recvProxyFree (connection state connConnected): deregMr every registered
    /// buffer of the connection, then closeSend/closeRecv, for shared comms only when the
    /// reference count drops to 0. On abort NCCL runs the same code with requests still posted
    /// (the progress thread stopped on abortFlag and never tests them again).
    pub(crate) fn free(&mut self) -> Result<(), String> {
        let dereg = f!(self.net, dereg_mr);
        let close_send = f!(self.net, close_send);
        let close_recv = f!(self.net, close_recv);
        let close_listen = f!(self.net, close_listen);
        let mut first_err: Option<String> = None;
        let mut note = |r: Result<(), String>| {
            if let (Err(e), None) = (&r, &first_err) {
                first_err = Some(e.clone());
            }
        };
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if !c.connected {
                // connection never completed: NCCL's free path only closes connected ones; the
                // listen comm of an unfinished receive is left to the plugin (NCCL leaks it)
                // except here, where the emulator closes it so that nothing lingers.
                if !c.listen.is_null() {
                    // SAFETY: from listen.
                    note(ok("closeListen", unsafe { close_listen(c.listen) }));
                }
                let shared_comm = c.shared && self.share_comms;
                if !c.comm.is_null() && !shared_comm {
                    // SAFETY: a comm from connect/accept.
                    note(ok("close", unsafe {
                        if c.send {
                            close_send(c.comm)
                        } else {
                            close_recv(c.comm)
                        }
                    }));
                }
                continue;
            }
            for p in 0..3 {
                if c.buf[p].is_some() {
                    // SAFETY: mhandle from regMr on this comm.
                    note(ok("deregMr", unsafe { dereg(c.comm, c.mh[p]) }));
                    self.stats.dereg += 1;
                }
            }
            let close_now = if c.shared && self.share_comms {
                let map = if c.send {
                    &mut self.shared_send
                } else {
                    &mut self.shared_recv
                };
                let sc = map.get_mut(&(c.key.peer, c.key.ch)).expect("shared comm");
                sc.refs -= 1;
                sc.refs == 0
            } else {
                true
            };
            if close_now {
                // SAFETY: the comm from connect/accept, closed once.
                note(ok(if c.send { "closeSend" } else { "closeRecv" }, unsafe {
                    if c.send {
                        close_send(c.comm)
                    } else {
                        close_recv(c.comm)
                    }
                }));
                self.stats.closes += 1;
            }
        }
        self.conns.clear();
        first_err.map_or(Ok(()), Err)
    }

    pub(crate) fn find(&self, send: bool, key: Key) -> usize {
        self.conns
            .iter()
            .position(|c| c.send == send && c.key == key)
            .unwrap_or_else(|| {
                panic!(
                    "no {} connection {key:?}",
                    if send { "send" } else { "recv" }
                )
            })
    }
}

impl Conn {
    fn new(key: Key, send: bool, shared: bool, tag: c_int) -> Conn {
        Conn {
            key,
            send,
            shared,
            comm: std::ptr::null_mut(),
            listen: std::ptr::null_mut(),
            handle: [0u8; HANDLE_BYTES],
            tag,
            buf: [None; 3],
            mh: [std::ptr::null_mut(); 3],
            step: 0,
            connected: false,
        }
    }
}
