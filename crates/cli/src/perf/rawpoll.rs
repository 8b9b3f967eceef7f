//! Raw-TCP baseline driven like the plugin: one thread moves every stream's share of each
//! message with non-blocking reads/writes, waiting in poll(2) when no stream can move.

use super::link::Link;
use super::net::{NetErr, NetRes};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

struct Chunk {
    seq: u64,
    buf: usize,
    len: usize,
    done: usize,
}

/// One thread, all streams: chunks queued per stream in message order.
pub(crate) struct PollLink {
    streams: Vec<TcpStream>,
    queues: Vec<VecDeque<Chunk>>,
    /// Per posted message: (streams finished, length).
    counts: std::collections::HashMap<u64, (usize, usize)>,
    next: u64,
    send: bool,
}

impl PollLink {
    pub(crate) fn new(streams: Vec<TcpStream>, send: bool) -> NetRes<PollLink> {
        for s in &streams {
            s.set_nonblocking(true)
                .map_err(|e| NetErr(format!("raw TCP non-blocking: {e}")))?;
        }
        let n = streams.len();
        Ok(PollLink {
            streams,
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            counts: Default::default(),
            next: 0,
            send,
        })
    }

    /// Moves what can move without blocking; true if any byte moved.
    fn progress(&mut self) -> NetRes<bool> {
        let mut moved = false;
        for (j, q) in self.queues.iter_mut().enumerate() {
            while let Some(c) = q.front_mut() {
                if c.done < c.len {
                    // SAFETY: the poster keeps buf..buf+len alive until the message is done.
                    let part = unsafe {
                        std::slice::from_raw_parts_mut(
                            (c.buf as *mut u8).add(c.done),
                            c.len - c.done,
                        )
                    };
                    let r = if self.send {
                        self.streams[j].write(part)
                    } else {
                        self.streams[j].read(part)
                    };
                    match r {
                        Ok(0) => return Err(NetErr(format!("raw TCP stream {j}: peer closed"))),
                        Ok(n) => {
                            c.done += n;
                            moved = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        Err(e) => return Err(NetErr(format!("raw TCP stream {j}: {e}"))),
                    }
                    if c.done < c.len {
                        continue;
                    }
                }
                if let Some(cnt) = self.counts.get_mut(&c.seq) {
                    cnt.0 += 1;
                }
                q.pop_front();
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Sleeps in poll(2) until a stream with queued work is ready (at most 10 ms).
    fn wait(&self) {
        let ev = if self.send {
            libc::POLLOUT
        } else {
            libc::POLLIN
        };
        let mut fds: Vec<libc::pollfd> = self
            .streams
            .iter()
            .zip(&self.queues)
            .filter(|(_, q)| !q.is_empty())
            .map(|(s, _)| libc::pollfd {
                fd: s.as_raw_fd(),
                events: ev,
                revents: 0,
            })
            .collect();
        if !fds.is_empty() {
            // SAFETY: fds is a valid array of pollfd for the call's duration.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
        }
    }
}

impl Link for PollLink {
    unsafe fn post(&mut self, _slot: usize, buf: *mut u8, len: usize) -> NetRes<Option<u64>> {
        let seq = self.next;
        self.next += 1;
        let n = self.streams.len();
        self.counts.insert(seq, (0, len));
        for (j, q) in self.queues.iter_mut().enumerate() {
            let (lo, hi) = (len * j / n, len * (j + 1) / n);
            q.push_back(Chunk {
                seq,
                buf: buf as usize + lo,
                len: hi - lo,
                done: 0,
            });
        }
        Ok(Some(seq))
    }

    fn poll(&mut self, token: u64, may_block: bool) -> NetRes<Option<usize>> {
        let n = self.streams.len();
        loop {
            let moved = self.progress()?;
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
            if !moved {
                self.wait();
            }
        }
    }
}
