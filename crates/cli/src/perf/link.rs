//! The two ways `dqplb perf` moves a message: through the plugin's vtable, or over plain TCP
//! streams (the ceiling); both behind `Link`, posted and polled like NCCL requests.

use super::net::{self, NetErr, NetRes, Ptr};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{channel, Receiver, Sender};

/// One direction of a connection, seen as post/poll of whole messages.
pub(crate) trait Link {
    /// Posts message `seq` from/into `buf[..len]`, which lies in slot buffer `slot`.
    /// Ok(None) means "not accepted now, post again later".
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and untouched by the caller until `poll` reports done.
    unsafe fn post(&mut self, slot: usize, buf: *mut u8, len: usize) -> NetRes<Option<u64>>;
    /// Some(bytes) once the posted message `token` is done; may block when `may_block`.
    fn poll(&mut self, token: u64, may_block: bool) -> NetRes<Option<usize>>;
}

/// Plugin side: requests on a send or receive comm, slot buffers registered once.
pub(crate) struct PluginLink {
    pub comm: Ptr,
    pub send: bool,
    pub mhs: Vec<Ptr>,
}

impl Link for PluginLink {
    unsafe fn post(&mut self, slot: usize, buf: *mut u8, len: usize) -> NetRes<Option<u64>> {
        unsafe {
            let r = if self.send {
                net::isend(self.comm, buf, len, self.mhs[slot])?
            } else {
                net::irecv(self.comm, buf, len, self.mhs[slot])?
            };
            Ok(r.map(|p| p as u64))
        }
    }

    fn poll(&mut self, token: u64, _may_block: bool) -> NetRes<Option<usize>> {
        net::test(token as Ptr)
    }
}

struct Job {
    seq: u64,
    buf: usize,
    len: usize,
}

/// Raw TCP side: one thread per stream moves its even share of every message with blocking
/// write_all / read_exact; the poller counts per-message completions from all streams.
pub(crate) struct RawLink {
    jobs: Vec<Sender<Job>>,
    done: Receiver<Result<u64, String>>,
    counts: std::collections::HashMap<u64, (usize, usize)>,
    next: u64,
}

impl RawLink {
    pub(crate) fn new(streams: Vec<TcpStream>, send: bool) -> RawLink {
        let n = streams.len();
        let (dtx, drx) = channel();
        let mut jobs = Vec::new();
        for (j, mut s) in streams.into_iter().enumerate() {
            let (tx, rx) = channel::<Job>();
            jobs.push(tx);
            let dtx = dtx.clone();
            // Detached: a thread ends when its job channel closes (or on a stream error).
            std::thread::spawn(move || {
                for job in rx {
                    let lo = job.len * j / n;
                    let hi = job.len * (j + 1) / n;
                    // SAFETY: the poster keeps buf..buf+len alive and untouched until all
                    // streams report this job done; each stream touches a disjoint range.
                    let part = unsafe {
                        std::slice::from_raw_parts_mut((job.buf as *mut u8).add(lo), hi - lo)
                    };
                    let r = if send {
                        s.write_all(part)
                    } else {
                        s.read_exact(part)
                    };
                    let msg = r
                        .map(|_| job.seq)
                        .map_err(|e| format!("raw TCP stream {j}: {e}"));
                    let failed = msg.is_err();
                    if dtx.send(msg).is_err() || failed {
                        return;
                    }
                }
            });
        }
        RawLink {
            jobs,
            done: drx,
            counts: Default::default(),
            next: 0,
        }
    }

    fn absorb(&mut self, r: Result<u64, String>) -> NetRes<()> {
        let seq = r.map_err(NetErr)?;
        if let Some(c) = self.counts.get_mut(&seq) {
            c.0 += 1;
        }
        Ok(())
    }
}

impl Link for RawLink {
    unsafe fn post(&mut self, _slot: usize, buf: *mut u8, len: usize) -> NetRes<Option<u64>> {
        let seq = self.next;
        self.next += 1;
        self.counts.insert(seq, (0, len));
        for tx in &self.jobs {
            tx.send(Job {
                seq,
                buf: buf as usize,
                len,
            })
            .map_err(|_| NetErr("raw TCP stream thread exited".into()))?;
        }
        Ok(Some(seq))
    }

    fn poll(&mut self, token: u64, may_block: bool) -> NetRes<Option<usize>> {
        while let Ok(r) = self.done.try_recv() {
            self.absorb(r)?;
        }
        let n = self.jobs.len();
        loop {
            match self.counts.get(&token) {
                Some(&(c, len)) if c == n => {
                    self.counts.remove(&token);
                    return Ok(Some(len));
                }
                Some(_) => {}
                None => return Err(NetErr(format!("raw TCP: unknown message {token}"))),
            }
            if !may_block {
                return Ok(None);
            }
            let r = self
                .done
                .recv()
                .map_err(|_| NetErr("raw TCP stream threads exited".into()))?;
            self.absorb(r)?;
        }
    }
}
