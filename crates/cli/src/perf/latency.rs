//! Ping-pong round trips (8 bytes unless --min-bytes says otherwise): through the plugin (a send
//! and a receive comm each way, as NCCL's service thread) and over one raw TCP_NODELAY socket.

use super::net::{self, NetErr, NetRes, Ptr, HANDLE_BYTES};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const SETUP: Duration = Duration::from_secs(60);
const STALL: Duration = Duration::from_secs(30);

/// Median and 99th percentile of round-trip samples (microseconds).
pub(crate) fn summarize(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// The stall clock is read on every this many polls only: a round trip is a few microseconds on
/// real hardware, and a clock read costs ~1 us in the Soft-RoCE VM (emulated HPET).
const POLLS_PER_CLOCK_READ: u32 = 1024;

fn wait(req: Ptr, what: &str) -> NetRes<usize> {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if let Some(n) = net::test(req)? {
            return Ok(n);
        }
        polls += 1;
        if polls.is_multiple_of(POLLS_PER_CLOCK_READ) && start.elapsed() > STALL {
            return Err(NetErr(format!("{what}: not done after {STALL:?}")));
        }
        std::thread::yield_now();
    }
}

fn post(mut f: impl FnMut() -> NetRes<Option<Ptr>>, what: &str) -> NetRes<Ptr> {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if let Some(r) = f()? {
            return Ok(r);
        }
        polls += 1;
        if polls.is_multiple_of(POLLS_PER_CLOCK_READ) && start.elapsed() > STALL {
            return Err(NetErr(format!(
                "{what}: request still refused after {STALL:?}"
            )));
        }
    }
}

/// Plugin comms for both directions: send to the peer's handle, receive on our listen comm.
pub(crate) struct PluginPair {
    sc: Ptr,
    rc: Ptr,
    lc: Ptr,
}

/// On device `dev` of an initialised plugin: listens and prints our handle through `say`, reads
/// the peer's with `read_peer`, connects.
pub(crate) fn plugin_pair(
    dev: i32,
    say: &dyn Fn(String),
    read_peer: &dyn Fn() -> NetRes<[u8; HANDLE_BYTES]>,
) -> NetRes<PluginPair> {
    let (h, lc) = net::listen(dev)?;
    say(format!("HANDLE {}", net::to_hex(&h)));
    let mut peer = read_peer()?;
    let (sc, rc) = net::establish(dev, Some(&mut peer), Some(lc), SETUP)?;
    Ok(PluginPair { sc, rc, lc })
}

/// Runs `warmup + iters` round trips of `bytes`; the pinger returns the timed samples (us), the
/// ponger none.
pub(crate) fn plugin_pingpong(
    p: &PluginPair,
    pinger: bool,
    bytes: usize,
    warmup: u64,
    iters: u64,
) -> NetRes<Vec<f64>> {
    let mut sbuf = vec![0x5au8; bytes];
    let mut rbuf = vec![0u8; bytes];
    let smh = net::reg_mr(p.sc, &mut sbuf)?;
    let rmh = net::reg_mr(p.rc, &mut rbuf)?;
    let (sp, rp) = (sbuf.as_mut_ptr(), rbuf.as_mut_ptr());
    let mut samples = Vec::with_capacity(iters as usize);
    // As NCCL does, keep the next receive posted before it is needed, so a round trip is one
    // message each way (the receiver's buffer announcement travels outside the round trip; the
    // pinger's next isend waits for it if it is late, inside the timed window).
    // SAFETY (all calls below): both buffers are registered and live until deregMr; a
    // buffer is reused only after the request using it completed.
    let mut r = post(|| unsafe { net::irecv(p.rc, rp, bytes, rmh) }, "irecv")?;
    for k in 0..warmup + iters {
        let t = Instant::now();
        if pinger {
            let s = post(|| unsafe { net::isend(p.sc, sp, bytes, smh) }, "isend")?;
            wait(r, "pong receive")?;
            let rtt = t.elapsed();
            if k + 1 < warmup + iters {
                r = post(|| unsafe { net::irecv(p.rc, rp, bytes, rmh) }, "irecv")?;
            }
            wait(s, "ping send")?;
            if k >= warmup {
                samples.push(rtt.as_nanos() as f64 / 1e3);
            }
        } else {
            wait(r, "ping receive")?;
            // The pong first, then the next receive's announcement: the next ping cannot come
            // before the pong arrives, so the announcement travels while the pinger handles it
            // (posted first, it sat on the round trip: one more post before the pong's).
            let s = post(|| unsafe { net::isend(p.sc, sp, bytes, smh) }, "isend")?;
            if k + 1 < warmup + iters {
                r = post(|| unsafe { net::irecv(p.rc, rp, bytes, rmh) }, "irecv")?;
            }
            wait(s, "pong send")?;
        }
    }
    net::dereg_mr(p.sc, smh)?;
    net::dereg_mr(p.rc, rmh)?;
    Ok(samples)
}

impl PluginPair {
    pub(crate) fn close(self) -> NetRes<()> {
        net::close_send(self.sc)?;
        net::close_recv(self.rc)?;
        net::close_listen(self.lc)
    }
}

/// The raw-TCP ponger's listener on loopback.
pub(crate) fn raw_listen() -> NetRes<TcpListener> {
    TcpListener::bind("127.0.0.1:0").map_err(|e| NetErr(format!("bind 127.0.0.1:0: {e}")))
}

/// Raw TCP ping-pong. `spin`: non-blocking socket polled in a loop (how the plugin is driven, so
/// neither side pays a scheduler wake-up); otherwise blocking `write` + `read`.
pub(crate) fn raw_pingpong(
    s: &mut TcpStream,
    pinger: bool,
    bytes: usize,
    warmup: u64,
    iters: u64,
    spin: bool,
) -> NetRes<Vec<f64>> {
    s.set_nodelay(true)
        .map_err(|e| NetErr(format!("TCP_NODELAY: {e}")))?;
    s.set_nonblocking(spin)
        .map_err(|e| NetErr(format!("O_NONBLOCK: {e}")))?;
    let mut buf = vec![0x5au8; bytes];
    let mut samples = Vec::with_capacity(iters as usize);
    for k in 0..warmup + iters {
        let t = Instant::now();
        if pinger {
            send_all(s, &buf)?;
            recv_all(s, &mut buf)?;
        } else {
            recv_all(s, &mut buf)?;
            send_all(s, &buf)?;
        }
        if pinger && k >= warmup {
            samples.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
    }
    Ok(samples)
}

fn retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

fn send_all(s: &mut TcpStream, mut b: &[u8]) -> NetRes<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if retry(&e) => {}
            Err(e) => return Err(NetErr(format!("raw TCP ping-pong: {e}"))),
        }
    }
    Ok(())
}

fn recv_all(s: &mut TcpStream, mut b: &mut [u8]) -> NetRes<()> {
    while !b.is_empty() {
        match s.read(b) {
            Ok(0) => return Err(NetErr("raw TCP ping-pong: peer closed".into())),
            Ok(n) => b = &mut b[n..],
            Err(e) if retry(&e) => {}
            Err(e) => return Err(NetErr(format!("raw TCP ping-pong: {e}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::summarize;

    #[test]
    fn median_and_p99() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(summarize(&mut v), (51.0, 99.0));
        assert_eq!(summarize(&mut []), (0.0, 0.0));
        assert_eq!(summarize(&mut [7.0]), (7.0, 7.0));
    }
}
