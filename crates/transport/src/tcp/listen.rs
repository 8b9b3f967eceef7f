//! The listening side: a non-blocking listener that collects a connection's control and data
//! streams by their hello (checking magic, version and secret) and hands out receive comms.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a half-open connection may wait for its hello or its other streams.
const STALE_AFTER: Duration = Duration::from_secs(60);
/// Unauthenticated streams (hello not complete) held at once; beyond that the one waiting
/// longest is dropped. A legitimate connector sends its 64-byte hello as soon as its connect
/// completes, so only a stranger or a stuck peer waits long.
pub(crate) const MAX_WAITING: usize = 512;
/// New connections taken from the kernel per accept() call: bounded work per call.
pub(crate) const ACCEPTS_PER_CALL: usize = 64;
/// After accept() fails for want of descriptors (EMFILE/ENFILE), it is tried again this much later;
/// the waiting streams are still read and expired meanwhile, which is what frees descriptors.
pub(crate) const OUT_OF_FDS_BACKOFF: Duration = Duration::from_millis(50);
/// Out of descriptors, a waiting stream that has sent nothing for this long is dropped to make
/// room (one per failed accept), so a crowd of idle sockets cannot lock legitimate peers out.
pub(crate) const IDLE_EVICT_AFTER: Duration = Duration::from_secs(1);

use super::handle::{random_secret, ListenHandle, PROTOCOL_VERSION};
use super::hello::{Heard, PendingHello, Waiting};
use super::recv::TcpRecvComm;
use super::warns::WarnBudget;
use super::wire::{encode_refusal, ConnParams, Hello, Refusal, HELLO_BYTES};
use super::TcpOptions;
use crate::{NetError, NetResult};

/// "listener ADDR", for log lines.
#[derive(Clone, Copy)]
struct Who(SocketAddr);

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "listener {}", self.0)
    }
}

/// Streams of one connection gathered so far.
struct Group {
    conn_id: u64,
    params: ConnParams,
    streams: Vec<Option<TcpStream>>,
    since: Instant,
}

/// accept() failing for want of file descriptors: since when, how often, and when to try again.
struct OutOfFds {
    since: Instant,
    failures: u64,
    retry_at: Instant,
}

pub struct TcpListenComm {
    listener: TcpListener,
    handle: ListenHandle,
    opts: TcpOptions,
    /// IP_TOS / IPV6_TCLASS for accepted streams (NCCL v11+ per-communicator trafficClass).
    traffic_class: Option<u8>,
    /// Sockets that connected but have not finished their hello yet.
    pending: Waiting,
    groups: Vec<Group>,
    /// Dropped connections: the first few per interval are logged, the rest counted.
    warns: WarnBudget,
    out_of_fds: Option<OutOfFds>,
    /// Scratch lists reused by every call.
    heard: Vec<Heard>,
    stale: Vec<PendingHello>,
    owner: super::Owner,
}

impl TcpListenComm {
    /// Binds an ephemeral port on `ip` and returns at once.
    pub fn bind(ip: IpAddr, fabric_id: u32, opts: TcpOptions) -> NetResult<TcpListenComm> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| NetError::io(&format!("listen on {ip}"), &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| NetError::io(&format!("listen on {ip}: set non-blocking"), &e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| NetError::io("listener address", &e))?;
        let handle = ListenHandle {
            addr,
            fabric_id,
            secret: random_secret()?,
        };
        Ok(TcpListenComm {
            listener,
            handle,
            opts,
            traffic_class: None,
            pending: Waiting::new(MAX_WAITING),
            groups: Vec::new(),
            warns: WarnBudget::new(),
            out_of_fds: None,
            heard: Vec::new(),
            stale: Vec::new(),
            owner: super::Owner::this_process(),
        })
    }

    /// Sets the traffic class of streams accepted from now on (None: kernel default).
    pub fn set_traffic_class(&mut self, tc: Option<u8>) {
        self.traffic_class = tc;
    }

    pub fn handle(&self) -> &ListenHandle {
        &self.handle
    }

    /// Connections accepted and still waiting for their hello (tests, diagnostics).
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// A receive comm once every stream of some connection arrived; None until then. Running
    /// out of file descriptors is not an error here: accept() is retried later while the waiting
    /// streams are still read and expired (which frees descriptors).
    pub fn accept(&mut self) -> NetResult<Option<TcpRecvComm>> {
        self.accept_new()?;
        self.read_hellos();
        self.expire();
        let ready = self
            .groups
            .iter()
            .position(|g| g.streams.iter().all(Option::is_some));
        let Some(i) = ready else { return Ok(None) };
        let g = self.groups.swap_remove(i);
        let mut streams = g.streams.into_iter().flatten();
        let Some(ctrl) = streams.next() else {
            return Err(NetError::internal(
                "accepted connection without a control stream",
            ));
        };
        let auth = super::recv::Auth {
            conn_id: g.conn_id,
            secret: self.handle.secret,
        };
        TcpRecvComm::new(ctrl, streams.collect(), g.params, auth, self.opts.clone()).map(Some)
    }

    /// Names the listener in its WARN lines (formatted only when a line is logged).
    fn who(&self) -> Who {
        Who(self.handle.addr)
    }

    fn accept_new(&mut self) -> NetResult<()> {
        if let Some(o) = &self.out_of_fds {
            if Instant::now() < o.retry_at {
                return Ok(());
            }
        }
        for _ in 0..ACCEPTS_PER_CALL {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    let tc = self.traffic_class.map(|tc| {
                        use std::os::fd::AsRawFd;
                        super::set_traffic_class(sock.as_raw_fd(), peer.is_ipv6(), tc)
                    });
                    if let Err(e) = self.opts.apply(&sock).and(tc.unwrap_or(Ok(()))) {
                        let who = self.who();
                        self.warns.warn(&who, || {
                            format!("dropping connection from {peer}: {}", e.msg)
                        });
                        continue;
                    }
                    if let Some(old) = self.pending.push(PendingHello::new(sock, peer)) {
                        let who = self.who();
                        self.warns.warn(&who, || format!(
                            "dropped a connection from {} that sent {} of {HELLO_BYTES} hello bytes in {} ms: {MAX_WAITING} connections were waiting for their hello",
                            old.peer, old.got, old.since.elapsed().as_millis()
                        ));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.fds_back();
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A connection that died in the backlog is not our listener's failure.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    self.fds_out(&e);
                    return Ok(());
                }
                Err(e) => return Err(NetError::io(&format!("accept on {}", self.handle.addr), &e)),
            }
        }
        Ok(())
    }

    /// accept() failed for want of descriptors (or kernel memory): one WARN when it starts, a
    /// count meanwhile, a retry after OUT_OF_FDS_BACKOFF, and an idle waiting stream dropped.
    fn fds_out(&mut self, e: &std::io::Error) {
        let now = Instant::now();
        let retry_at = now + OUT_OF_FDS_BACKOFF;
        match &mut self.out_of_fds {
            Some(o) => {
                o.failures += 1;
                o.retry_at = retry_at;
            }
            None => {
                let who = self.who();
                self.warns.warn(&who, || format!("accept: {e}: new connections wait in the kernel's backlog; retrying every {} ms while connections waiting for their hello are read, expired, and (idle for {} s) dropped", OUT_OF_FDS_BACKOFF.as_millis(), IDLE_EVICT_AFTER.as_secs()));
                self.out_of_fds = Some(OutOfFds {
                    since: now,
                    failures: 1,
                    retry_at,
                });
            }
        }
        if let Some(p) = self.pending.evict_idle(IDLE_EVICT_AFTER) {
            let who = self.who();
            self.warns.warn(&who, || {
                format!(
                    "dropped a connection from {} that sent nothing in {} ms: out of file descriptors",
                    p.peer,
                    p.since.elapsed().as_millis()
                )
            });
        }
    }

    /// The backlog is drained after running out of descriptors: one line with how long and how
    /// often accept() failed (an episode ends only then, so a listener that keeps hitting the
    /// limit does not log a start and an end per connection).
    fn fds_back(&mut self) {
        if let Some(o) = self.out_of_fds.take() {
            let who = self.who();
            self.warns.warn(&who, || {
                format!(
                    "backlog drained after {} ms out of file descriptors ({} failed accept calls)",
                    o.since.elapsed().as_millis(),
                    o.failures
                )
            });
        }
    }

    /// Drops sockets that never finished their hello and connections whose streams never all
    /// arrived within STALE_AFTER, so a port scanner or a crashed peer cannot pin resources.
    fn expire(&mut self) {
        let who = self.who();
        let mut stale = std::mem::take(&mut self.stale);
        self.pending.expire(STALE_AFTER, &mut stale);
        for p in stale.drain(..) {
            self.warns.warn(&who, || format!("dropped a connection from {} that sent {} of {HELLO_BYTES} hello bytes in {} s", p.peer, p.got, STALE_AFTER.as_secs()));
        }
        self.stale = stale;
        let warns = &mut self.warns;
        self.groups.retain(|g| {
            let keep = g.since.elapsed() < STALE_AFTER;
            if !keep {
                let have = g.streams.iter().filter(|s| s.is_some()).count();
                warns.warn(&who, || {
                    format!(
                        "dropped connection {:#x}: {have} of {} streams arrived in {} s",
                        g.conn_id,
                        g.streams.len(),
                        STALE_AFTER.as_secs()
                    )
                });
            }
            keep
        });
        self.warns.roll(&who);
    }

    /// Reads the waiting streams that have something to read (one poll); bad or dead ones are
    /// dropped and logged (aggregated), never fatal.
    fn read_hellos(&mut self) {
        let mut heard = std::mem::take(&mut self.heard);
        self.pending.read_ready(&mut heard);
        let who = self.who();
        for h in heard.drain(..) {
            match h {
                Heard::Hello(p) => {
                    if let Err(e) = self.admit(p) {
                        self.warns.warn(&who, || format!("dropped a connection: {}", e.msg));
                    }
                }
                Heard::Gone(p, None) => self.warns.warn(&who, || format!("dropped a connection from {} that closed before its hello ({} of {HELLO_BYTES} bytes)", p.peer, p.got)),
                Heard::Gone(_, Some(e)) => self.warns.warn(&who, || format!("dropped a connection before its hello: {}", e.msg)),
            }
        }
        self.heard = heard;
    }

    fn admit(&mut self, p: PendingHello) -> NetResult<()> {
        let h = Hello::decode(&p.buf)
            .map_err(|e| NetError::remote(format!("from {}: {}", p.peer, e.msg)))?;
        if h.version != PROTOCOL_VERSION {
            refuse(&p, h.stream, Refusal::Version);
            return Err(NetError::remote(format!(
                "from {}: protocol version {} (this plugin speaks {PROTOCOL_VERSION})",
                p.peer, h.version
            )));
        }
        if h.secret != self.handle.secret {
            refuse(&p, h.stream, Refusal::Secret);
            return Err(NetError::remote(format!(
                "from {}: wrong connection secret",
                p.peer
            )));
        }
        if let Err(e) = h.params.validate() {
            refuse(&p, h.stream, Refusal::Params);
            return Err(NetError::remote(format!("from {}: {}", p.peer, e.msg)));
        }
        let n = h.params.qps as usize + 1;
        if h.stream as usize >= n {
            return Err(NetError::remote(format!(
                "from {}: stream index {} of a {n}-stream connection",
                p.peer, h.stream
            )));
        }
        let gi = match self.groups.iter().position(|g| g.conn_id == h.conn_id) {
            Some(gi) => gi,
            None => {
                self.groups.push(Group {
                    conn_id: h.conn_id,
                    params: h.params,
                    streams: (0..n).map(|_| None).collect(),
                    since: Instant::now(),
                });
                self.groups.len() - 1
            }
        };
        let g = &mut self.groups[gi];
        if g.params != h.params || g.streams[h.stream as usize].is_some() {
            let why = if g.params != h.params {
                "parameters differ between streams"
            } else {
                "duplicate stream"
            };
            self.groups.swap_remove(gi);
            return Err(NetError::remote(format!(
                "from {}: connection {:#x}: {why}; connection dropped",
                p.peer, h.conn_id
            )));
        }
        g.streams[h.stream as usize] = Some(p.sock);
        Ok(())
    }
}

impl Drop for TcpListenComm {
    /// The listening socket and the streams of half-gathered connections are shut down before
    /// they close, so a forked child holding copies keeps nothing open.
    fn drop(&mut self) {
        self.owner.shutdown(&self.listener);
        for s in self.groups.iter().flat_map(|g| g.streams.iter().flatten()) {
            self.owner.shutdown(s);
        }
    }
}

/// Tells the connector why its control stream's hello was refused (one frame, written without
/// blocking into an empty socket, then the stream is closed), so its error says what happened
/// rather than only that the receiver closed. Data streams are just closed.
fn refuse(p: &PendingHello, stream: u16, why: Refusal) {
    if stream != 0 {
        return;
    }
    let frame = encode_refusal(why);
    let name = super::io::StreamName {
        peer: p.peer,
        index: 0,
    };
    let _ = super::io::write_some(&p.sock, &[std::io::IoSlice::new(&frame)], &name);
}
