//! Criterion benchmark of the engine's per-segment cost: a stream of messages through sender and
//! receiver (post, poll_transmit, arrived, completed, poll_done on both sides), per segment.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dqplb_engine::{EngineParams, PolicyKind, Receiver, Sender, Transmit};

/// One connection's both sides plus a reusable in-flight list (allocated once).
struct Pipe {
    tx: Sender,
    rx: Receiver,
    wire: Vec<Transmit>,
    msg_len: u64,
    max_messages: usize,
    next_token: u32,
    now: u64,
}

impl Pipe {
    fn new(policy: PolicyKind, qps: usize, cap: u32, seg: u32, msg_len: u64) -> Pipe {
        let p = EngineParams {
            qps,
            max_outstanding: cap,
            segment_bytes: seg,
            max_messages: 16,
            policy,
        };
        Pipe {
            tx: Sender::new(&p).expect("params"),
            rx: Receiver::new(qps as u32 * cap, 16).expect("receiver"),
            wire: Vec::with_capacity(qps * cap as usize),
            msg_len,
            max_messages: 16,
            next_token: 0,
            now: 0,
        }
    }

    /// Moves `messages` messages end to end; returns the segments carried.
    fn pump(&mut self, messages: u32) -> u64 {
        let (mut posted, mut done, mut segments) = (0u32, 0u32, 0u64);
        while done < messages {
            while posted < messages && self.tx.messages() < self.max_messages {
                self.rx
                    .post(self.next_token, self.msg_len)
                    .expect("rx post");
                self.tx
                    .post(self.next_token, self.msg_len)
                    .expect("tx post");
                self.next_token = self.next_token.wrapping_add(1);
                posted += 1;
            }
            self.now += 1;
            while let Some(t) = self.tx.poll_transmit(self.now) {
                self.wire.push(t);
            }
            segments += self.wire.len() as u64;
            self.now += 1;
            for t in self.wire.drain(..) {
                self.rx.arrived(t.imm, t.len).expect("arrival");
                self.tx.completed(t.qp, self.now).expect("completion");
            }
            while let Some(tok) = self.tx.poll_done() {
                black_box(tok);
                done += 1;
            }
            while let Some(r) = self.rx.poll_done() {
                black_box(r);
            }
        }
        segments
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    const MESSAGES: u32 = 256;
    for (name, policy, qps, cap, seg, len) in [
        (
            "dqplb_16qp_x8_64KiB_1MiB",
            PolicyKind::Dqplb,
            16,
            8,
            64 << 10,
            1u64 << 20,
        ),
        (
            "dqplb_led_16qp_x8_64KiB_1MiB",
            PolicyKind::DqplbLed,
            16,
            8,
            64 << 10,
            1u64 << 20,
        ),
        (
            "static_split_16qp_x8_1MiB",
            PolicyKind::StaticSplit,
            16,
            8,
            64 << 10,
            1 << 20,
        ),
        (
            "dqplb_4qp_x4_128B_4KiB",
            PolicyKind::Dqplb,
            4,
            4,
            128,
            4 << 10,
        ),
    ] {
        let mut pipe = Pipe::new(policy, qps, cap, seg, len);
        let per_batch = pipe.pump(MESSAGES);
        g.throughput(Throughput::Elements(per_batch));
        g.bench_function(name, |b| b.iter(|| pipe.pump(black_box(MESSAGES))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
