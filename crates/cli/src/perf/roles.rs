//! The hidden `dqplb perf __role ROLE OPTIONS` child processes: bandwidth receiver/sender and
//! latency pinger/ponger, plugin or raw TCP; they talk to the parent in stdout/stdin lines.

use super::args::{PerfArgs, Role};
use super::bw::{self, Row};
use super::latency;
use super::link::{Link, PluginLink, RawLink};
use super::net::{self, NetErr, NetRes, HANDLE_BYTES};
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const SETUP: Duration = Duration::from_secs(60);

fn say(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn read_handle_line() -> NetRes<String> {
    let mut l = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut l)
        .map_err(|e| NetErr(format!("reading the peer's handle: {e}")))?;
    l.trim()
        .strip_prefix("HANDLE ")
        .map(String::from)
        .ok_or_else(|| NetErr(format!("expected a HANDLE line, got {l:?}")))
}

/// Both sides finished their transfers: tell the parent (who relays it to the peer) and wait for
/// the peer's word, so neither closes a comm the other still completes requests on.
fn barrier() -> NetRes<()> {
    say("DONE".into());
    let mut l = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut l)
        .map_err(|e| NetErr(format!("waiting for the peer to finish: {e}")))?;
    if l.trim() != "DONE" {
        return Err(NetErr(format!("expected DONE from the peer, got {l:?}")));
    }
    Ok(())
}

fn read_plugin_handle() -> NetRes<[u8; HANDLE_BYTES]> {
    let l = read_handle_line()?;
    net::from_hex(&l).ok_or_else(|| NetErr(format!("malformed handle {l:?}")))
}

/// Runs one child process of `dqplb perf`; returns its exit code (1: the run failed, reported
/// on stdout as an ERROR line for the parent).
pub(super) fn run(role: Role, a: &PerfArgs) -> i32 {
    let r = match role {
        Role::BwRecv => bw_side(a, false),
        Role::BwSend => bw_side(a, true),
        Role::LatPing => lat_side(a, true),
        Role::LatPong => lat_side(a, false),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            say(format!("ERROR {}: {e}", role.name()));
            1
        }
    }
}

fn raw_streams(n: usize, sender: bool) -> NetRes<Vec<TcpStream>> {
    let io = |what: &str, e: std::io::Error| NetErr(format!("raw TCP {what}: {e}"));
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    if sender {
        let addr = read_handle_line()?;
        for (i, slot) in streams.iter_mut().enumerate() {
            let mut s = TcpStream::connect(&addr).map_err(|e| io("connect", e))?;
            s.set_nodelay(true).map_err(|e| io("TCP_NODELAY", e))?;
            s.write_all(&(i as u32).to_le_bytes())
                .map_err(|e| io("hello", e))?;
            *slot = Some(s);
        }
    } else {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
        say(format!(
            "HANDLE {}",
            l.local_addr().map_err(|e| io("local_addr", e))?
        ));
        for _ in 0..n {
            let (mut s, _) = l.accept().map_err(|e| io("accept", e))?;
            s.set_nodelay(true).map_err(|e| io("TCP_NODELAY", e))?;
            let mut id = [0u8; 4];
            s.read_exact(&mut id).map_err(|e| io("hello", e))?;
            let i = u32::from_le_bytes(id) as usize;
            match streams.get_mut(i) {
                Some(slot @ None) => *slot = Some(s),
                _ => return Err(NetErr(format!("raw TCP: bad or repeated stream index {i}"))),
            }
        }
    }
    Ok(streams.into_iter().flatten().collect())
}

/// Loads the `--plugin` .so if one is given, init()s the plugin and returns the device to use:
/// 0 for the in-crate plugin; for a `--plugin`, the `--plugin-dev` one or 0, announced to the
/// parent as `DEVICE INDEX NAME`.
fn open_plugin(a: &PerfArgs) -> NetRes<i32> {
    let Some(path) = &a.plugin else {
        net::init()?;
        return Ok(0);
    };
    net::use_plugin(path)?;
    let n = net::init()?;
    let (dev, name) = net::pick_device(n, a.plugin_dev.as_deref())?;
    say(format!("DEVICE {dev} {name}"));
    Ok(dev)
}

fn bw_side(a: &PerfArgs, sender: bool) -> NetRes<()> {
    let mut slots: Vec<Vec<u8>> = (0..a.inflight)
        .map(|_| vec![0u8; a.max_bytes.max(1) as usize])
        .collect();
    for s in &mut slots {
        if sender && !a.check {
            // --no-check sends what the buffer holds: one pattern, written once.
            super::pattern::fill(s, 0);
        } else {
            // Every page is touched before anything is timed, as NCCL's buffers are (allocated
            // and registered first): left untouched, the first message into each of the
            // `inflight` buffers pays its page faults inside the timed loop, all in the one
            // thread that drives the plugin. Not a valid pattern, so a receive that writes
            // nothing is still counted wrong.
            s.fill(0xA5);
        }
    }
    let emit = |r: &Row| {
        if !sender {
            say(r.to_line())
        }
    };
    if a.raw_tcp {
        let n = a.qps.unwrap_or(1) as usize;
        let streams = raw_streams(n, sender)?;
        if a.raw_one_thread() {
            let mut link = super::rawpoll::PollLink::new(streams, sender)?;
            bw::sweep(&mut link, a, &mut slots, sender, emit)?;
        } else {
            let mut link = RawLink::new(streams, sender);
            bw::sweep(&mut link, a, &mut slots, sender, emit)?;
        }
        return Ok(());
    }
    let dev = open_plugin(a)?;
    let (comm, listen) = if sender {
        let mut h = read_plugin_handle()?;
        let (sc, _) = net::establish(dev, Some(&mut h), None, SETUP)?;
        if let Some(l) = net::conn_line() {
            say(format!("CONFIG {l}"));
        }
        (sc, None)
    } else {
        let (h, lc) = net::listen(dev)?;
        say(format!("HANDLE {}", net::to_hex(&h)));
        let (_, rc) = net::establish(dev, None, Some(lc), SETUP)?;
        (rc, Some(lc))
    };
    let mhs = slots
        .iter_mut()
        .map(|s| net::reg_mr(comm, s))
        .collect::<NetRes<Vec<_>>>()?;
    let mut link = PluginLink {
        comm,
        send: sender,
        mhs: mhs.clone(),
    };
    let r = bw::sweep(&mut link as &mut dyn Link, a, &mut slots, sender, emit);
    r?;
    barrier()?;
    for mh in mhs {
        net::dereg_mr(comm, mh)?;
    }
    if sender {
        net::close_send(comm)?;
    } else {
        net::close_recv(comm)?;
    }
    if let Some(l) = listen {
        net::close_listen(l)?;
    }
    // Verbs: the comm's operation counts (logged by the plugin at close), per message sent.
    if let Some(ops) = net::ops_line() {
        let messages: u64 = a
            .sizes()
            .into_iter()
            .map(|s| a.warmup_for(s) + a.iters_for(s))
            .sum();
        let side = if sender { "send" } else { "recv" };
        if let Some(pm) = net::per_message(&ops, messages) {
            eprintln!("dqplb perf: verbs {side} comm ops per message ({messages} messages, warmup included): {pm}");
        }
    }
    Ok(())
}

fn lat_side(a: &PerfArgs, pinger: bool) -> NetRes<()> {
    let iters = a.iters.unwrap_or(10_000);
    let warmup = a.warmup.unwrap_or(1_000);
    let mut samples = if a.raw_tcp {
        let mut s = if pinger {
            say("HANDLE -".into());
            let addr = read_handle_line()?;
            TcpStream::connect(&addr).map_err(|e| NetErr(format!("raw TCP connect {addr}: {e}")))?
        } else {
            let l = latency::raw_listen()?;
            say(format!(
                "HANDLE {}",
                l.local_addr().map_err(|e| NetErr(e.to_string()))?
            ));
            l.accept()
                .map_err(|e| NetErr(format!("raw TCP accept: {e}")))?
                .0
        };
        latency::raw_pingpong(
            &mut s,
            pinger,
            a.min_bytes as usize,
            warmup,
            iters,
            a.raw_one_thread(),
        )?
    } else {
        let dev = open_plugin(a)?;
        let pair = latency::plugin_pair(dev, &|l| say(l), &read_plugin_handle)?;
        if let Some(l) = net::conn_line() {
            say(format!("CONFIG {l}"));
        }
        let s = latency::plugin_pingpong(&pair, pinger, a.min_bytes as usize, warmup, iters)?;
        barrier()?;
        pair.close()?;
        s
    };
    if pinger {
        let n = samples.len();
        let (med, p99) = latency::summarize(&mut samples);
        say(format!("LAT {med:.3} {p99:.3} {n}"));
    }
    Ok(())
}
