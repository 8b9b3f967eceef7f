//! Runs N segments through the engine (sender and receiver of one connection, 16 QPs x 8
//! outstanding, 64 KiB segments, 1 MiB messages) for instruction counting under callgrind.
//! Usage: engine_loop [messages] [policy]   (16 segments per message; default 10000 messages of
//! dqplb)

use dqplb_engine::{EngineParams, PolicyKind, Receiver, Sender, Transmit};
use std::hint::black_box;

fn main() {
    let messages: u32 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 10_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("engine_loop: messages must be a number: {e}");
            std::process::exit(2);
        }
    };
    let policy = match std::env::args().nth(2).map(|a| a.parse::<PolicyKind>()) {
        None => PolicyKind::Dqplb,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("engine_loop: {e}");
            std::process::exit(2);
        }
    };
    let p = EngineParams {
        qps: 16,
        max_outstanding: 8,
        segment_bytes: 64 << 10,
        max_messages: 16,
        policy,
    };
    let len = 1u64 << 20;
    let mut tx = Sender::new(&p).expect("params");
    let mut rx = Receiver::new(16 * 8, 16).expect("receiver");
    let mut wire: Vec<Transmit> = Vec::with_capacity(128);
    let (mut posted, mut done, mut segments, mut now) = (0u32, 0u32, 0u64, 0u64);
    while done < messages {
        while posted < messages && tx.messages() < 16 {
            rx.post(posted, len).expect("rx post");
            tx.post(posted, len).expect("tx post");
            posted += 1;
        }
        now += 1;
        while let Some(t) = tx.poll_transmit(now) {
            wire.push(t);
        }
        segments += wire.len() as u64;
        now += 1;
        for t in wire.drain(..) {
            rx.arrived(t.imm, t.len).expect("arrival");
            tx.completed(t.qp, now).expect("completion");
        }
        while let Some(tok) = tx.poll_done() {
            black_box(tok);
            done += 1;
        }
        while let Some(r) = rx.poll_done() {
            black_box(r);
        }
    }
    println!("messages {messages} segments {segments}");
}
