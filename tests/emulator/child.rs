//! One emulated NCCL rank (a child process): communicators in sequence, each with NCCL's init,
//! connection setup, collectives through the proxy progress loops, and destroy or abort.

use super::nccl::{self, Nccl};
use super::plan::{self, Proto, P2P_CHUNK};
use super::progress::{AbortAt, Args, Counters, Engine, Sub};
use super::rendezvous::Rendezvous;
use super::setup::{Key, Setup};
use dqplb_test_support::nccl::{LOG_WARN, PTR_CUDA, PTR_HOST};
use dqplb_test_support::spawn::say;
use std::os::raw::c_int;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const STEP_LIMIT: Duration = Duration::from_secs(60);

fn env_usize(k: &str, d: usize) -> Result<usize, String> {
    match std::env::var(k) {
        Ok(v) => v.parse().map_err(|e| format!("{k}={v}: {e}")),
        Err(_) => Ok(d),
    }
}

/// The child's parameters, from the environment the parent set.
pub(crate) struct Role {
    pub rank: usize,
    pub nranks: usize,
    pub nch: usize,
    pub work: String,
    pub bytes: usize,
    pub protos: Vec<Proto>,
    pub comms: usize,
    pub iters: usize,
    pub dir: PathBuf,
}

impl Role {
    pub(crate) fn from_env() -> Result<Role, String> {
        let protos = match std::env::var("DQPLB_EMU_PROTO").as_deref() {
            Ok("ALL") => Proto::ALL.to_vec(),
            Ok(p) => vec![Proto::parse(p).ok_or(format!("DQPLB_EMU_PROTO={p}"))?],
            Err(_) => vec![Proto::Simple],
        };
        Ok(Role {
            rank: env_usize("DQPLB_EMU_RANK", 0)?,
            nranks: env_usize("DQPLB_EMU_NRANKS", 2)?,
            nch: env_usize("DQPLB_EMU_CHANNELS", 1)?,
            work: std::env::var("DQPLB_EMU_WORK").unwrap_or_else(|_| "ring".into()),
            bytes: env_usize("DQPLB_EMU_BYTES", 1 << 20)?,
            protos,
            comms: env_usize("DQPLB_EMU_COMMS", 2)?,
            iters: env_usize("DQPLB_EMU_ITERS", 2)?,
            dir: PathBuf::from(std::env::var("DQPLB_EMU_DIR").map_err(|_| "DQPLB_EMU_DIR unset")?),
        })
    }
}

pub(crate) fn run() -> Result<(), String> {
    let role = Role::from_env()?;
    let mut nccl = Nccl::new()?;
    let start = Instant::now();
    let (fds0, threads0) = super::versions::fds_and_threads();
    if role.work == "probe" {
        // The GDR probe's call sequence on its own, with host memory: one thread connects to
        // itself (ncclGpuGdrSupport), twice, with dlclose/dlopen in between under 2.24+ rules.
        // Devices advertising NCCL_PTR_CUDA were probed by comm_init already, with CUDA memory
        // (host memory standing in); the probe runs again here with the type NCCL would use.
        let mut cuda_devs = 0;
        for _ in 0..role.comms {
            let cn = nccl.comm_init()?;
            cuda_devs = 0;
            for d in 0..cn.ndev {
                let cuda = cn.props[d as usize].ptr_support & PTR_CUDA != 0;
                cuda_devs += usize::from(cuda);
                let kind = if cuda { PTR_CUDA } else { PTR_HOST };
                nccl::gdr_probe(cn.net, d, STEP_LIMIT, kind)?;
            }
            nccl.comm_finalize()?;
        }
        say(&format!(
            "OK probe inits={} dlopens={} dlcloses={} cuda_devs={cuda_devs}",
            nccl.inits, nccl.dlopens, nccl.dlcloses
        ));
        return Ok(());
    }
    let mut total = Counters::default();
    // Descriptors after the first communicator's destroy: what later ones must come back to.
    let mut fds_first = fds0;
    for ci in 0..role.comms {
        // The abort workload aborts the first communicator and destroys the later ones normally.
        let abort = role.work == "abort" && ci == 0;
        let c = one_comm(&mut nccl, &role, ci, abort)?;
        if ci == 0 {
            fds_first = super::versions::fds_and_threads().0;
        }
        total.isend += c.isend;
        total.isend_bytes += c.isend_bytes;
        total.irecv += c.irecv;
        total.test += c.test;
        total.consumed += c.consumed;
        total.irecv_grouped += c.irecv_grouped;
        total.iflush += c.iflush;
        total.iflush_req += c.iflush_req;
        total.bytes_verified += c.bytes_verified;
        total.zero_byte_msgs += c.zero_byte_msgs;
        total.isend_null += c.isend_null;
        total.irecv_null += c.irecv_null;
    }
    let warns = nccl.log.count(LOG_WARN);
    let (fds1, threads1) = super::versions::fds_and_threads();
    let (rail, plane) = super::versions::rail_plane().unwrap_or((-2, -2));
    say(&format!(
        "VERSIONS plugin_version={} hints={} hints_left={} tcp_socks={} tos_marked={} rail_id={rail} plane_id={plane} fds_before={fds0} fds_first={fds_first} fds_after={fds1} threads_before={threads0} threads_after={threads1} finalize={} set_net_attr={} make_vdevice={} net_attr_calls={} prof_starts={} prof_stops={} prof_bytes={} prof_bad={} isend_bytes={}",
        super::versions::version(),
        super::versions::HINTS.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::HINTS_LEFT.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::TOS_SOCKS.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::TOS_MARKED.load(std::sync::atomic::Ordering::Relaxed),
        nccl.finalizes,
        super::versions::has_after_close("setNetAttr"),
        super::versions::has_after_close("makeVDevice"),
        super::versions::NET_ATTR_CALLS.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::PROF_STARTS.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::PROF_STOPS.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::PROF_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        super::versions::PROF_BAD.load(std::sync::atomic::Ordering::Relaxed),
        total.isend_bytes,
    ));
    say(&format!(
        "OK rank={} max_recvs={} comms={} inits={} dlopens={} dlcloses={} isend={} isend_null={} irecv={} irecv_null={} grouped={} test={} iflush={} iflush_req={} consumed={} zero_byte={} verified={} warns={} secs={:.2}",
        role.rank, nccl.max_recvs, role.comms, nccl.inits, nccl.dlopens, nccl.dlcloses, total.isend, total.isend_null, total.irecv,
        total.irecv_null, total.irecv_grouped, total.test, total.iflush, total.iflush_req, total.consumed, total.zero_byte_msgs,
        total.bytes_verified, warns, start.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// One communicator: ncclCommInitRank, the workload, then ncclCommDestroy or ncclCommAbort.
fn one_comm(nccl: &mut Nccl, role: &Role, ci: usize, abort: bool) -> Result<Counters, String> {
    let cn = nccl.comm_init()?;
    let props = cn.props[cn.dev as usize];
    let max_recvs = props.max_recvs;
    nccl.max_recvs = max_recvs;
    // maxComms becomes the NIC's "maxconn", the channel limit for the NIC (topo.cc).
    if role.nch > props.max_comms as usize {
        return Err(format!(
            "{} channels > maxComms {}",
            role.nch, props.max_comms
        ));
    }
    let rv = Rendezvous::new(role.dir.join(format!("comm{ci}")))?;
    let mut setup = Setup::new(cn.net, cn.dev, max_recvs);
    // DQPLB_EMU_GDR=1: receive buffers in "GPU memory" (useGdr, needFlush), as NCCL sets it up
    // when ncclTopoCheckGdr allows GDR for the NIC; needs a device advertising NCCL_PTR_CUDA.
    setup.gdr_recv = std::env::var("DQPLB_EMU_GDR").as_deref() == Ok("1");
    if setup.gdr_recv && props.ptr_support & PTR_CUDA == 0 {
        return Err(format!(
            "DQPLB_EMU_GDR=1 but device {} advertises ptrSupport {:#x} (no NCCL_PTR_CUDA): NCCL would not use GDR",
            cn.dev, props.ptr_support
        ));
    }
    let (r, n, nch) = (role.rank, role.nranks, role.nch);
    setup.nranks = n as c_int;
    setup.nchannels = nch as c_int;
    let a2a = role.work == "a2a";
    // Emulated PXN for all-to-all: with maxRecvs > 1 NCCL shares one comm per (peer, channel)
    // between connections of different ranks behind one proxy, and groups their receives.
    let g_count = if a2a && max_recvs > 1 { 3 } else { 1 };
    let (mut keys_recv, mut keys_send) = (Vec::new(), Vec::new());
    if a2a {
        for q in (0..n).filter(|&q| q != r) {
            for ch in 0..nch {
                for g in 0..g_count {
                    keys_recv.push(Key { peer: q, ch, g });
                    keys_send.push(Key { peer: q, ch, g });
                }
            }
        }
        setup.alloc_pools(nch);
    } else {
        let (prev, next) = ((r + n - 1) % n, (r + 1) % n);
        for ch in 0..nch {
            keys_recv.push(Key {
                peer: prev,
                ch,
                g: 0,
            });
            keys_send.push(Key {
                peer: next,
                ch,
                g: 0,
            });
        }
    }
    let gc = g_count;
    setup.listen_and_close_unaccepted()?;
    setup.proxy_setup(
        r,
        &keys_recv,
        &keys_send,
        |k| (r * gc + k.g) as c_int,
        |k| (k.peer * gc + k.g) as c_int,
        a2a,
        &rv,
    )?;
    setup.proxy_connect(r, &rv, STEP_LIMIT)?;
    super::versions::record_tos();
    let cap = nccl::version() < 230;
    let counters;
    {
        let gdr = setup.gdr_recv;
        let mut eng = Engine::new(&mut setup, max_recvs as usize, cap);
        eng.use_gdr = gdr;
        let mut opid = 0usize;
        if abort {
            // ncclCommAbort mid-collective: the progress thread stops on abortFlag with sends and
            // receives posted; proxyFree then deregisters and closes without testing them again.
            // Every rank aborts (the application calls ncclCommAbort on all of them); the
            // emulator lines the ranks up after their progress threads stopped so that the
            // closes below meet requests still posted on both sides, not a peer still sending.
            let proto = Proto::Simple;
            let mut ops = ring_ops(&eng, role, ci, proto, 0, 1 << 22);
            let at = AbortAt {
                sends_posted: 3,
                recvs_completed: 1,
            };
            if let Err(e) = eng.run(&mut ops, STEP_LIMIT, Some(at)) {
                // A data call failing because a peer went first is NCCL's async error path
                // (ncclProxyProgress stores asyncResult; the application then aborts).
                say(&format!("ABORT-PATH-ERROR {e}"));
            }
            let (sends, recvs) = super::progress::in_flight(&ops);
            say(&format!(
                "ABORTED untested_sends={sends} pending_recvs={recvs}"
            ));
            rv.barrier("aborted", r, n, STEP_LIMIT)?;
        } else {
            for _ in 0..role.iters {
                if a2a {
                    for deltas in a2a_batches(n, gc) {
                        let mut ops = a2a_ops(&eng, role, ci, opid, &deltas, gc);
                        opid += 1;
                        eng.run(&mut ops, STEP_LIMIT, None)?;
                    }
                } else {
                    for &proto in &role.protos {
                        let mut ops = ring_ops(&eng, role, ci, proto, opid, role.bytes);
                        opid += 1;
                        eng.run(&mut ops, STEP_LIMIT, None)?;
                    }
                }
            }
        }
        counters = eng.c.clone();
    }
    if !abort && max_recvs == 1 && counters.irecv_grouped != 0 {
        return Err("grouped irecv with maxRecvs = 1".into());
    }
    // ncclCommDestroy (no barrier with the peers before the proxy frees its connections).
    setup.free()?;
    nccl.comm_finalize()?;
    Ok(counters)
}

/// A ring all-reduce: per channel one send op (to next) and one recv op (from prev), each its own
/// ncclProxyArgs with one sub: ProxyAppend (src/proxy.cc, 2.20-2.30) only merges ops into one
/// args as subs for shared (p2p) connections with the same opCount; ring connections append
/// through their own connection->proxyAppend. sub->nbytes = stepSize*sliceSteps (src/enqueue.cc).
fn ring_ops(
    eng: &Engine,
    role: &Role,
    ci: usize,
    proto: Proto,
    opid: usize,
    bytes: usize,
) -> Vec<Args> {
    let (r, n, nch) = (role.rank, role.nranks, role.nch);
    let (prev, next) = ((r + n - 1) % n, (r + 1) % n);
    let (slice, chunk) = proto.ring_steps();
    let nbytes = proto.step_size() * slice as usize;
    let mut ops = Vec::new();
    for ch in 0..nch {
        for (send, peer) in [(true, next), (false, prev)] {
            let sender = if send { r } else { prev };
            let m = plan::ring_allreduce(proto, n, nch, ch, sender, bytes);
            let seeds = (0..m.len())
                .map(|k| plan::seed(sender, ch, opid * 4096 + k, ci))
                .collect();
            let conn = eng.s.find(send, Key { peer, ch, g: 0 });
            let sub = Sub::new(conn, ch, m, seeds, slice, nbytes);
            let mut a = Args::new(send, proto, slice, chunk, false, vec![sub]);
            a.nchannels = nch as c_int;
            ops.push(a);
        }
    }
    ops
}

/// p2p ops per channel and direction batched together at most: NCCL_MAX_WORK_ELEMENTS_P2P = 16
/// elements, sends and receives (src/include/device.h 2.20-2.23), NCCL_MAX_DEV_WORK_P2P_PER_BATCH
/// = 8 (src/include/device.h 2.24-2.30); it also keeps maxDepth = NCCL_SHARED_STEPS/nsubs >= 1.
const MAX_P2P_SUBS: usize = 8;

/// The deltas of NCCL's p2p schedule for all-to-all (send to r+delta, receive from r-delta:
/// p2pSendOrder/p2pRecvOrder in src/init.cc 2.20, comm->p2pSchedule 2.24-2.30; NCCL permutes the
/// deltas, the emulator takes them 1..P-1), in batches whose subs fit one ncclProxyArgs.
pub(crate) fn a2a_batches(n: usize, gc: usize) -> Vec<Vec<usize>> {
    let per = (MAX_P2P_SUBS / gc).max(1);
    (1..n)
        .collect::<Vec<_>>()
        .chunks(per)
        .map(|c| c.to_vec())
        .collect()
}

/// One batch of an all-to-all: per channel and direction ONE ncclProxyArgs whose subs are every
/// (delta, g) stream of the batch: ProxyAppend merges shared (p2p) ops with the same opCount
/// through localPeers[tpLocalRank]->{send,recv}.proxyAppend[channelId] (src/proxy.cc 2.20-2.30).
/// Subs are appended g-major, so that subs sharing a recvComm are NOT adjacent and
/// recvProxyProgress's grouping must swap them together. SIMPLE over the shared buffers
/// (resources->shared = 1), sliceSteps = chunkSteps = 1, stepSize = p2pChunkSize,
/// sub->nbytes = min(bytes, chunkSize) (src/proxy.cc 2.20, src/enqueue.cc 2.24+).
fn a2a_ops(
    eng: &Engine,
    role: &Role,
    ci: usize,
    opid: usize,
    deltas: &[usize],
    gc: usize,
) -> Vec<Args> {
    let (r, n, nch) = (role.rank, role.nranks, role.nch);
    let per_peer = role.bytes / (n - 1);
    let mut ops = Vec::new();
    for ch in 0..nch {
        let mut send = Vec::new();
        let mut recv = Vec::new();
        for g in 0..gc {
            for &delta in deltas {
                let (to, from) = ((r + delta) % n, (r + n - delta) % n);
                let stream = |sender: usize| {
                    let total = plan::a2a_stream_bytes(per_peer, nch, gc, delta, ch, g);
                    let abs = ((sender * n + delta) * nch + ch) as u64 * (per_peer as u64 + 4096);
                    let m = plan::p2p_msgs(total, abs);
                    let seeds = (0..m.len())
                        .map(|k| plan::seed(sender * gc + g, ch, opid * 4096 + k, ci))
                        .collect();
                    (m, seeds, total.min(P2P_CHUNK))
                };
                let (m, seeds, nbytes) = stream(r);
                send.push(Sub::new(
                    eng.s.find(true, Key { peer: to, ch, g }),
                    ch,
                    m,
                    seeds,
                    1,
                    nbytes,
                ));
                let (m, seeds, nbytes) = stream(from);
                recv.push(Sub::new(
                    eng.s.find(false, Key { peer: from, ch, g }),
                    ch,
                    m,
                    seeds,
                    1,
                    nbytes,
                ));
            }
        }
        // DQPLB_EMU_A2A_SPLIT=1: each g is the op of another rank of one process sharing this
        // proxy and its comms (tags differ per g: tpRank), so each g is its own ncclProxyArgs
        // (ProxyAppend merges per tpLocalRank only), over one shared pool. The progress loop
        // offers ops in its list order, and the two sides' lists need not agree: the sender's is
        // taken in reverse, so its first isend carries a tag the receiver's head group lacks;
        // net_ib answers a NULL request and the proxy retries (sendProxyProgress, net.cc).
        let split = std::env::var("DQPLB_EMU_A2A_SPLIT").as_deref() == Ok("1") && gc > 1;
        let per_dir: Vec<(bool, Vec<Sub>)> = if split {
            let mut out = Vec::new();
            for (dir, subs) in [(true, send), (false, recv)] {
                let total = subs.len() as u64;
                let per_g = subs.len() / gc;
                let mut groups: Vec<Vec<Sub>> = (0..gc).map(|_| Vec::new()).collect();
                for (i, mut sub) in subs.into_iter().enumerate() {
                    sub.pool = Some((i as u64, total));
                    groups[i / per_g].push(sub);
                }
                if dir {
                    groups.reverse();
                }
                out.extend(groups.into_iter().map(|g| (dir, g)));
            }
            out
        } else {
            vec![(true, send), (false, recv)]
        };
        for (dir, subs) in per_dir {
            let mut a = Args::new(dir, Proto::Simple, 1, 1, true, subs);
            // collAPI of the p2p tasks (enqueue.cc 2.28-2.30): ncclAlltoAll, or grouped
            // ncclSend/ncclRecv (DQPLB_EMU_A2A_API=sendrecv); nPeers = the batch's peers.
            a.coll_api = match std::env::var("DQPLB_EMU_A2A_API").as_deref() {
                Ok("sendrecv") if dir => super::versions::FUNC_SEND,
                Ok("sendrecv") => super::versions::FUNC_RECV,
                _ => super::versions::FUNC_ALLTOALL,
            };
            a.npeers = deltas.len() as c_int;
            a.nchannels = nch as c_int;
            ops.push(a);
        }
    }
    ops
}
