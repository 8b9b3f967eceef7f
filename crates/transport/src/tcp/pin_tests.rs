//! Pinned source ports of the TCP data streams: each stream binds its chosen port, a port in use
//! moves the stream to the next candidate of its bucket, and the bytes still arrive exactly.

use super::connect::start_pinned_stream;
use super::tests::{connect, params};
use super::*;
use dqplb_engine::PolicyKind;
use std::net::{IpAddr, SocketAddr, TcpListener};

/// Free ports on 127.0.0.1, held by listeners the caller drops before use.
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

#[test]
fn data_streams_bind_their_pinned_ports_and_carry_bytes_exactly() {
    let ports = free_ports(4);
    let opts = TcpOptions {
        nodelay: true,
        pinned_ports: ports.iter().map(|p| vec![*p]).collect(),
        ..Default::default()
    };
    let mut l = TcpListenComm::bind("127.0.0.1".parse().unwrap(), 0, opts.clone()).unwrap();
    let mut c = TcpConnector::start(l.handle(), params(PolicyKind::Dqplb, 4), None, &opts).unwrap();
    let (mut s, mut r) = connect(&mut l, &mut c);
    let got: Vec<u16> = s
        .data_stream_addrs()
        .iter()
        .map(|(a, _)| a.port())
        .collect();
    assert_eq!(got, ports);
    super::tests::transfer_sizes(&mut s, &mut r, &[1 << 20, 4097, 128]);
}

#[test]
fn a_port_in_use_moves_the_stream_to_the_next_candidate() {
    // A listener holds the first candidate: bind fails with EADDRINUSE even with SO_REUSEADDR.
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = busy.local_addr().unwrap().port();
    let spare = free_ports(1)[0];
    let peer_l = TcpListener::bind("127.0.0.1:0").expect("peer");
    let peer = peer_l.local_addr().unwrap();
    let ip = IpAddr::from([127, 0, 0, 1]);
    let opts = TcpOptions::default();
    let (sock, port) = start_pinned_stream(peer, ip, &[taken, spare], &opts).expect("fallback");
    assert_eq!(port, spare);
    let local: SocketAddr = sock.local_addr().unwrap().as_socket().unwrap();
    assert_eq!(local.port(), spare);
    // Every candidate taken: an error naming them.
    let e = start_pinned_stream(peer, ip, &[taken], &opts).unwrap_err();
    assert_eq!(e.code, crate::ErrorCode::SystemError);
    assert!(
        e.msg
            .contains(&format!("every pinned source port is in use ([{taken}])")),
        "{}",
        e.msg
    );
    drop(busy);
}
