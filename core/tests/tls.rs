//! The shared TLS layer against an in-memory rustls server with a CA generated at test
//! time: handshake, WebSocket over TLS, certificate failures, truncation, plaintext held
//! until a stream accepts it, any split of the ciphertext.

use std::io::{Read, Write};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use feedwire_core::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use feedwire_core::rustls::{self, RootCertStore, ServerConfig, ServerConnection};
use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{
    tls_config_with_roots, Event, PlaintextSink, ReadRoom, TlsError, TlsSession, WebSocketClient,
    WsConfig,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A CA and a server certificate for `names`, signed by it.
fn test_pki(names: &[&str]) -> (RootCertStore, Arc<ServerConfig>) {
    test_pki_with(names, rustls::crypto::aws_lc_rs::default_provider())
}

/// [`test_pki`] with the server's crypto provider (its key exchanges) given.
fn test_pki_with(
    names: &[&str],
    provider: rustls::crypto::CryptoProvider,
) -> (RootCertStore, Arc<ServerConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let server = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    (roots, Arc::new(server))
}

/// Moves bytes both ways until nothing moves; returns the plaintext the server received.
fn pump(
    client: &mut TlsSession,
    server: &mut ServerConnection,
    sink: &mut impl PlaintextSink,
) -> Result<Vec<u8>, TlsError> {
    let mut received = Vec::new();
    loop {
        let mut progressed = false;
        while let Some(c) = client.poll_transmit() {
            let mut input = &c[..];
            while !input.is_empty() {
                server.read_tls(&mut input).unwrap();
                if let Err(e) = server.process_new_packets() {
                    // Let the server's alert reach the client.
                    let mut alert = Vec::new();
                    let _ = server.write_tls(&mut alert);
                    deliver(client, &alert, sink)?;
                    return Err(TlsError::Rustls(e));
                }
                // Drain as we go: rustls holds only a bounded amount of plaintext.
                let mut buf = [0u8; 4096];
                while let Ok(n) = server.reader().read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    received.extend_from_slice(&buf[..n]);
                }
            }
            progressed = true;
        }
        let mut out = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            deliver(client, &out, sink)?;
            progressed = true;
        }
        if !progressed {
            return Ok(received);
        }
    }
}

fn deliver(
    client: &mut TlsSession,
    mut bytes: &[u8],
    sink: &mut impl PlaintextSink,
) -> Result<(), TlsError> {
    while !bytes.is_empty() {
        let buf = client.read_buf();
        let n = buf.len().min(bytes.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        client.handle_read(n, sink)?;
        bytes = &bytes[n..];
    }
    Ok(())
}

/// A TLS session to `host` trusting `roots`, the server, and a WebSocket engine behind the
/// session, after the handshake was pumped both ways (its outcome is the last element).
fn handshake(
    roots: RootCertStore,
    server: Arc<ServerConfig>,
    host: &str,
) -> (
    TlsSession,
    ServerConnection,
    WebSocketClient,
    Result<Vec<u8>, TlsError>,
) {
    let mut tls = TlsSession::new(tls_config_with_roots(roots), host).unwrap();
    let mut server = ServerConnection::new(server).unwrap();
    let url = format!("wss://{host}:9443/ws");
    let mut ws = WebSocketClient::new(&url, WsConfig::default(), [1; 32]).unwrap();
    let outcome = pump(&mut tls, &mut server, &mut ws);
    (tls, server, ws, outcome)
}

#[test]
fn websocket_over_tls_with_a_test_ca() {
    let (roots, server_config) = test_pki(&["localhost"]);
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    let mut ws =
        WebSocketClient::new("wss://localhost:9443/ws", WsConfig::default(), [1; 32]).unwrap();
    assert!(tls.is_handshaking());
    pump(&mut tls, &mut server, &mut ws).unwrap();
    assert!(!tls.is_handshaking());
    while let Some(c) = ws.poll_transmit() {
        tls.write_plaintext(&c);
    }
    let request = pump(&mut tls, &mut server, &mut ws).unwrap();
    assert!(request.starts_with(b"GET /ws HTTP/1.1\r\n"));
    // The server answers and streams a large message across many TLS records.
    let big = "x".repeat(300_000);
    server.set_buffer_limit(None);
    server
        .writer()
        .write_all(&accept_response(&request))
        .unwrap();
    server
        .writer()
        .write_all(&server_frame(true, 1, b"{\"e\":\"aggTrade\"}"))
        .unwrap();
    server
        .writer()
        .write_all(&server_frame(true, 1, big.as_bytes()))
        .unwrap();
    pump(&mut tls, &mut server, &mut ws).unwrap();
    let events: Vec<Event> = std::iter::from_fn(|| ws.poll_event()).collect();
    assert!(matches!(&events[0], Event::Opened(_)));
    assert!(matches!(&events[1], Event::Message(m) if m.payload == "{\"e\":\"aggTrade\"}"));
    assert!(matches!(&events[2], Event::Message(m) if m.payload == big.as_bytes()));
    // A large outgoing message passes rustls's default buffer cap.
    ws.send_text(&big).unwrap();
    while let Some(c) = ws.poll_transmit() {
        tls.write_plaintext(&c);
    }
    let echoed = pump(&mut tls, &mut server, &mut ws).unwrap();
    assert!(echoed.len() > 300_000);
    // Clean end: close_notify, then EOF.
    server.send_close_notify();
    pump(&mut tls, &mut server, &mut ws).unwrap();
    assert!(tls.is_closed_by_peer());
    assert_eq!(tls.handle_eof(&mut ws), Ok(()));
}

#[test]
fn unknown_ca_is_a_certificate_error() {
    let (_, server_config) = test_pki(&["localhost"]);
    let (other_roots, _) = test_pki(&["localhost"]);
    let (_tls, _server, _ws, outcome) = handshake(other_roots, server_config, "localhost");
    let err = outcome.unwrap_err();
    assert!(err.is_certificate_error(), "{err:?}");
}

#[test]
fn name_mismatch_is_a_certificate_error() {
    let (roots, server_config) = test_pki(&["stream.example"]);
    let (_tls, _server, _ws, outcome) = handshake(roots, server_config, "localhost");
    let err = outcome.unwrap_err();
    assert!(err.is_certificate_error(), "{err:?}");
}

#[test]
fn ip_address_names_verify_too() {
    let (roots, server_config) = test_pki(&["127.0.0.1"]);
    let (tls, _server, _ws, outcome) = handshake(roots, server_config, "127.0.0.1");
    outcome.unwrap();
    assert!(!tls.is_handshaking());
}

#[test]
fn eof_without_close_notify_is_truncation() {
    let (roots, server_config) = test_pki(&["localhost"]);
    let (mut tls, _server, mut ws, outcome) = handshake(roots, server_config, "localhost");
    outcome.unwrap();
    assert_eq!(tls.handle_eof(&mut ws), Err(TlsError::UnexpectedEof));
}

#[test]
fn sessions_sharing_a_configuration_resume_and_the_default_one_is_shared() {
    let (roots, server_config) = test_pki(&["localhost"]);
    let client_config = tls_config_with_roots(roots);
    let kinds: Vec<_> = (0..3)
        .map(|_| {
            let mut tls = TlsSession::new(client_config.clone(), "localhost").unwrap();
            let mut server = ServerConnection::new(server_config.clone()).unwrap();
            let mut ws =
                WebSocketClient::new("wss://localhost:9443/ws", WsConfig::default(), [1; 32])
                    .unwrap();
            pump(&mut tls, &mut server, &mut ws).unwrap();
            server.handshake_kind()
        })
        .collect();
    use rustls::HandshakeKind::{Full, Resumed};
    assert_eq!(kinds, [Some(Full), Some(Resumed), Some(Resumed)]);
    // So every stream left on the default shares its session cache (and its roots).
    assert!(Arc::ptr_eq(
        &feedwire_core::default_tls_config(),
        &feedwire_core::default_tls_config()
    ));
}

#[test]
fn invalid_server_name_is_typed() {
    let (roots, _) = test_pki(&["localhost"]);
    let err = TlsSession::new(tls_config_with_roots(roots), "not a host name").unwrap_err();
    assert_eq!(err, TlsError::InvalidServerName("not a host name".into()));
}

#[test]
fn betfair_stream_over_tls_through_stream_input() {
    use feedwire_core::{BetfairAuth, Stream, StreamConfig, StreamEvent, StreamInput};
    let (roots, server_config) = test_pki(&["localhost"]);
    let now = std::time::Instant::now();
    let auth = BetfairAuth {
        app_key: "k".into(),
        session: "s".into(),
    };
    let mut stream = Stream::new(
        StreamConfig::betfair("tls://localhost:4443", auth),
        [2; 32],
        now,
    )
    .unwrap();
    assert!(stream.endpoint().scheme.is_tls());
    let mut tls = TlsSession::new(tls_config_with_roots(roots), &stream.endpoint().host).unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    // Betfair greets at once: its line comes with the handshake's last flight, before the
    // stream is told it is connected, and waits in the session until then.
    server
        .writer()
        .write_all(b"{\"op\":\"connection\",\"connectionId\":\"1\"}\r\n")
        .unwrap();
    pump(
        &mut tls,
        &mut server,
        &mut StreamInput {
            stream: &mut stream,
            now,
        },
    )
    .unwrap();
    assert!(!tls.is_handshaking());
    stream.handle_connected(now);
    tls.flush_plaintext(&mut StreamInput {
        stream: &mut stream,
        now,
    })
    .unwrap();
    while let Some(c) = stream.poll_transmit() {
        tls.write_plaintext(&c);
    }
    let login = pump(
        &mut tls,
        &mut server,
        &mut StreamInput {
            stream: &mut stream,
            now,
        },
    )
    .unwrap();
    assert_eq!(
        login,
        b"{\"op\":\"authentication\",\"id\":1,\"appKey\":\"k\",\"session\":\"s\"}\r\n"
    );
    let events: Vec<StreamEvent> = std::iter::from_fn(|| stream.poll_event()).collect();
    assert!(
        events.contains(&StreamEvent::Opened { reconnected: false }),
        "{events:?}"
    );
    // The session's buffers are in the stream's statistics, as of its last read; a release
    // reported by the transport shows at once, and the connection's end takes them to 0.
    let stats = stream.stats_handle();
    let held = stats.snapshot(now).tls_buffer_bytes;
    assert!(held > 64 * 1024, "{held}");
    assert!(tls.release_read_buffer());
    stream.set_tls_buffer_bytes(tls.buffer_capacity(), now);
    assert_eq!(
        stats.snapshot(now).tls_buffer_bytes,
        tls.buffer_capacity() as u64
    );
    assert!(stats.snapshot(now).tls_buffer_bytes < held);
    // A read after the release takes a page.
    stream.set_tls_buffer_bytes(4096, now);
    assert_eq!(stats.snapshot(now).tls_buffer_bytes, 4096);
    stream.handle_transport_error("reset", now);
    assert_eq!(stats.snapshot(now).tls_buffer_bytes, 0);
    stream.set_tls_buffer_bytes(4096, now);
    assert_eq!(
        stats.snapshot(now).tls_buffer_bytes,
        0,
        "no connection, no session"
    );
}

/// Keeps the payloads lent to it.
#[derive(Default)]
struct LentLines(Vec<Vec<u8>>);

impl feedwire_core::DataHandler for LentLines {
    fn on_data(&mut self, data: feedwire_core::DataRef<'_>) {
        self.0.push(data.payload.to_vec());
    }
    fn on_event(&mut self, event: feedwire_core::StreamEvent) {
        panic!("only data is lent: {event:?}");
    }
}

/// What the adapters do: the handshake driven with a sink that takes nothing
/// ([`HandshakeOnly`]), then plaintext moved into the stream by [`LendingInput`] — held by
/// the session until the stream is connected, then lent to the handler when there is one,
/// queued as events when there is none.
#[test]
fn lines_over_tls_are_lent_through_lending_input() {
    use feedwire_core::{HandshakeOnly, LendingInput, Stream, StreamConfig, StreamEvent};
    let (roots, server_config) = test_pki(&["localhost"]);
    let now = std::time::Instant::now();
    let config = StreamConfig::binance_stream("tls://localhost:4443");
    let mut stream = Stream::new(config, [2; 32], now).unwrap();
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    pump(&mut tls, &mut server, &mut HandshakeOnly).unwrap();
    assert!(!tls.is_handshaking());
    // A line before the stream is told it is connected: held by the session.
    server.writer().write_all(b"first\r\n").unwrap();
    let mut lent = LentLines::default();
    let mut sink = LendingInput {
        stream: &mut stream,
        now,
        handler: Some(&mut lent),
    };
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert!(stream
        .poll_event()
        .is_some_and(|e| matches!(e, StreamEvent::Connecting { .. })));
    assert!(
        stream.poll_event().is_none(),
        "nothing reached the stream yet"
    );
    stream.handle_connected(now);
    let mut sink = LendingInput {
        stream: &mut stream,
        now,
        handler: Some(&mut lent),
    };
    tls.flush_plaintext(&mut sink).unwrap();
    let data = |e: StreamEvent| match e {
        StreamEvent::Data { payload, .. } => Some(payload.to_vec()),
        _ => None,
    };
    let events: Vec<Vec<u8>> = std::iter::from_fn(|| stream.poll_event())
        .filter_map(data)
        .collect();
    // The connection's first data message stops the first-data wait: queued, not lent.
    assert_eq!(events, [b"first".to_vec()]);
    assert!(lent.0.is_empty());

    server.writer().write_all(b"second\r\nthird\r\n").unwrap();
    let mut sink = LendingInput {
        stream: &mut stream,
        now,
        handler: Some(&mut lent),
    };
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert!(stream.poll_event().is_none(), "lent, not queued");
    assert_eq!(lent.0, [b"second".to_vec(), b"third".to_vec()]);

    server.writer().write_all(b"fourth\r\n").unwrap();
    let mut unlent = LendingInput::<LentLines> {
        stream: &mut stream,
        now,
        handler: None,
    };
    deliver(&mut tls, &server_output(&mut server), &mut unlent).unwrap();
    let events: Vec<Vec<u8>> = std::iter::from_fn(|| stream.poll_event())
        .filter_map(data)
        .collect();
    assert_eq!(events, [b"fourth".to_vec()]);
    assert_eq!(lent.0.len(), 2);
}

/// The engines as plaintext sinks take input until they have ended: a failed WebSocket
/// client or a finished line client leaves the rest with the session (held, and bounded).
#[test]
fn engines_take_plaintext_until_they_end() {
    use feedwire_core::{Delimiter, LineClient};
    let mut ws =
        WebSocketClient::new("wss://localhost:9443/ws", WsConfig::default(), [1; 32]).unwrap();
    assert!(PlaintextSink::accepts_input(&ws));
    ws.handle_input(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    assert!(!PlaintextSink::accepts_input(&ws));

    let mut lines = LineClient::new(Delimiter::CrLf, 64 * 1024, 1024);
    assert!(PlaintextSink::accepts_input(&lines));
    lines.handle_eof();
    assert!(lines.is_finished());
    assert!(!PlaintextSink::accepts_input(&lines));
}

/// Collects plaintext; takes input only while `accepting`.
#[derive(Default)]
struct Collect {
    accepting: bool,
    bytes: Vec<u8>,
    space: Vec<u8>,
    /// `handle_read` calls.
    reads: usize,
    /// Bytes each `read_buf` offers; 0 for 1000.
    read_size: usize,
    /// The room is offered as uninitialised memory (`ReadRoom::Spare`), as an engine's read
    /// buffer offers it, in `block`.
    spare: bool,
    block: BytesMut,
}

impl Collect {
    /// A sink that takes everything, offering reads of `size` bytes.
    fn taking_reads_of(size: usize) -> Self {
        Self {
            accepting: true,
            read_size: size,
            ..Self::default()
        }
    }
}

impl Collect {
    /// By default a small, odd read size: records are handed over in many pieces.
    fn size(&self) -> usize {
        if self.read_size == 0 {
            1000
        } else {
            self.read_size
        }
    }
}

impl PlaintextSink for Collect {
    fn read_buf(&mut self) -> &mut [u8] {
        let size = self.size();
        self.space.resize(size, 0);
        &mut self.space
    }

    fn read_room(&mut self) -> ReadRoom<'_> {
        if !self.spare {
            return ReadRoom::Bytes(self.read_buf());
        }
        let size = self.size();
        self.block.clear();
        self.block.reserve(size);
        ReadRoom::Spare((&mut self.block).limit(size))
    }

    fn handle_read(&mut self, n: usize) {
        let read = if self.spare {
            assert_eq!(self.block.len(), n, "the session wrote what it reported");
            &self.block[..n]
        } else {
            &self.space[..n]
        };
        self.bytes.extend_from_slice(read);
        self.reads += 1;
    }

    fn accepts_input(&self) -> bool {
        self.accepting
    }
}

/// A finished handshake between a session and an in-memory server.
fn handshaken() -> (TlsSession, ServerConnection) {
    let (roots, server_config) = test_pki(&["localhost"]);
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    server.set_buffer_limit(None);
    pump(&mut tls, &mut server, &mut Collect::default()).unwrap();
    assert!(!tls.is_handshaking());
    (tls, server)
}

/// A finished handshake, then 128 KiB of data taken, as a busy stream's first moments go:
/// the session's reads are offered their full size (64 KiB and a record's room) from here.
fn connected() -> (TlsSession, ServerConnection) {
    let (mut tls, mut server) = handshaken();
    let warm_up = text(128 * 1024);
    server.writer().write_all(&warm_up).unwrap();
    let mut sink = Collect::taking_reads_of(64 * 1024);
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert!(sink.bytes == warm_up);
    assert!(tls.read_buf().len() >= 64 * 1024);
    (tls, server)
}

/// Delivers `ciphertext` in reads that fill what the session offers, `after_each` checking
/// the session after every read; returns the offers, in bytes.
fn offered_reads(
    tls: &mut TlsSession,
    ciphertext: &[u8],
    sink: &mut impl PlaintextSink,
    mut after_each: impl FnMut(&TlsSession),
) -> Vec<usize> {
    let mut offers = Vec::new();
    let mut rest = ciphertext;
    while !rest.is_empty() {
        let buf = tls.read_buf();
        offers.push(buf.len());
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        tls.handle_read(n, sink).unwrap();
        rest = &rest[n..];
        after_each(tls);
    }
    offers
}

/// A fresh session allocates its ciphertext buffer whole but zeroes it with the reads, which
/// start at a page and double while they fill what they are offered — an idle connection
/// touches only the pages it read into: 4, 8, 16, 32 KiB, then 64 KiB and more, the buffer
/// never reallocated; every byte arrives in order.
#[test]
fn a_fresh_session_reads_from_a_page_up_in_one_allocation() {
    let (mut tls, mut server) = handshaken();
    let allocated = tls.buffer_capacity();
    assert!(allocated >= CIPHERTEXT_BUFFER, "{allocated}");
    let burst = text(256 * 1024);
    server.writer().write_all(&burst).unwrap();
    let ciphertext = server_output(&mut server);
    let mut sink = Collect::taking_reads_of(64 * 1024);
    let offers = offered_reads(&mut tls, &ciphertext, &mut sink, |tls| {
        assert_eq!(tls.buffer_capacity(), allocated, "reallocated");
    });
    assert!(sink.bytes == burst);
    assert_eq!(&offers[..4], [4096, 8192, 16384, 32768], "{offers:?}");
    assert!(offers[4..].iter().all(|&o| o >= 64 * 1024), "{offers:?}");
}

/// What the server has to send, as ciphertext.
/// The key exchange a server offering `groups` (most preferred first) agrees with our
/// default configuration, and whether the handshake took the one ClientHello: the client is
/// done after one flight each way, no HelloRetryRequest.
fn key_exchange_against(
    groups: &[&'static dyn rustls::crypto::SupportedKxGroup],
) -> (rustls::NamedGroup, bool) {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = groups.to_vec();
    let (roots, server_config) = test_pki_with(&["localhost"], provider);
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    let mut hello = Vec::new();
    while let Some(c) = tls.poll_transmit() {
        hello.extend_from_slice(&c);
    }
    let mut input = &hello[..];
    while !input.is_empty() {
        server.read_tls(&mut input).unwrap();
    }
    server.process_new_packets().unwrap();
    let answer = server_output(&mut server);
    deliver(&mut tls, &answer, &mut Collect::default()).unwrap();
    let one_round_trip = !tls.is_handshaking();
    // Whatever it took, the handshake completes.
    pump(&mut tls, &mut server, &mut Collect::default()).unwrap();
    assert!(!tls.is_handshaking() && !server.is_handshaking());
    let group = server.negotiated_key_exchange_group().unwrap().name();
    (group, one_round_trip)
}

/// The default configuration agrees the post-quantum hybrid with a server that has it, and
/// X25519 with one that has only that, in the same one round trip: the ClientHello carries
/// both shares.
#[test]
fn the_key_exchange_is_post_quantum_where_the_server_can_and_x25519_costs_no_retry() {
    use rustls::crypto::aws_lc_rs::kx_group;
    use rustls::NamedGroup;
    assert_eq!(
        key_exchange_against(rustls::crypto::aws_lc_rs::DEFAULT_KX_GROUPS),
        (NamedGroup::X25519MLKEM768, true)
    );
    assert_eq!(
        key_exchange_against(&[kx_group::X25519]),
        (NamedGroup::X25519, true)
    );
    // A server with neither takes a retry, and still agrees one the client offers.
    assert_eq!(
        key_exchange_against(&[kx_group::SECP256R1]),
        (NamedGroup::secp256r1, false)
    );
}

fn server_output(server: &mut ServerConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut out).unwrap();
    }
    out
}

/// A session's ciphertext buffer, bytes: a read's 64 KiB and one whole TLS record.
const CIPHERTEXT_BUFFER: usize = 64 * 1024 + 5 + (1 << 14) + 2048;

/// A deterministic text of `len` bytes.
fn text(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 23) as u8).collect()
}

#[test]
fn plaintext_that_arrives_before_the_stream_accepts_waits_for_flush() {
    let (mut tls, mut server) = connected();
    let early = text(40_000);
    server.writer().write_all(&early).unwrap();
    let mut sink = Collect::default();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert!(sink.bytes.is_empty());
    let held = tls.buffer_capacity();
    assert!(
        held >= CIPHERTEXT_BUFFER + 40_000,
        "held plaintext counts: {held}"
    );
    sink.accepting = true;
    tls.flush_plaintext(&mut sink).unwrap();
    assert_eq!(sink.bytes, early);
    // Later data follows it, in order.
    server.writer().write_all(b"next").unwrap();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert_eq!(&sink.bytes[early.len()..], b"next");
}

#[test]
fn plaintext_nobody_takes_is_bounded() {
    let (mut tls, mut server) = connected();
    server
        .writer()
        .write_all(&text(feedwire_core::HELD_PLAINTEXT_LIMIT + 1))
        .unwrap();
    let outcome = deliver(
        &mut tls,
        &server_output(&mut server),
        &mut Collect::default(),
    );
    assert_eq!(outcome, Err(TlsError::PlaintextNotTaken));

    // Exactly the limit is held, and reaches the sink once it takes input.
    let (mut tls, mut server) = connected();
    let at_limit = text(feedwire_core::HELD_PLAINTEXT_LIMIT);
    server.writer().write_all(&at_limit).unwrap();
    let mut sink = Collect::default();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    sink.accepting = true;
    tls.flush_plaintext(&mut sink).unwrap();
    assert!(sink.bytes == at_limit);
}

#[test]
fn writes_during_the_handshake_go_out_after_it_in_order() {
    let (roots, server_config) = test_pki(&["localhost"]);
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    let before = tls.buffer_capacity();
    tls.write_plaintext(b"first ");
    tls.write_plaintext(b"second");
    assert!(
        tls.buffer_capacity() >= before + 12,
        "plaintext waiting for the handshake counts"
    );
    let received = pump(&mut tls, &mut server, &mut Collect::default()).unwrap();
    assert!(!tls.is_handshaking());
    assert_eq!(received, b"first second");
    tls.write_plaintext(b" third");
    tls.send_close_notify();
    let received = pump(&mut tls, &mut server, &mut Collect::default()).unwrap();
    assert_eq!(received, b" third");
    let mut rest = Vec::new();
    // close_notify reached the server after the data: its reader reports a clean end.
    assert_eq!(server.reader().read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn bytes_after_close_notify_are_dropped_and_reading_goes_on() {
    let (mut tls, mut server) = connected();
    assert!(!tls.is_closed_by_peer());
    server.writer().write_all(b"last words").unwrap();
    server.send_close_notify();
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert_eq!(sink.bytes, b"last words");
    assert!(tls.is_closed_by_peer());
    // Whatever follows is never processed, and never fills the buffer: every read still
    // gets room (a read of 0 bytes would look like end of stream).
    for _ in 0..10 {
        let buf = tls.read_buf();
        assert!(
            (64 * 1024..256 * 1024).contains(&buf.len()),
            "{}",
            buf.len()
        );
        let n = buf.len();
        buf.fill(0x17);
        tls.handle_read(n, &mut sink).unwrap();
    }
    assert_eq!(sink.bytes, b"last words");
    assert_eq!(tls.handle_eof(&mut sink), Ok(()));
}

/// Our close_notify first, the peer's after: rustls reports the session closed both ways
/// (not only "peer closed"), which is still a clean end; the peer's last data arrives.
#[test]
fn a_close_we_started_ends_cleanly_when_the_peer_answers() {
    let (mut tls, mut server) = connected();
    tls.send_close_notify();
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    pump(&mut tls, &mut server, &mut sink).unwrap();
    assert!(!tls.is_closed_by_peer());
    server.writer().write_all(b"bye").unwrap();
    server.send_close_notify();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert_eq!(sink.bytes, b"bye");
    assert!(tls.is_closed_by_peer());
    assert_eq!(tls.handle_eof(&mut sink), Ok(()));
}

#[test]
fn small_records_reach_the_sink_in_full_reads() {
    // Into bytes, and into uninitialised room as an engine's read buffer offers it.
    for spare in [false, true] {
        // A server writing message by message: a 100-byte record per message.
        let (mut tls, mut server) = connected();
        let sent = text(100 * 100);
        let mut ciphertext = Vec::new();
        for message in sent.chunks(100) {
            server.writer().write_all(message).unwrap();
            ciphertext.extend_from_slice(&server_output(&mut server));
        }
        let mut sink = Collect {
            accepting: true,
            spare,
            ..Collect::default()
        };
        deliver(&mut tls, &ciphertext, &mut sink).unwrap();
        assert_eq!(sink.bytes, sent);
        // The sink's reads are 1000 bytes: ten full reads, not a hundred of one record each.
        assert_eq!(sink.reads, 10);
    }
}

#[test]
fn full_records_of_one_socket_read_reach_the_sink_as_one_read() {
    // A firehose: 128 KiB written at once go out as eight full 16 KiB records; the session's
    // first read (room for 64 KiB and a record) takes five, the second three.
    for spare in [false, true] {
        let (mut tls, mut server) = connected();
        let sent = text(8 * 16 * 1024);
        server.writer().write_all(&sent).unwrap();
        let ciphertext = server_output(&mut server);
        let mut sink = Collect {
            spare,
            ..Collect::taking_reads_of(64 * 1024)
        };
        deliver(&mut tls, &ciphertext, &mut sink).unwrap();
        assert_eq!(sink.bytes, sent);
        // The sink's reads are 64 KiB: 80 KiB of plaintext make two, 48 KiB one — not one
        // per record (eight), each of which would cost the engine more than its messages do.
        assert_eq!(sink.reads, 3);
    }
}

#[test]
fn plaintext_before_a_bad_record_is_not_lost() {
    let (mut tls, mut server) = connected();
    let mut ciphertext = Vec::new();
    for message in [&b"first"[..], b"second", b"third"] {
        server.writer().write_all(message).unwrap();
        ciphertext.extend_from_slice(&server_output(&mut server));
    }
    // Corrupt the last record's tag: it fails authentication.
    let last = ciphertext.len() - 1;
    ciphertext[last] ^= 0xff;
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    let outcome = deliver(&mut tls, &ciphertext, &mut sink);
    assert!(
        matches!(outcome, Err(TlsError::Rustls(rustls::Error::DecryptError))),
        "{outcome:?}"
    );
    assert_eq!(sink.bytes, b"firstsecond");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Any split of the ciphertext into reads yields the same plaintext, into bytes or into
    /// uninitialised room (of any size).
    #[test]
    fn any_split_of_the_ciphertext_yields_the_same_plaintext(
        cuts in proptest::collection::vec(1usize..40_000, 1..40),
        record in 1usize..20_000,
        spare in proptest::prelude::any::<bool>(),
        read_size in 0usize..70_000,
    ) {
        let (mut tls, mut server) = connected();
        let sent = text(150_000);
        let mut ciphertext = Vec::new();
        for piece in sent.chunks(record) {
            server.writer().write_all(piece).unwrap();
            ciphertext.extend_from_slice(&server_output(&mut server));
        }
        let mut sink = Collect { accepting: true, spare, read_size, ..Collect::default() };
        let mut rest = &ciphertext[..];
        for cut in cuts.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let buf = tls.read_buf();
            let n = buf.len().min(*cut).min(rest.len());
            buf[..n].copy_from_slice(&rest[..n]);
            tls.handle_read(n, &mut sink).unwrap();
            rest = &rest[n..];
        }
        proptest::prop_assert!(sink.bytes == sent);
    }
}

#[test]
fn a_certificate_larger_than_a_record_verifies_in_small_reads() {
    // ~42 KB of names: the Certificate message spans three records, which rustls joins in
    // the session's buffer before it can verify anything; 1000-byte reads make the buffer
    // grow past its normal size while it waits.
    let names: Vec<String> = (0..1500)
        .map(|i| format!("feed-{i}.stream.example"))
        .chain(["localhost".to_owned()])
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (roots, server_config) = test_pki(&names);
    let mut tls = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    let mut server = ServerConnection::new(server_config).unwrap();
    let mut sink = Collect::default();
    for _ in 0..10 {
        while let Some(c) = tls.poll_transmit() {
            let mut input = &c[..];
            while !input.is_empty() {
                server.read_tls(&mut input).unwrap();
                server.process_new_packets().unwrap();
            }
        }
        for piece in server_output(&mut server).chunks(1000) {
            let room = tls.read_buf();
            // The promise to transports: every read gets room, at least the page a fresh
            // session's reads start at, a long handshake message waiting in the buffer or not.
            assert!(room.len() >= 4096, "{} bytes of room", room.len());
            room[..piece.len()].copy_from_slice(piece);
            tls.handle_read(piece.len(), &mut sink).unwrap();
        }
        if !tls.is_handshaking() {
            return;
        }
    }
    panic!("the handshake did not finish");
}

#[test]
fn the_low_water_mark_counts_the_partial_record_already_in() {
    let (roots, _) = test_pki(&["localhost"]);
    let handshaking = TlsSession::new(tls_config_with_roots(roots), "localhost").unwrap();
    assert_eq!(handshaking.read_low_water(100_000), 1, "handshake");
    let (mut tls, mut server) = connected();
    assert_eq!(tls.read_low_water(100_000), 100_000);
    // Half a record in: those ciphertext bytes carry at most as much plaintext.
    server.writer().write_all(&text(10_000)).unwrap();
    let record = server_output(&mut server);
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    let buf = tls.read_buf();
    buf[..5000].copy_from_slice(&record[..5000]);
    tls.handle_read(5000, &mut sink).unwrap();
    assert!(sink.bytes.is_empty());
    assert_eq!(tls.read_low_water(100_000), 95_000);
    assert_eq!(tls.read_low_water(3000), 1, "never below 1");
    let rest = record.len() - 5000;
    let buf = tls.read_buf();
    buf[..rest].copy_from_slice(&record[5000..]);
    tls.handle_read(rest, &mut sink).unwrap();
    assert_eq!(sink.bytes.len(), 10_000);
    assert_eq!(tls.read_low_water(100_000), 100_000);
    // Plaintext held for a sink that takes none yet: any byte may matter.
    server.writer().write_all(b"held").unwrap();
    deliver(
        &mut tls,
        &server_output(&mut server),
        &mut Collect::default(),
    )
    .unwrap();
    assert_eq!(tls.read_low_water(100_000), 1, "plaintext held");
}

/// A peer may ask for a key update at any time (TLS 1.3, RFC 8446 §4.6.3), and the answer
/// is owed only before our next record. A server asking with every message while we send
/// nothing — a market-data stream reads for hours without writing — must not make us queue
/// an answer per request: rustls keeps one, sent with our next write. Data keeps flowing,
/// and that next write still reaches the server under the keys it expects.
#[test]
fn key_update_requests_from_the_server_queue_one_answer_not_one_each() {
    let (mut tls, mut server) = connected();
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    let requests = 20_000;
    let mut sent = 0;
    for i in 0..requests {
        server.refresh_traffic_keys().unwrap();
        let message = format!("message {i};");
        server.writer().write_all(message.as_bytes()).unwrap();
        let ciphertext = server_output(&mut server);
        sent += ciphertext.len();
        deliver(&mut tls, &ciphertext, &mut sink).unwrap();
    }
    let expected: String = (0..requests).map(|i| format!("message {i};")).collect();
    assert_eq!(sink.bytes, expected.as_bytes());
    let mut answers = 0;
    while let Some(c) = tls.poll_transmit() {
        answers += c.len();
    }
    assert!(
        answers < 1024,
        "{answers} bytes to send after {requests} key update requests ({sent} bytes in)"
    );
    // Our next write carries the one answer first; the server reads the write.
    tls.write_plaintext(b"SUBSCRIBE");
    let received = pump(&mut tls, &mut server, &mut sink).unwrap();
    assert_eq!(received, b"SUBSCRIBE");
}

/// After the handshake, a quiet session holds its ciphertext buffer and next to nothing
/// else (`buffer_capacity` counts it, and what waits to be sent): encoding the handshake's
/// records no longer leaves a record's worth of zeroed room (18.7 KiB per record) behind in
/// the outbox — measured 57 → 28 KB an idle TLS connection. What the outbox keeps is the
/// room of the largest flight it held: the ClientHello, 1.5 KB with its ML-KEM key share,
/// until `release_read_buffer` (a quiet stream's), after which the session holds nothing.
#[test]
fn a_quiet_session_holds_little_besides_its_ciphertext_buffer() {
    let (mut tls, mut server) = connected();
    let fresh = tls.buffer_capacity();
    // A ping's worth out and a message in: the steady state of a quiet stream.
    tls.write_plaintext(&[0x89, 0x80, 1, 2, 3, 4]);
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    assert_eq!(pump(&mut tls, &mut server, &mut sink).unwrap().len(), 6);
    server.writer().write_all(b"{\"e\":\"trade\"}").unwrap();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    for held in [fresh, tls.buffer_capacity()] {
        assert!(
            (CIPHERTEXT_BUFFER..=CIPHERTEXT_BUFFER + 2048).contains(&held),
            "{held} bytes held, the ciphertext buffer being {CIPHERTEXT_BUFFER}"
        );
    }
    assert!(tls.release_read_buffer());
    assert_eq!(tls.buffer_capacity(), 0, "released: nothing held");
    assert!(!tls.release_read_buffer(), "nothing left to release");
    // 100 KB written and not yet taken by the transport: counted, as ciphertext waiting.
    tls.write_plaintext(&[b'x'; 100_000]);
    let waiting = tls.buffer_capacity();
    assert!(
        (CIPHERTEXT_BUFFER + 100_000..CIPHERTEXT_BUFFER + 300_000).contains(&waiting),
        "{waiting}"
    );
}

/// A partial record keeps the ciphertext buffer through a release, and completes intact.
/// Released between records, the next read is offered a page (a stream woken from a quiet
/// spell for one message zeroes 4 KiB before reading it, not 82 KB), and reads double while
/// they come back full, to 64 KiB and a record's room; every byte arrives, in order.
#[test]
fn a_released_session_reads_on_and_a_partial_record_is_kept() {
    let (mut tls, mut server) = connected();
    let mut sink = Collect {
        accepting: true,
        ..Collect::default()
    };
    server.writer().write_all(b"after a quiet spell").unwrap();
    let record = server_output(&mut server);
    let buf = tls.read_buf();
    buf[..10].copy_from_slice(&record[..10]);
    tls.handle_read(10, &mut sink).unwrap();
    assert!(!tls.release_read_buffer(), "a partial record is kept");
    assert!(tls.buffer_capacity() >= CIPHERTEXT_BUFFER);
    let buf = tls.read_buf();
    buf[..record.len() - 10].copy_from_slice(&record[10..]);
    tls.handle_read(record.len() - 10, &mut sink).unwrap();
    assert_eq!(sink.bytes, b"after a quiet spell");
    assert!(tls.release_read_buffer());
    assert_eq!(tls.buffer_capacity(), 0);
    server.writer().write_all(b" and one more").unwrap();
    deliver(&mut tls, &server_output(&mut server), &mut sink).unwrap();
    assert_eq!(sink.bytes, b"after a quiet spell and one more");
    assert_eq!(tls.buffer_capacity(), 4096, "a page for a message");

    let burst = text(512 * 1024);
    server.writer().write_all(&burst).unwrap();
    let ciphertext = server_output(&mut server);
    let offers = offered_reads(&mut tls, &ciphertext, &mut sink, |tls| {
        assert!(tls.buffer_capacity() <= CIPHERTEXT_BUFFER);
    });
    assert!(sink.bytes[b"after a quiet spell and one more".len()..] == burst[..]);
    assert_eq!(&offers[..4], [4096, 8192, 16384, 32768], "{offers:?}");
    assert!(offers[4..].iter().all(|&o| o >= 64 * 1024), "{offers:?}");
}

/// A sink of the application's own that leaves `accepts_input` as it is takes input: `feed`
/// hands it every byte, in pieces no larger than its `read_buf`; a sink that takes no input
/// is handed none.
#[test]
fn a_sink_with_the_default_accepts_input_takes_every_byte() {
    struct Plain {
        space: [u8; 4],
        bytes: Vec<u8>,
    }
    impl PlaintextSink for Plain {
        fn read_buf(&mut self) -> &mut [u8] {
            &mut self.space
        }
        fn handle_read(&mut self, n: usize) {
            self.bytes.extend_from_slice(&self.space[..n]);
        }
    }
    let mut sink = Plain {
        space: [0; 4],
        bytes: Vec::new(),
    };
    assert_eq!(sink.feed(b"hello world"), 11);
    assert_eq!(sink.bytes, b"hello world");
    // One that takes no input is handed nothing.
    let mut closed = Collect::default();
    assert_eq!(closed.feed(b"hello world"), 0);
    assert!(closed.bytes.is_empty());
}
