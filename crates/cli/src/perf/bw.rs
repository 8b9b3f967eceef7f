//! The bandwidth sweep run by each side: for every size, warm-up then timed iterations with up
//! to `inflight` messages posted, each buffer filled (sender) or checked (receiver) per iteration.

use super::args::PerfArgs;
use super::link::Link;
use super::net::{NetErr, NetRes};
use super::pattern;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One measured size, as the receiver saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub size: u64,
    pub iters: u64,
    /// Wall time of the timed iterations, nanoseconds.
    pub nanos: u64,
    /// Bytes that differed from the expected pattern (a short message counts all its bytes).
    pub wrong: u64,
}

impl Row {
    pub(crate) fn to_line(&self) -> String {
        format!(
            "ROW {} {} {} {}",
            self.size, self.iters, self.nanos, self.wrong
        )
    }

    pub(crate) fn from_line(l: &str) -> Option<Row> {
        let mut it = l
            .strip_prefix("ROW ")?
            .split_whitespace()
            .map(|x| x.parse::<u64>());
        let row = Row {
            size: it.next()?.ok()?,
            iters: it.next()?.ok()?,
            nanos: it.next()?.ok()?,
            wrong: it.next()?.ok()?,
        };
        it.next().is_none().then_some(row)
    }

    pub(crate) fn time_us(&self) -> f64 {
        self.nanos as f64 / 1e3 / self.iters.max(1) as f64
    }

    /// Algorithm bandwidth in GB/s (1e9 bytes), as nccl-tests reports it.
    pub(crate) fn algbw(&self) -> f64 {
        let t = self.time_us();
        if t > 0.0 {
            self.size as f64 / t / 1e3
        } else {
            0.0
        }
    }
}

const STALL: Duration = Duration::from_secs(60);
const IDLE_POLLS_PER_CLOCK_READ: u32 = 1024;

/// Runs the sweep on one side. The sender fills each message before posting it; the receiver
/// checks each one after completion and returns a row per size.
pub(crate) fn sweep(
    link: &mut dyn Link,
    a: &PerfArgs,
    slots: &mut [Vec<u8>],
    sender: bool,
    mut on_row: impl FnMut(&Row),
) -> NetRes<()> {
    let bases: Vec<*mut u8> = slots.iter_mut().map(|s| s.as_mut_ptr()).collect();
    let n_slots = bases.len();
    let mut queue: VecDeque<(u64, usize, u64)> = VecDeque::with_capacity(n_slots);
    for size in a.sizes() {
        let len = size as usize;
        let (warmup, iters) = (a.warmup_for(size), a.iters_for(size));
        let total = warmup + iters;
        let (mut posted, mut completed, mut wrong) = (0u64, 0u64, 0u64);
        let mut t0 = Instant::now();
        // The stall clock is read once per IDLE_POLLS_PER_CLOCK_READ idle polls, not per poll
        // (NCCL's proxy loop reads no clock either; a read costs ~1 us in the Soft-RoCE VM).
        let mut last = Instant::now();
        let (mut idle_polls, mut moved_since_read) = (0u32, false);
        while completed < total {
            let mut progressed = false;
            if posted < total && queue.len() < n_slots {
                let slot = (posted % n_slots as u64) as usize;
                if sender && a.check {
                    // SAFETY: the slot's previous message completed (FIFO, at most n_slots queued).
                    pattern::fill(
                        unsafe { std::slice::from_raw_parts_mut(bases[slot], len) },
                        posted,
                    );
                }
                // SAFETY: slot buffers hold max_bytes >= len and are not touched until done.
                if let Some(tok) = unsafe { link.post(slot, bases[slot], len)? } {
                    queue.push_back((posted, slot, tok));
                    posted += 1;
                    progressed = true;
                }
            }
            if let Some(&(iter, slot, tok)) = queue.front() {
                let may_block = !progressed && (posted == total || queue.len() == n_slots);
                if let Some(got) = link.poll(tok, may_block)? {
                    queue.pop_front();
                    if !sender {
                        if got != len {
                            wrong += size;
                        } else if a.check {
                            // SAFETY: the message is done; the transport no longer writes it.
                            wrong += pattern::count_wrong(
                                unsafe { std::slice::from_raw_parts(bases[slot], len) },
                                iter,
                            );
                        }
                    }
                    completed += 1;
                    if completed == warmup {
                        t0 = Instant::now();
                    }
                    progressed = true;
                }
            }
            if progressed {
                moved_since_read = true;
            } else {
                idle_polls += 1;
                if idle_polls.is_multiple_of(IDLE_POLLS_PER_CLOCK_READ) {
                    if moved_since_read {
                        (last, moved_since_read) = (Instant::now(), false);
                    } else if last.elapsed() > STALL {
                        let side = if sender { "sender" } else { "receiver" };
                        return Err(NetErr(format!("{side}: no progress for {STALL:?} at size {size}, message {completed} of {total}")));
                    }
                }
                // Idle poll: let the peer process run (NCCL's proxy thread yields the same way:
                // src/proxy.cc ncclProxyProgress: "No request progressed. Let others run.", sched_yield
                // in 2.19, std::this_thread::yield in 2.29),
                // or sleep when an experiment asks (--recv-idle-us / --send-idle-us).
                match if sender {
                    a.send_idle_us
                } else {
                    a.recv_idle_us
                } {
                    0 => std::thread::yield_now(),
                    us => std::thread::sleep(Duration::from_micros(us)),
                }
            }
        }
        let row = Row {
            size,
            iters,
            nanos: t0.elapsed().as_nanos() as u64,
            wrong,
        };
        on_row(&row);
    }
    Ok(())
}
