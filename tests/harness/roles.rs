//! The peer roles a child process plays (selected by DQPLB_HARNESS_ROLE): plan receiver and
//! sender, one-thread self-connect, and the endless 64 MiB streamers used by the peer-kill test.

use super::driver::{CallError, Net, Ptr, Pump, Watchdog, MAX_RECVS};
use super::listen_handle;
use super::pattern::{self, Msg, CANARY};
use dqplb_test_support::dl::{self, Plugin};
use dqplb_test_support::logger::CLogger;
use dqplb_test_support::nccl::{
    HANDLE_BYTES, INVALID_ARGUMENT, LOG_INFO, LOG_WARN, MAX_REQUESTS, REMOTE_ERROR,
};
use dqplb_test_support::spawn::say;
use std::io::BufRead;
use std::time::{Duration, Instant};

pub(crate) const TAG: i32 = 1;
const SETUP_LIMIT: Duration = Duration::from_secs(60);
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// Extra buffer space for the unmatched operations left outstanding at close.
const EXTRA: usize = 4096;

/// Settings passed from the test to its children through the environment.
pub(crate) struct RoleCfg {
    pub seed: u64,
    pub cycles: usize,
    pub random: usize,
    pub big: bool,
}

fn env_num(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|e| format!("{name}={v}: {e}")),
        Err(_) => Ok(default),
    }
}

impl RoleCfg {
    pub(crate) fn from_env() -> Result<RoleCfg, String> {
        Ok(RoleCfg {
            seed: env_num("DQPLB_HARNESS_SEED", 0x5eed)?,
            cycles: env_num("DQPLB_HARNESS_CYCLES", 3)? as usize,
            random: env_num("DQPLB_HARNESS_RANDOM", 24)? as usize,
            big: env_num("DQPLB_HARNESS_BIG", 1)? != 0,
        })
    }
}

fn read_line() -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading from the parent: {e}"))?;
    Ok(line)
}

fn expect_line(want: &str) -> Result<(), String> {
    let l = read_line()?;
    if l.trim() != want {
        return Err(format!("expected {want:?} from the parent, got {l:?}"));
    }
    Ok(())
}

/// DQPLB_HARNESS_STRICT_CLOSE=send|recv: that side closes as soon as its last operation is
/// done, without waiting for the peer (NCCL may do this: ncclCommDestroy right after a send).
fn strict_close() -> String {
    std::env::var("DQPLB_HARNESS_STRICT_CLOSE").unwrap_or_default()
}

/// Accepts success (request or NULL) or ncclRemoteError (docs/records/abi.md: a closed or dead peer)
/// from a call racing the peer's close.
fn peer_may_be_gone(r: Result<Option<Ptr>, CallError>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.rc == REMOTE_ERROR => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn read_handle() -> Result<[u8; HANDLE_BYTES], String> {
    let line = read_line()?;
    let hex = line
        .trim()
        .strip_prefix("HANDLE ")
        .ok_or_else(|| format!("expected a HANDLE line, got {line:?}"))?;
    listen_handle::from_hex(hex)
}

fn err(e: CallError) -> String {
    e.to_string()
}

/// Loads the plugin, checks its name and initialises it; returns the open plugin and its calls.
fn open(logger: &CLogger) -> Result<(Plugin, Net), String> {
    let plugin = Plugin::load(&dl::plugin_path())?;
    if plugin.name() != "DQPLB" {
        return Err(format!(
            "plugin name is {:?}, expected \"DQPLB\"",
            plugin.name()
        ));
    }
    let net = Net::new(&plugin);
    net.init_and_check(logger).map_err(err)?;
    Ok((plugin, net))
}

fn layout(plan: &[Msg]) -> (Vec<usize>, usize) {
    let mut offs = Vec::with_capacity(plan.len());
    let mut at = 0;
    for m in plan {
        offs.push(at);
        at += m.capacity;
    }
    (offs, at)
}

pub(crate) fn run_from_env() -> Result<(), String> {
    let role =
        std::env::var("DQPLB_HARNESS_ROLE").map_err(|_| "DQPLB_HARNESS_ROLE unset".to_string())?;
    let cfg = RoleCfg::from_env()?;
    let logger = CLogger::load()?;
    let r = match role.as_str() {
        "receiver" => receiver(&cfg, &logger),
        "sender" => sender(&cfg, &logger),
        "self" => self_connect(&cfg, &logger),
        "self-threads" => self_threads(&cfg, &logger),
        "self-grouped" => self_grouped(&logger),
        "short-receiver" => short_receiver(&logger),
        "bad-init" => bad_init(&logger),
        "long-sender" => long_sender(&logger),
        "stream-receiver" => stream_receiver(&logger),
        "stream-sender" => stream_sender(&logger),
        r => Err(format!("unknown role {r:?}")),
    };
    // Every WARN the plugin logged, one "WARN <text>" line each, for the tests to count.
    for w in logger.warnings() {
        say(&format!("WARN {w}"));
    }
    r
}

fn receiver(cfg: &RoleCfg, logger: &CLogger) -> Result<(), String> {
    for cycle in 0..cfg.cycles {
        let (plugin, net) = open(logger)?;
        let (handle, lc) = net.listen(0).map_err(err)?;
        let info = listen_handle::parse_handle(&handle)?;
        say(&format!(
            "HANDLE-INFO version={} family={} addr={} port={} fabric={}",
            info.version, info.family, info.addr, info.port, info.fabric_id
        ));
        say(&format!("HANDLE {}", listen_handle::to_hex(&handle)));
        let rc = net.accept(lc, SETUP_LIMIT).map_err(err)?;
        let seed = cfg.seed + cycle as u64;
        let plan = pattern::plan(seed, cfg.random, cfg.big);
        let (offs, total) = layout(&plan);
        let mut arena = vec![CANARY; total + 2 * EXTRA];
        let mh = net.reg_mr(rc, &mut arena).map_err(err)?;
        let base = arena.as_mut_ptr();
        let mut pump = Pump::new(plan.len());
        let mut dog = Watchdog::new(STALL_LIMIT);
        let mut bytes = 0usize;
        let slow = strict_close() == "send";
        while !pump.finished() {
            let progressed = pump
                .step(
                    &net,
                    // SAFETY: each message has its own disjoint region of the registered arena.
                    |i| unsafe { net.irecv(rc, base.add(offs[i]), plan[i].capacity, TAG, mh) },
                    |i, size| {
                        if size != plan[i].size {
                            return Err(CallError {
                                what: format!(
                                    "message {i}: test reported {size} bytes, sent {}",
                                    plan[i].size
                                ),
                                rc: 0,
                            });
                        }
                        // SAFETY: the request is done; the plugin no longer writes this region.
                        let got = unsafe {
                            std::slice::from_raw_parts(base.add(offs[i]), plan[i].capacity)
                        };
                        pattern::verify(got, size, seed, i as u64)
                            .map_err(|what| CallError { what, rc: 0 })?;
                        bytes += size;
                        if slow {
                            // Hand completions back slowly, so the early-closing sender is
                            // certainly gone while some finished receives are still untested.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Ok(())
                    },
                )
                .map_err(err)?;
            dog.tick(progressed, || {
                format!("receiving message {} of {}", pump.oldest(), plan.len())
            })
            .map_err(err)?;
        }
        say(&format!("VERIFIED {cycle}"));
        if strict_close() != "recv" {
            expect_line(&format!("SENT {cycle}"))?;
        }
        // Close with receives outstanding: one may match the sender's extra send, one never will.
        // The sender may already have closed: a remote/system error is then a fine answer.
        for k in 0..2 {
            // SAFETY: the extra regions lie at the end of the registered arena.
            peer_may_be_gone(unsafe {
                net.irecv(rc, base.add(total + k * EXTRA), EXTRA, TAG, mh)
            })?;
        }
        net.dereg_mr(rc, mh).map_err(err)?;
        net.close_recv(rc).map_err(err)?;
        net.close_listen(lc).map_err(err)?;
        drop(arena);
        plugin.lib.close()?;
        say(&format!(
            "CYCLE {cycle} received {} messages, {bytes} bytes, verified; plugin logged {} WARN {} INFO",
            plan.len(),
            logger.count(LOG_WARN),
            logger.count(LOG_INFO)
        ));
    }
    Ok(())
}

fn sender(cfg: &RoleCfg, logger: &CLogger) -> Result<(), String> {
    for cycle in 0..cfg.cycles {
        let (plugin, net) = open(logger)?;
        let mut handle = read_handle()?;
        let sc = net.connect(0, &mut handle, SETUP_LIMIT).map_err(err)?;
        let seed = cfg.seed + cycle as u64;
        let plan = pattern::plan(seed, cfg.random, cfg.big);
        let (offs, total) = layout(&plan);
        let mut arena = vec![0u8; total + EXTRA];
        for (i, m) in plan.iter().enumerate() {
            pattern::fill(&mut arena[offs[i]..offs[i] + m.size], seed, i as u64);
        }
        let mh = net.reg_mr(sc, &mut arena).map_err(err)?;
        let base = arena.as_mut_ptr();
        let slow = strict_close() == "recv";
        let mut pump = Pump::new(plan.len());
        pump.null_sizes = net.null_dev_handles;
        let mut dog = Watchdog::new(STALL_LIMIT);
        while !pump.finished() {
            let progressed = pump
                .step(
                    &net,
                    // SAFETY: each message lies in the registered arena and is not modified.
                    |i| unsafe { net.isend(sc, base.add(offs[i]), plan[i].size, TAG, mh) },
                    |i, size| {
                        if size != usize::MAX && size != plan[i].size {
                            return Err(CallError {
                                what: format!(
                                    "send {i}: test reported {size} bytes, posted {}",
                                    plan[i].size
                                ),
                                rc: 0,
                            });
                        }
                        if slow {
                            // The early-closing receiver is gone before these are all tested.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Ok(())
                    },
                )
                .map_err(err)?;
            dog.tick(progressed, || {
                format!("sending message {} of {}", pump.oldest(), plan.len())
            })
            .map_err(err)?;
        }
        say(&format!("SENT {cycle}"));
        if strict_close() != "send" {
            // Like the end of a collective: both sides are done before either closes.
            expect_line(&format!("VERIFIED {cycle}"))?;
        }
        // Close with a send outstanding (it may match the receiver's first extra receive).
        // SAFETY: the extra region lies at the end of the registered arena.
        peer_may_be_gone(unsafe { net.isend(sc, base.add(total), EXTRA, TAG, mh) })?;
        net.dereg_mr(sc, mh).map_err(err)?;
        net.close_send(sc).map_err(err)?;
        drop(arena);
        plugin.lib.close()?;
        say(&format!("CYCLE {cycle} sent {} messages", plan.len()));
    }
    Ok(())
}

/// NCCL's GDR-probe pattern: one thread listens, then alternates connect/accept until both
/// complete, and moves the whole plan both ways through its own loopback connection.
fn self_connect(cfg: &RoleCfg, logger: &CLogger) -> Result<(), String> {
    for cycle in 0..cfg.cycles {
        let (plugin, net) = open(logger)?;
        let seed = cfg.seed + 100 + cycle as u64;
        let n = self_transfer(&net, seed, cfg.random, cfg.big)?;
        plugin.lib.close()?;
        say(&format!("CYCLE {cycle} self-connect moved {n} messages"));
    }
    Ok(())
}

/// Several communicators at once, as NCCL runs one proxy thread per communicator: `threads`
/// threads each set up their own self-connection on the shared plugin and move a plan.
fn self_threads(cfg: &RoleCfg, logger: &CLogger) -> Result<(), String> {
    let threads = env_num("DQPLB_HARNESS_THREADS", 4)?;
    let (plugin, net) = open(logger)?;
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let net = &net;
                s.spawn(move || self_transfer(net, cfg.seed + 1000 + t, cfg.random, false))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    for (t, r) in results.iter().enumerate() {
        let n = r.as_ref().map_err(|e| format!("thread {t}: {e}"))?;
        say(&format!("THREAD {t} moved {n} messages"));
    }
    plugin.lib.close()
}

/// listen, connect/accept alternately on this thread, transfer the plan both ways, close.
fn self_transfer(net: &Net, seed: u64, random: usize, big: bool) -> Result<usize, String> {
    let (mut handle, lc) = net.listen(0).map_err(err)?;
    let (mut sc, mut rc) = (None::<Ptr>, None::<Ptr>);
    let start = Instant::now();
    while sc.is_none() || rc.is_none() {
        if sc.is_none() {
            sc = net.connect_once(0, &mut handle).map_err(err)?;
        }
        if rc.is_none() {
            rc = net.accept_once(lc).map_err(err)?;
        }
        if start.elapsed() > SETUP_LIMIT {
            return Err(format!(
                "self-connect: connect {} / accept {} after {SETUP_LIMIT:?}",
                sc.is_some(),
                rc.is_some()
            ));
        }
    }
    let (sc, rc) = (
        sc.unwrap_or(std::ptr::null_mut()),
        rc.unwrap_or(std::ptr::null_mut()),
    );
    let plan = pattern::plan(seed, random, big);
    let (offs, total) = layout(&plan);
    let mut src = vec![0u8; total];
    for (i, m) in plan.iter().enumerate() {
        pattern::fill(&mut src[offs[i]..offs[i] + m.size], seed, i as u64);
    }
    let mut dst = vec![CANARY; total];
    let smh = net.reg_mr(sc, &mut src).map_err(err)?;
    let rmh = net.reg_mr(rc, &mut dst).map_err(err)?;
    let (sbase, rbase) = (src.as_mut_ptr(), dst.as_mut_ptr());
    let (mut sp, mut rp) = (Pump::new(plan.len()), Pump::new(plan.len()));
    sp.null_sizes = net.null_dev_handles;
    let mut dog = Watchdog::new(STALL_LIMIT);
    while !(sp.finished() && rp.finished()) {
        // SAFETY (both closures): disjoint regions of registered buffers, as in the 2-process roles.
        let a = sp
            .step(
                net,
                |i| unsafe { net.isend(sc, sbase.add(offs[i]), plan[i].size, TAG, smh) },
                |_, _| Ok(()),
            )
            .map_err(err)?;
        let b = rp
            .step(
                net,
                |i| unsafe { net.irecv(rc, rbase.add(offs[i]), plan[i].capacity, TAG, rmh) },
                |i, size| {
                    if size != plan[i].size {
                        return Err(CallError {
                            what: format!("message {i}: got {size} bytes, sent {}", plan[i].size),
                            rc: 0,
                        });
                    }
                    let got =
                        unsafe { std::slice::from_raw_parts(rbase.add(offs[i]), plan[i].capacity) };
                    pattern::verify(got, size, seed, i as u64)
                        .map_err(|what| CallError { what, rc: 0 })
                },
            )
            .map_err(err)?;
        dog.tick(a || b, || {
            format!("self-connect send {} / recv {}", sp.oldest(), rp.oldest())
        })
        .map_err(err)?;
    }
    net.dereg_mr(sc, smh).map_err(err)?;
    net.dereg_mr(rc, rmh).map_err(err)?;
    net.close_send(sc).map_err(err)?;
    net.close_recv(rc).map_err(err)?;
    net.close_listen(lc).map_err(err)?;
    drop((src, dst));
    Ok(plan.len())
}

/// listen, then connect/accept alternately on this thread: (listenComm, sendComm, recvComm).
fn self_pair(net: &Net) -> Result<(Ptr, Ptr, Ptr), String> {
    let (mut handle, lc) = net.listen(0).map_err(err)?;
    let (mut sc, mut rc) = (None::<Ptr>, None::<Ptr>);
    let start = Instant::now();
    while sc.is_none() || rc.is_none() {
        if sc.is_none() {
            sc = net.connect_once(0, &mut handle).map_err(err)?;
        }
        if rc.is_none() {
            rc = net.accept_once(lc).map_err(err)?;
        }
        if start.elapsed() > SETUP_LIMIT {
            return Err(format!("self-connect did not finish in {SETUP_LIMIT:?}"));
        }
    }
    match (sc, rc) {
        (Some(s), Some(r)) => Ok((lc, s, r)),
        _ => Err("self-connect lost a comm".into()),
    }
}

/// Retries `f` while it returns a NULL request, up to STALL_LIMIT.
fn until_request(
    what: &str,
    mut f: impl FnMut() -> Result<Option<Ptr>, CallError>,
) -> Result<Ptr, CallError> {
    let start = Instant::now();
    loop {
        if let Some(r) = f()? {
            return Ok(r);
        }
        if start.elapsed() > STALL_LIMIT {
            return Err(CallError {
                what: format!("{what}: NULL request for {STALL_LIMIT:?}"),
                rc: 0,
            });
        }
        std::thread::yield_now();
    }
}

/// Capacity of every buffer of a grouped receive in `self_grouped`.
const GROUP_CAP: usize = 100_000;

/// Grouped receives through the C ABI as NCCL's recvProxyProgress posts them (n = 1..=8, zero-
/// byte buffers, sends in a permuted tag order), the n and tag checks, then aws-ofi-nccl's
/// inflight_close: 32 receives posted and the recvComm closed before any send.
fn self_grouped(logger: &CLogger) -> Result<(), String> {
    const SEED: u64 = 0x6e0b;
    let (plugin, net) = open(logger)?;
    let (lc, sc, rc) = self_pair(&net)?;
    let mut src = vec![0u8; MAX_RECVS * GROUP_CAP];
    let mut dst = vec![CANARY; MAX_RECVS * GROUP_CAP];
    let smh = net.reg_mr(sc, &mut src).map_err(err)?;
    let rmh = net.reg_mr(rc, &mut dst).map_err(err)?;
    let (sbase, rbase) = (src.as_mut_ptr(), dst.as_mut_ptr());
    let mut moved = 0;
    for n in 1..=MAX_RECVS {
        for round in 0..3 {
            let sizes: Vec<usize> = (0..n)
                .map(|k| match (k + round) % 5 {
                    0 => 0,
                    1 => 1,
                    2 => 4096 + k,
                    3 => 70_000 + 13 * k,
                    _ => 129,
                })
                .collect();
            let index = |k: usize| (n * 100 + round * 10 + k) as u64;
            for (k, &size) in sizes.iter().enumerate() {
                let at = k * GROUP_CAP;
                pattern::fill(&mut src[at..at + size], SEED, index(k));
            }
            dst.fill(CANARY);
            let tag = |k: usize| 100 + k as i32;
            let bufs: Vec<(*mut u8, usize, i32)> = (0..n)
                // SAFETY: inside the registered receive arena.
                .map(|k| (unsafe { rbase.add(k * GROUP_CAP) }, GROUP_CAP, tag(k)))
                .collect();
            // SAFETY: the buffers stay valid and untouched until the receive completes.
            let rreq = until_request("irecv", || unsafe { net.irecv_group(rc, &bufs, rmh) })
                .map_err(err)?;
            let mut order: Vec<usize> = (0..n).rev().collect();
            order.rotate_left(round % n);
            let mut sreqs = Vec::new();
            for &k in &order {
                // SAFETY: inside the registered send arena, valid until the send completes.
                let r = until_request("isend", || unsafe {
                    net.isend(sc, sbase.add(k * GROUP_CAP), sizes[k], tag(k), smh)
                })
                .map_err(err)?;
                sreqs.push(Some(r));
            }
            let (mut got, start) = (None, Instant::now());
            while got.is_none() || sreqs.iter().any(Option::is_some) {
                for r in sreqs.iter_mut() {
                    if let Some(q) = *r {
                        if net.test(q).map_err(err)?.is_some() {
                            *r = None;
                        }
                    }
                }
                if got.is_none() {
                    got = net.test_group(rreq, n).map_err(err)?;
                }
                if start.elapsed() > STALL_LIMIT {
                    return Err(format!("group of {n} (round {round}) stalled"));
                }
            }
            if got.as_deref() != Some(&sizes[..]) {
                return Err(format!(
                    "group of {n} (round {round}): sizes {got:?}, sent {sizes:?}"
                ));
            }
            for (k, &size) in sizes.iter().enumerate() {
                let at = k * GROUP_CAP;
                pattern::verify(&dst[at..at + GROUP_CAP], size, SEED, index(k))
                    .map_err(|e| format!("group of {n} (round {round}) buffer {k}: {e}"))?;
            }
            moved += n;
        }
    }
    say(&format!("GROUPED moved {moved} buffers"));
    for n in [0usize, MAX_RECVS + 1] {
        let bufs = vec![(rbase, 16usize, 1); n];
        // SAFETY: as above; the plugin must refuse before touching anything.
        match unsafe { net.irecv_group(rc, &bufs, rmh) } {
            Err(e) if e.rc == INVALID_ARGUMENT => {}
            other => return Err(format!("irecv(n = {n}) answered {other:?}")),
        }
    }
    say("GROUPED n=0 and n=9 rejected with ncclInvalidArgument");
    // SAFETY: as above.
    let bufs = unsafe { [(rbase, 64usize, 1), (rbase.add(GROUP_CAP), 64, 2)] };
    // SAFETY: as above.
    until_request("irecv", || unsafe { net.irecv_group(rc, &bufs, rmh) }).map_err(err)?;
    // A tag absent from the group is no error: net_ib's isend answers a NULL request until a
    // receive with that tag is next (ncclIbIsend, 2.20.3-2.30.7); NCCL's proxy retries.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        // SAFETY: as above.
        match unsafe { net.isend(sc, sbase, 8, 3, smh) } {
            Ok(None) => std::thread::yield_now(),
            other => {
                return Err(format!(
                    "isend with a tag absent from the group gave {other:?}"
                ))
            }
        }
    }
    say("GROUPED a tag absent from the group waits (NULL request)");
    net.dereg_mr(sc, smh).map_err(err)?;
    net.dereg_mr(rc, rmh).map_err(err)?;
    net.close_send(sc).map_err(err)?;
    net.close_recv(rc).map_err(err)?;
    net.close_listen(lc).map_err(err)?;

    let (lc, sc, rc) = self_pair(&net)?;
    const N: usize = MAX_REQUESTS;
    const MSG: usize = 4096;
    let mut src = vec![0x11u8; N * MSG];
    let mut dst = vec![0u8; N * MSG];
    let smh = net.reg_mr(sc, &mut src).map_err(err)?;
    let rmh = net.reg_mr(rc, &mut dst).map_err(err)?;
    let (sbase, rbase) = (src.as_mut_ptr(), dst.as_mut_ptr());
    for i in 0..N {
        // SAFETY: inside the registered arena; the comm is closed before the arena is dropped.
        until_request("irecv", || unsafe {
            net.irecv(rc, rbase.add(i * MSG), MSG, TAG, rmh)
        })
        .map_err(err)?;
    }
    net.dereg_mr(rc, rmh).map_err(err)?;
    net.close_recv(rc).map_err(err)?;
    let mut sreqs = Vec::new();
    for i in 0..N {
        // SAFETY: inside the registered send arena, valid until the comm is closed.
        let r = until_request("isend", || unsafe {
            net.isend(sc, sbase.add(i * MSG), MSG, TAG, smh)
        })
        .map_err(|e| format!("isend {i} of a receive announced before the close: {e}"))?;
        sreqs.push(r);
    }
    for (i, &q) in sreqs.iter().enumerate() {
        let start = Instant::now();
        loop {
            match net.test(q) {
                Ok(None) if start.elapsed() < STALL_LIMIT => std::thread::yield_now(),
                Ok(r) => return Err(format!("send {i} to a closed receiver: test gave {r:?}")),
                Err(e) if e.rc == REMOTE_ERROR => break,
                Err(e) => return Err(format!("send {i}: {e}, expected ncclRemoteError")),
            }
        }
    }
    // SAFETY: as above.
    match unsafe { net.isend(sc, sbase, MSG, TAG, smh) } {
        Err(e) if e.rc == REMOTE_ERROR => {}
        other => return Err(format!("isend beyond the posted receives gave {other:?}")),
    }
    say(&format!(
        "INFLIGHT-CLOSE {N} sends accepted after the receiver closed, test gave ncclRemoteError"
    ));
    net.dereg_mr(sc, smh).map_err(err)?;
    net.close_send(sc).map_err(err)?;
    net.close_listen(lc).map_err(err)?;
    drop((src, dst));
    plugin.lib.close()
}

const STREAM_MSG: usize = 64 << 20;
const STREAM_SEED: u64 = 0xfeed;

/// Receives 64 MiB messages until the sender dies; reports the error code, or HANG.
fn stream_receiver(logger: &CLogger) -> Result<(), String> {
    let (_plugin, net) = open(logger)?;
    let (handle, lc) = net.listen(0).map_err(err)?;
    say(&format!("HANDLE {}", listen_handle::to_hex(&handle)));
    let rc = net.accept(lc, SETUP_LIMIT).map_err(err)?;
    let mut bufs = vec![vec![CANARY; STREAM_MSG]; 2];
    let mhs = bufs
        .iter_mut()
        .map(|b| net.reg_mr(rc, b))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let bases: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let mut pump = Pump::new(1 << 20);
    pump.window = 2;
    let mut last = Instant::now();
    loop {
        let r = pump.step(
            &net,
            // SAFETY: two alternating registered buffers, at most two receives in flight.
            |i| unsafe { net.irecv(rc, bases[i % 2], STREAM_MSG, TAG, mhs[i % 2]) },
            |i, size| {
                let got = unsafe { std::slice::from_raw_parts(bases[i % 2], STREAM_MSG) };
                if size != STREAM_MSG {
                    return Err(CallError {
                        what: format!("stream message {i}: {size} bytes"),
                        rc: 0,
                    });
                }
                pattern::verify(got, size, STREAM_SEED, (i % 2) as u64)
                    .map_err(|what| CallError { what, rc: 0 })?;
                say(&format!("GOT {i}"));
                Ok(())
            },
        );
        match r {
            Ok(true) => last = Instant::now(),
            Ok(false) => {
                if last.elapsed() > Duration::from_secs(20) {
                    say("HANG");
                    return Err(
                        "receiver: no completion and no error 20 s after the last progress".into(),
                    );
                }
                std::thread::yield_now();
            }
            Err(e) if e.rc != 0 => {
                say(&format!("ERROR {} {}", e.rc, e.what));
                let closed = net.close_recv(rc);
                say(&format!(
                    "CLOSED {}",
                    closed.map(|_| 0).unwrap_or_else(|e| e.rc)
                ));
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Sends 64 MiB messages, two in flight, until killed.
fn stream_sender(logger: &CLogger) -> Result<(), String> {
    let (_plugin, net) = open(logger)?;
    let mut handle = read_handle()?;
    let sc = net.connect(0, &mut handle, SETUP_LIMIT).map_err(err)?;
    let mut bufs = vec![vec![0u8; STREAM_MSG]; 2];
    for (k, b) in bufs.iter_mut().enumerate() {
        pattern::fill(b, STREAM_SEED, k as u64);
    }
    let mhs = bufs
        .iter_mut()
        .map(|b| net.reg_mr(sc, b))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let bases: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let mut pump = Pump::new(1 << 20);
    pump.window = 2;
    let mut dog = Watchdog::new(STALL_LIMIT);
    loop {
        let r = pump.step(
            &net,
            // SAFETY: two registered buffers that are never modified.
            |i| unsafe { net.isend(sc, bases[i % 2], STREAM_MSG, TAG, mhs[i % 2]) },
            |i, _| {
                say(&format!("SENT {i}"));
                Ok(())
            },
        );
        match r {
            Ok(p) => dog.tick(p, || "streaming".into()).map_err(err)?,
            Err(e) if e.rc != 0 => {
                say(&format!("ERROR {} {}", e.rc, e.what));
                let closed = net.close_send(sc);
                say(&format!(
                    "CLOSED {}",
                    closed.map(|_| 0).unwrap_or_else(|e| e.rc)
                ));
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

const LONG: usize = 4096;
const SHORT: usize = 1024;

/// Posts a 1 KiB receive for a 4 KiB send: as net_ib, the send is cut to the receive's size
/// (ncclIbIsend, 2.20.3-2.30.7), test() reports 1 KiB, nothing is written past the buffer.
fn short_receiver(logger: &CLogger) -> Result<(), String> {
    let (_plugin, net) = open(logger)?;
    let (handle, lc) = net.listen(0).map_err(err)?;
    say(&format!("HANDLE {}", listen_handle::to_hex(&handle)));
    let rc = net.accept(lc, SETUP_LIMIT).map_err(err)?;
    let mut arena = vec![CANARY; 2 * LONG];
    let mh = net.reg_mr(rc, &mut arena).map_err(err)?;
    let base = arena.as_mut_ptr();
    let start = Instant::now();
    // SAFETY: the first SHORT bytes of the registered arena are the receive buffer.
    let req = loop {
        match unsafe { net.irecv(rc, base, SHORT, TAG, mh) } {
            Ok(Some(r)) => break r,
            Ok(None) if start.elapsed() < STALL_LIMIT => continue,
            Ok(None) => return Err("irecv kept returning a NULL request".into()),
            Err(e) => {
                say(&format!("OVERSIZE irecv rc={}", e.rc));
                return check_canary(&arena);
            }
        }
    };
    let outcome = loop {
        match net.test(req) {
            Ok(Some(n)) => break format!("done {n}"),
            Ok(None) if start.elapsed() < Duration::from_secs(20) => std::thread::yield_now(),
            Ok(None) => {
                return Err("the oversized receive neither failed nor completed in 20 s".into())
            }
            Err(e) => break format!("rc={}", e.rc),
        }
    };
    check_canary(&arena)?;
    if let Some(p) = arena[..SHORT].iter().position(|&b| b != 0x77) {
        return Err(format!("received byte {p} is not the sender's"));
    }
    say(&format!("OVERSIZE test {outcome}"));
    let _ = net.close_recv(rc);
    let _ = net.close_listen(lc);
    Ok(())
}

fn check_canary(arena: &[u8]) -> Result<(), String> {
    match arena[SHORT..].iter().position(|&b| b != CANARY) {
        Some(p) => Err(format!(
            "the plugin wrote past the {SHORT}-byte receive buffer (byte {})",
            SHORT + p
        )),
        None => Ok(()),
    }
}

/// Sends 4 KiB into the short receive; reports how its own request ended.
fn long_sender(logger: &CLogger) -> Result<(), String> {
    let (_plugin, net) = open(logger)?;
    let mut handle = read_handle()?;
    let sc = net.connect(0, &mut handle, SETUP_LIMIT).map_err(err)?;
    let mut buf = vec![0x77u8; LONG];
    let mh = net.reg_mr(sc, &mut buf).map_err(err)?;
    let start = Instant::now();
    let report = loop {
        // SAFETY: buf is registered and outlives the request.
        match unsafe { net.isend(sc, buf.as_mut_ptr(), LONG, TAG, mh) } {
            Ok(Some(r)) => {
                let ended = loop {
                    match net.test(r) {
                        Ok(Some(n)) => break format!("done {n}"),
                        Ok(None) if start.elapsed() < Duration::from_secs(20) => {
                            std::thread::yield_now()
                        }
                        Ok(None) => break "pending".to_string(),
                        Err(e) => break format!("rc={}", e.rc),
                    }
                };
                break ended;
            }
            Ok(None) if start.elapsed() < Duration::from_secs(20) => continue,
            Ok(None) => break "never accepted".to_string(),
            Err(e) => break format!("isend rc={}", e.rc),
        }
    };
    say(&format!("SENDER {report}"));
    let _ = net.close_send(sc);
    Ok(())
}

/// init() under a broken configuration (the test sets a bad NCCL_DQPLB_POLICY): reports the
/// result code and how many WARN lines reached the logger, without crashing the process.
fn bad_init(logger: &CLogger) -> Result<(), String> {
    let plugin = Plugin::load(&dl::plugin_path())?;
    let init = plugin.net.init.ok_or("init is NULL")?;
    // SAFETY: the C logger has ncclDebugLogger_t's type.
    let rc = unsafe { init(Some(logger.logger)) };
    say(&format!("INIT rc={rc} warns={}", logger.count(LOG_WARN)));
    plugin.lib.close()
}
