//! Every EngineError and ProtocolError kind, provoked on purpose: the value, its Display text,
//! and that a rejected call leaves the state machine usable.

use dqplb_engine::imm::{self, SEQ_MASK};
use dqplb_engine::{
    EngineError, EngineParams, PolicyKind, ProtocolError, Receiver, Sender, MAX_SEGMENT_BYTES,
};

fn params(policy: PolicyKind) -> EngineParams {
    EngineParams {
        qps: 2,
        max_outstanding: 2,
        segment_bytes: 256,
        max_messages: 2,
        policy,
    }
}

fn bad_param(p: EngineParams) -> (&'static str, u64) {
    match Sender::new(&p) {
        Err(EngineError::BadParam { param, value, .. }) => (param, value),
        other => panic!("expected BadParam for {p:?}, got {other:?}"),
    }
}

#[test]
fn bad_sender_params_name_the_field() {
    let ok = params(PolicyKind::Dqplb);
    assert_eq!(bad_param(EngineParams { qps: 0, ..ok }), ("qps", 0));
    assert_eq!(bad_param(EngineParams { qps: 129, ..ok }), ("qps", 129));
    assert_eq!(
        bad_param(EngineParams {
            max_outstanding: 0,
            ..ok
        }),
        ("max_outstanding", 0)
    );
    assert_eq!(
        bad_param(EngineParams {
            max_outstanding: 2049,
            ..ok
        }),
        ("max_outstanding", 2049)
    );
    assert_eq!(
        bad_param(EngineParams {
            segment_bytes: 0,
            ..ok
        }),
        ("segment_bytes", 0)
    );
    assert_eq!(
        bad_param(EngineParams {
            segment_bytes: 1000,
            ..ok
        }),
        ("segment_bytes", 1000)
    );
    assert_eq!(
        bad_param(EngineParams {
            max_messages: 0,
            ..ok
        }),
        ("max_messages", 0)
    );
    assert_eq!(
        bad_param(EngineParams {
            max_messages: (1 << 20) + 1,
            ..ok
        }),
        ("max_messages", (1 << 20) + 1)
    );
    // The largest sender: reorder span 16 * 128 * 2048 = 2^22, below 2^23.
    let largest = EngineParams {
        qps: 128,
        max_outstanding: 2048,
        ..ok
    };
    assert_eq!(Sender::new(&largest).unwrap().reorder_span(), 1 << 22);
    match Sender::with_initial_seq(&ok, SEQ_MASK + 1) {
        Err(EngineError::BadParam {
            param: "initial_seq",
            value,
            ..
        }) => {
            assert_eq!(value, u64::from(SEQ_MASK) + 1)
        }
        other => panic!("{other:?}"),
    }
    let text = EngineError::BadParam {
        param: "segment_bytes",
        value: 1000,
        reason: "must be a non-zero multiple of 128",
    }
    .to_string();
    assert!(text.contains("segment_bytes") && text.contains("1000") && text.contains("128"));
}

#[test]
fn bad_receiver_params() {
    for (w, m, param) in [
        (0, 4, "window"),
        (1 << 20, 4, "window"),
        (16, 0, "max_messages"),
    ] {
        match Receiver::new(w, m) {
            Err(EngineError::BadParam { param: p, .. }) => assert_eq!(p, param),
            other => panic!("{w} {m}: {other:?}"),
        }
    }
    // 16 * window must stay below 2^23: window (1 << 20) is refused above, 65536 is fine.
    assert_eq!(Receiver::new(1 << 16, 1).unwrap().reorder_span(), 1 << 20);
    assert!(matches!(
        Receiver::with_initial_seq(16, 4, 1 << 24),
        Err(EngineError::BadParam {
            param: "initial_seq",
            ..
        })
    ));
}

#[test]
fn too_many_messages_on_both_sides() {
    let mut tx = Sender::new(&params(PolicyKind::Dqplb)).unwrap();
    tx.post(1, 10).unwrap();
    tx.post(2, 10).unwrap();
    let e = tx.post(3, 10).unwrap_err();
    assert_eq!(e, EngineError::TooManyMessages { limit: 2 });
    assert!(e.to_string().contains("max_messages = 2"), "{e}");
    // Release one: posting works again.
    let t = tx.poll_transmit(0).unwrap();
    tx.completed(t.qp, 1).unwrap();
    assert_eq!(tx.poll_done(), Some(1));
    tx.post(3, 10).unwrap();

    let mut rx = Receiver::new(4, 1).unwrap();
    rx.post(7, 10).unwrap();
    assert_eq!(
        rx.post(8, 10),
        Err(EngineError::TooManyMessages { limit: 1 })
    );
}

#[test]
fn completion_errors() {
    let mut tx = Sender::new(&params(PolicyKind::Dqplb)).unwrap();
    let e = tx.completed(0, 5).unwrap_err();
    assert_eq!(e, EngineError::NothingOutstanding { qp: 0 });
    assert!(e.to_string().contains("QP 0"), "{e}");
    let e = tx.completed(2, 5).unwrap_err();
    assert_eq!(e, EngineError::NoSuchQp { qp: 2, qps: 2 });
    assert!(
        e.to_string().contains("QP 2") && e.to_string().contains("2 QPs"),
        "{e}"
    );
    tx.post(9, 300).unwrap();
    let a = tx.poll_transmit(0).unwrap();
    let b = tx.poll_transmit(0).unwrap();
    assert_eq!((a.qp, a.len, b.qp, b.len), (0, 256, 1, 44));
    tx.completed(1, 3).unwrap();
    assert_eq!(
        tx.completed(1, 3),
        Err(EngineError::NothingOutstanding { qp: 1 })
    );
    assert_eq!(tx.poll_done(), None);
    tx.completed(0, 3).unwrap();
    assert_eq!(tx.poll_done(), Some(9));
}

#[test]
fn message_too_large_for_static_split() {
    let mut tx = Sender::new(&params(PolicyKind::StaticSplit)).unwrap();
    let max = u64::from(MAX_SEGMENT_BYTES);
    assert!(tx.post(1, 2 * max).is_ok());
    let e = tx.post(2, 2 * max + 1).unwrap_err();
    assert_eq!(
        e,
        EngineError::MessageTooLarge {
            len: 2 * max + 1,
            max
        }
    );
    assert!(e.to_string().contains(&(2 * max + 1).to_string()), "{e}");
    // Fixed-size policies cut any length.
    let mut d = Sender::new(&params(PolicyKind::Dqplb)).unwrap();
    assert!(d.post(1, 1 << 40).is_ok());
}

#[test]
fn reserved_bits() {
    let mut rx = Receiver::new(4, 2).unwrap();
    rx.post(1, 100).unwrap();
    let imm = imm::encode(0, true) | (1 << 27);
    let e = rx.arrived(imm, 10).unwrap_err();
    assert_eq!(e, ProtocolError::ReservedBits { imm });
    assert!(e.to_string().contains("0x88000000"), "{e}");
    // State untouched: the real segment is accepted.
    rx.arrived(imm::encode(0, true), 10).unwrap();
    assert_eq!(rx.poll_done(), Some((1, 10)));
}

#[test]
fn duplicates_pending_and_consumed() {
    let mut rx = Receiver::new(4, 2).unwrap();
    rx.post(1, 1000).unwrap();
    rx.arrived(imm::encode(2, true), 10).unwrap();
    let e = rx.arrived(imm::encode(2, true), 10).unwrap_err();
    assert_eq!(e, ProtocolError::Duplicate { seq: 2 });
    assert!(e.to_string().contains("sequence number 2"), "{e}");
    rx.arrived(imm::encode(0, false), 256).unwrap();
    assert_eq!(
        rx.arrived(imm::encode(0, false), 256),
        Err(ProtocolError::Duplicate { seq: 0 })
    );
    rx.arrived(imm::encode(1, false), 256).unwrap();
    assert_eq!(rx.poll_done(), Some((1, 522)));
    assert_eq!(
        rx.arrived(imm::encode(2, true), 10),
        Err(ProtocolError::Duplicate { seq: 2 })
    );
}

#[test]
fn out_of_window() {
    let mut rx = Receiver::new(4, 2).unwrap();
    rx.post(1, 1 << 20).unwrap();
    assert_eq!(rx.reorder_span(), 64);
    rx.arrived(imm::encode(63, false), 128).unwrap();
    let e = rx.arrived(imm::encode(64, false), 128).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::OutOfWindow {
            seq: 64,
            expected: 0,
            span: 64
        }
    );
    let text = e.to_string();
    assert!(
        text.contains("64") && text.contains("[0, 0 + 64)"),
        "{text}"
    );
    // Far behind (more than a span) is out of window too, not a duplicate.
    assert!(matches!(
        rx.arrived(imm::encode(SEQ_MASK - 80, false), 128),
        Err(ProtocolError::OutOfWindow { seq, .. }) if seq == SEQ_MASK - 80
    ));
}

#[test]
fn size_beyond_posted_is_sticky() {
    let mut rx = Receiver::new(4, 2).unwrap();
    rx.post(5, 300).unwrap();
    rx.post(6, 300).unwrap();
    rx.arrived(imm::encode(0, false), 256).unwrap();
    let e = rx.arrived(imm::encode(1, true), 128).unwrap_err();
    assert_eq!(
        e,
        ProtocolError::SizeBeyondPosted {
            seq: 1,
            token: 5,
            size: 384,
            capacity: 300
        }
    );
    let text = e.to_string();
    assert!(text.contains("384") && text.contains("300") && text.contains("receive 5"));
    assert_eq!(rx.failure(), Some(e));
    assert_eq!(rx.arrived(imm::encode(2, true), 1), Err(e));
    assert_eq!(rx.poll_done(), None);
}

#[test]
fn size_beyond_posted_found_when_drained_out_of_order() {
    let mut rx = Receiver::new(4, 2).unwrap();
    rx.post(5, 200).unwrap();
    rx.arrived(imm::encode(1, true), 128).unwrap();
    assert!(matches!(
        rx.arrived(imm::encode(0, false), 128),
        Err(ProtocolError::SizeBeyondPosted {
            seq: 1,
            size: 256,
            capacity: 200,
            ..
        })
    ));
}

#[test]
fn no_posted_receive() {
    let mut rx = Receiver::new(4, 2).unwrap();
    let e = rx.arrived(imm::encode(0, true), 0).unwrap_err();
    assert_eq!(e, ProtocolError::NoPostedReceive { seq: 0 });
    assert!(e.to_string().contains("segment 0"), "{e}");
    // Not sticky: nothing was recorded, a posted receive then takes the segment.
    rx.post(3, 0).unwrap();
    rx.arrived(imm::encode(0, true), 0).unwrap();
    assert_eq!(rx.poll_done(), Some((3, 0)));
    // A second message beyond the only posted receive, found in order: sticky.
    rx.post(4, 10).unwrap();
    rx.arrived(imm::encode(2, true), 5).unwrap();
    let e = rx.arrived(imm::encode(1, true), 5).unwrap_err();
    assert_eq!(e, ProtocolError::NoPostedReceive { seq: 2 });
    assert_eq!(rx.poll_done(), Some((4, 5)));
    assert_eq!(rx.arrived(imm::encode(3, true), 5), Err(e));
}
