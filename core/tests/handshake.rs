//! RFC 6455 §4.1: the client's opening handshake.

mod common;

use common::*;
use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{ConfigError, Error, Event, HandshakeError, State, WebSocketClient, WsConfig};

#[test]
fn request_carries_key_version_and_resource() {
    let mut ws = WebSocketClient::new(
        "ws://example.com:8080/ws?streams=a@b",
        WsConfig::default(),
        SEED,
    )
    .unwrap();
    let req = String::from_utf8(drain_tx(&mut ws)).unwrap();
    assert!(
        req.starts_with("GET /ws?streams=a@b HTTP/1.1\r\nHost: example.com:8080\r\n"),
        "{req}"
    );
    assert!(req.contains("\r\nSec-WebSocket-Version: 13\r\n"));
    let key = req
        .lines()
        .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: "))
        .unwrap();
    assert_eq!(key.len(), 24, "16 bytes in base64");
    assert!(req.ends_with("\r\n\r\n"));
    assert_eq!(ws.state(), State::Handshaking);
}

#[test]
fn keys_differ_per_seed() {
    let key = |seed| {
        let mut ws = WebSocketClient::new(URL, WsConfig::default(), seed).unwrap();
        let req = String::from_utf8(drain_tx(&mut ws)).unwrap();
        req.lines()
            .find_map(|l| l.strip_prefix("Sec-WebSocket-Key: ").map(str::to_owned))
            .unwrap()
    };
    assert_ne!(key([1; 32]), key([2; 32]));
    assert_eq!(key([1; 32]), key([1; 32]), "deterministic for a given seed");
}

#[test]
fn frames_in_the_same_read_as_the_head_are_not_lost() {
    let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    let mut bytes = accept_response(&drain_tx(&mut ws));
    bytes.extend(server_frame(true, 1, b"first"));
    bytes.extend(server_frame(true, 2, b"second"));
    ws.handle_input(&bytes);
    let evs = events(&mut ws);
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert!(matches!(&evs[0], Event::Opened(_)));
    assert!(matches!(&evs[1], Event::Message(m) if m.payload == "first"));
    assert!(matches!(&evs[2], Event::Message(m) if m.payload == "second"));
}

#[test]
fn bad_accept_fails_without_sending_close() {
    let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    drain_tx(&mut ws);
    ws.handle_input(b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Accept: AAAA\r\n\r\n");
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(HandshakeError::AcceptMismatch.into())]
    );
    assert_eq!(ws.state(), State::Failed);
    assert!(drain_tx(&mut ws).is_empty());
    assert!(ws.is_finished());
}

#[test]
fn refused_upgrade_reports_status_and_body() {
    let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    drain_tx(&mut ws);
    ws.handle_input(
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 20\r\n\r\n{\"code\":-1003,",
    );
    assert!(events(&mut ws).is_empty(), "body still incomplete");
    ws.handle_input(b"\"x\":1}trailing garbage");
    let evs = events(&mut ws);
    let [Event::Failed(Error::Handshake(HandshakeError::Rejected { status, refusal }))] =
        evs.as_slice()
    else {
        panic!("{evs:?}");
    };
    assert_eq!(
        (*status, refusal.reason.as_str()),
        (429, "Too Many Requests")
    );
    assert_eq!(&refusal.body[..], b"{\"code\":-1003,\"x\":1}");
    assert_eq!(refusal.retry_after, None);
}

#[test]
fn a_refusal_body_is_kept_up_to_max_handshake_size_across_reads() {
    // No Content-Length and a body longer than the cap, arriving in two reads: the body
    // reported is the first `max_handshake_size` bytes, not a read's worth past them.
    let config = WsConfig {
        max_handshake_size: 256,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(URL, config, SEED).unwrap();
    drain_tx(&mut ws);
    let mut first = b"HTTP/1.1 503 Service Unavailable\r\n\r\n".to_vec();
    first.extend([b'a'; 100]);
    ws.handle_input(&first);
    assert!(events(&mut ws).is_empty());
    ws.handle_input(&[b'b'; 300]);
    let evs = events(&mut ws);
    let [Event::Failed(Error::Handshake(HandshakeError::Rejected { refusal, .. }))] =
        evs.as_slice()
    else {
        panic!("{evs:?}");
    };
    let body = &refusal.body;
    assert_eq!(body.len(), 256);
    assert_eq!(&body[..100], &[b'a'; 100][..]);
    assert_eq!(&body[100..], &[b'b'; 156][..]);
}

#[test]
fn refused_upgrade_without_length_ends_at_eof() {
    let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    drain_tx(&mut ws);
    ws.handle_input(b"HTTP/1.1 503 Service Unavailable\r\n\r\ndown");
    assert!(events(&mut ws).is_empty());
    ws.handle_eof();
    let evs = events(&mut ws);
    let [Event::Failed(Error::Handshake(HandshakeError::Rejected { status, refusal }))] =
        evs.as_slice()
    else {
        panic!("{evs:?}");
    };
    assert_eq!((*status, &refusal.body[..]), (503, &b"down"[..]));
}

#[test]
fn head_over_the_cap_fails() {
    let config = WsConfig {
        max_handshake_size: 64,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(URL, config, SEED).unwrap();
    drain_tx(&mut ws);
    ws.handle_input(format!("HTTP/1.1 101 OK\r\nX-Pad: {}\r\n", "a".repeat(100)).as_bytes());
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(
            HandshakeError::HeadTooLarge { max: 64 }.into()
        )]
    );
}

#[test]
fn eof_during_handshake() {
    let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    drain_tx(&mut ws);
    ws.handle_input(b"HTTP/1.1 101 Swi");
    ws.handle_eof();
    assert_eq!(
        events(&mut ws),
        vec![Event::Failed(HandshakeError::Eof.into())]
    );
}

#[test]
fn every_split_of_the_head_opens_once() {
    let mut probe = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
    let response = accept_response(&drain_tx(&mut probe));
    for cut in 0..response.len() {
        let mut ws = WebSocketClient::new(URL, WsConfig::default(), SEED).unwrap();
        drain_tx(&mut ws);
        ws.handle_input(&response[..cut]);
        assert!(events(&mut ws).is_empty(), "cut {cut}");
        ws.handle_input(&response[cut..]);
        assert!(
            matches!(events(&mut ws).as_slice(), [Event::Opened(_)]),
            "cut {cut}"
        );
    }
}

/// Header names and subprotocols are RFC 9110 tokens, header values carry no CR, LF or NUL:
/// what the request writes is exactly what the application gave, never a second header.
#[test]
fn config_accepts_tokens_and_refuses_everything_else() {
    let good = WsConfig {
        subprotocols: vec!["json".into(), "v2.bin".into(), "a!#$%&'*+-^_`|~9".into()],
        extra_headers: vec![("X-MBX-APIKEY".into(), "k3y with spaces".into())],
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(URL, good, SEED).unwrap();
    let req = String::from_utf8(drain_tx(&mut ws)).unwrap();
    assert!(
        req.contains("\r\nSec-WebSocket-Protocol: json, v2.bin, a!#$%&'*+-^_`|~9\r\n"),
        "{req}"
    );
    assert!(
        req.contains("\r\nX-MBX-APIKEY: k3y with spaces\r\n"),
        "{req}"
    );

    for name in ["", "X Key", "X:Key", "X\r\nEvil", "Ключ", "X(1)", "X\"Y"] {
        let config = WsConfig {
            extra_headers: vec![(name.into(), "v".into())],
            ..WsConfig::default()
        };
        assert_eq!(
            WebSocketClient::new(URL, config, SEED).unwrap_err(),
            ConfigError::InvalidHeader(name.into()),
            "header name {name:?}"
        );
    }
    for value in ["a\rb", "a\nb", "a\0b"] {
        let config = WsConfig {
            extra_headers: vec![("X-Key".into(), value.into())],
            ..WsConfig::default()
        };
        assert_eq!(
            WebSocketClient::new(URL, config, SEED).unwrap_err(),
            ConfigError::InvalidHeader("X-Key".into()),
            "header value {value:?}"
        );
    }
    for bad in ["", "json v2", "json,v2", "json;q=1", "é"] {
        let config = WsConfig {
            subprotocols: vec!["json".into(), bad.into()],
            ..WsConfig::default()
        };
        assert_eq!(
            WebSocketClient::new(URL, config, SEED).unwrap_err(),
            ConfigError::InvalidSubprotocol(bad.into()),
            "subprotocol {bad:?}"
        );
    }
}

/// Every limit of zero is refused by name (a zero limit would refuse every frame, or loop
/// on empty reads).
#[test]
fn every_zero_limit_is_named() {
    type SetZero = fn(&mut WsConfig);
    let limits: [(&str, SetZero); 5] = [
        ("max_read_size", |c| c.max_read_size = 0),
        ("max_frame_size", |c| c.max_frame_size = 0),
        ("max_message_size", |c| c.max_message_size = 0),
        ("max_handshake_size", |c| c.max_handshake_size = 0),
        ("fragment_size", |c| c.fragment_size = Some(0)),
    ];
    for (name, set_zero) in limits {
        let mut config = WsConfig::default();
        set_zero(&mut config);
        assert_eq!(
            WebSocketClient::new(URL, config, SEED).unwrap_err(),
            ConfigError::ZeroLimit(name)
        );
    }
    let one = WsConfig {
        max_read_size: 1,
        max_frame_size: 1,
        max_message_size: 1,
        max_handshake_size: 1,
        fragment_size: Some(1),
        ..WsConfig::default()
    };
    assert!(WebSocketClient::new(URL, one, SEED).is_ok());
}

#[test]
fn config_errors_are_typed() {
    let bad_header = WsConfig {
        extra_headers: vec![("X-Key".into(), "a\r\nEvil: 1".into())],
        ..WsConfig::default()
    };
    assert_eq!(
        WebSocketClient::new(URL, bad_header, SEED).unwrap_err(),
        ConfigError::InvalidHeader("X-Key".into())
    );
    let zero = WsConfig {
        max_read_size: 0,
        ..WsConfig::default()
    };
    assert_eq!(
        WebSocketClient::new(URL, zero, SEED).unwrap_err(),
        ConfigError::ZeroLimit("max_read_size")
    );
    assert!(matches!(
        WebSocketClient::new("tcp://h:1", WsConfig::default(), SEED),
        Err(ConfigError::UnsupportedScheme(_))
    ));
}
