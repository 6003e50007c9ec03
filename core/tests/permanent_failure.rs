//! Failures retrying will not mend — the upgrade refused with a redirect or a client error,
//! a server that does not speak WebSocket, a certificate that does not verify — end a stream
//! that has never been open, instead of retrying every `max_delay` for ever; once it has
//! been open they are retried as any failure (`ReconnectPolicy::permanent`).

mod common;

use std::time::Duration;

use common::harness::Harness;
use feedwire_core::rustls::{CertificateError, Error as RustlsError};
use feedwire_core::{
    EndReason, Error, HandshakeError, PermanentFailure, StreamConfig, StreamEvent, StreamState,
    TlsError, TransportCommand,
};

const URL: &str = "ws://127.0.0.1:9443/ws";

fn binance(permanent: PermanentFailure) -> StreamConfig {
    let mut config = StreamConfig::binance_stream(URL);
    config.reconnect.permanent = permanent;
    config
}

/// A stream whose first attempt is connected and waits for the upgrade's answer.
fn first_attempt(permanent: PermanentFailure) -> Harness {
    let mut h = Harness::new(binance(permanent));
    h.connect();
    h.take_events();
    h.take_commands();
    h
}

fn refusal(status: u16) -> Vec<u8> {
    format!("HTTP/1.1 {status} Whatever\r\nContent-Length: 0\r\n\r\n").into_bytes()
}

/// The stream ended in `Crashed` with a reason `is` accepts, dropped its connection and
/// never connects again.
fn assert_ended(h: &mut Harness, is: impl Fn(&EndReason) -> bool) {
    let evs = h.take_events();
    assert!(
        matches!(&evs[..], [StreamEvent::Crashed(r)] if is(r) && r.is_permanent()),
        "{evs:?}"
    );
    assert!(matches!(h.state(), StreamState::Crashed(_)));
    assert_eq!(h.take_commands(), vec![TransportCommand::Disconnect]);
    h.advance(Duration::from_secs(3600));
    assert!(h.take_commands().is_empty(), "no attempt after the end");
    assert!(h.take_events().is_empty());
}

/// The connection ended and the stream connects again after its backoff.
fn assert_retried(h: &mut Harness, is: impl Fn(&EndReason) -> bool) {
    let evs = h.take_events();
    let delay = evs
        .iter()
        .find_map(|e| match e {
            StreamEvent::Reconnecting { reason, delay, .. } if is(reason) => Some(*delay),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{evs:?}"));
    h.take_commands();
    h.advance(delay);
    assert!(
        matches!(h.take_commands().as_slice(), [TransportCommand::Connect(_)]),
        "connects again after {delay:?}"
    );
    h.take_events();
}

fn rejected(status: u16) -> impl Fn(&EndReason) -> bool {
    move |r| {
        matches!(r, EndReason::WebSocket(Error::Handshake(HandshakeError::Rejected {
            status: s, ..
        })) if *s == status)
    }
}

fn untrusted() -> TlsError {
    TlsError::Rustls(RustlsError::InvalidCertificate(
        CertificateError::UnknownIssuer,
    ))
}

#[test]
fn a_redirect_or_client_error_ends_a_stream_never_open() {
    for status in [301, 302, 308, 400, 401, 403, 404, 405, 410, 426, 451] {
        let mut h = first_attempt(PermanentFailure::default());
        h.feed(&refusal(status));
        assert_ended(&mut h, rejected(status));
    }
}

#[test]
fn refusals_for_now_are_retried_even_before_the_first_open() {
    // 408, 425 and 429 say "later"; 418 is Binance's ban, lifted after its Retry-After;
    // 5xx is the server's trouble; a 2xx is not an answer to an upgrade.
    for status in [200, 408, 418, 425, 429, 500, 502, 503, 504] {
        let mut h = first_attempt(PermanentFailure::default());
        h.feed(&refusal(status));
        assert_retried(&mut h, rejected(status));
    }
}

#[test]
fn a_server_that_does_not_speak_websocket_ends_a_stream_never_open() {
    let answers: [(&str, HandshakeError); 2] = [
        (
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
            HandshakeError::MissingUpgrade,
        ),
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: c29tZXRoaW5nIGVsc2U=\r\n\r\n",
            HandshakeError::AcceptMismatch,
        ),
    ];
    for (answer, expected) in answers {
        let mut h = first_attempt(PermanentFailure::default());
        h.feed(answer.as_bytes());
        assert_ended(&mut h, |r| {
            *r == EndReason::WebSocket(Error::Handshake(expected.clone()))
        });
    }
}

#[test]
fn an_answer_cut_off_or_malformed_is_retried() {
    let mut h = first_attempt(PermanentFailure::default());
    h.feed(b"HTTP/1.1 101 Switching");
    h.s.handle_eof(h.now);
    h.pump();
    assert_retried(&mut h, |r| {
        *r == EndReason::WebSocket(Error::Handshake(HandshakeError::Eof))
    });
    h.connect();
    h.feed(b"SMTP ready\r\n\r\n");
    assert_retried(&mut h, |r| {
        matches!(
            r,
            EndReason::WebSocket(Error::Handshake(HandshakeError::Malformed(_)))
        )
    });
}

#[test]
fn an_untrusted_certificate_ends_a_stream_never_open_other_tls_failures_are_retried() {
    let mut h = Harness::new(binance(PermanentFailure::default()));
    h.take_commands();
    h.s.handle_tls_error(&TlsError::UnexpectedEof, h.now);
    h.pump();
    assert_retried(&mut h, |r| matches!(r, EndReason::Tls(f) if !f.certificate));
    h.s.handle_tls_error(&untrusted(), h.now);
    h.pump();
    assert_ended(&mut h, |r| matches!(r, EndReason::Tls(f) if f.certificate));
}

#[test]
fn connect_failures_and_timeouts_are_retried() {
    let mut h = Harness::new(binance(PermanentFailure::End));
    h.take_commands();
    h.s.handle_connect_failed("connection refused", h.now);
    h.pump();
    assert_retried(&mut h, |r| matches!(r, EndReason::ConnectFailed(_)));
    h.connect();
    h.advance(Duration::from_secs(60));
    let evs = h.take_events();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            StreamEvent::Reconnecting {
                reason: EndReason::ConnectTimeout,
                ..
            }
        )),
        "{evs:?}"
    );
}

/// A stream that was open, ended by the server and connecting again.
fn reconnecting_after_an_open(permanent: PermanentFailure) -> Harness {
    let mut h = Harness::new(binance(permanent));
    h.open_ws();
    h.s.handle_eof(h.now);
    h.pump();
    assert_retried(&mut h, |r| *r == EndReason::WebSocket(Error::UnexpectedEof));
    h.take_events();
    h
}

#[test]
fn once_open_a_permanent_failure_is_retried_by_default() {
    let mut h = reconnecting_after_an_open(PermanentFailure::default());
    h.connect();
    h.feed(&refusal(404));
    assert_retried(&mut h, rejected(404));
    h.s.handle_tls_error(&untrusted(), h.now);
    h.pump();
    assert_retried(&mut h, |r| matches!(r, EndReason::Tls(f) if f.certificate));
    // And it opens again when the server takes it.
    h.open_ws();
    assert!(
        h.take_events()
            .contains(&StreamEvent::Opened { reconnected: true }),
        "opened again"
    );
}

#[test]
fn end_ends_the_stream_even_after_an_open() {
    let mut h = reconnecting_after_an_open(PermanentFailure::End);
    h.connect();
    h.take_commands();
    h.feed(&refusal(403));
    assert_ended(&mut h, rejected(403));
}

#[test]
fn retry_retries_even_a_stream_never_open() {
    let mut h = first_attempt(PermanentFailure::Retry);
    h.feed(&refusal(404));
    assert_retried(&mut h, rejected(404));
    h.s.handle_tls_error(&untrusted(), h.now);
    h.pump();
    assert_retried(&mut h, |r| matches!(r, EndReason::Tls(f) if f.certificate));
}

#[test]
fn max_attempts_still_counts_transient_failures() {
    let mut config = binance(PermanentFailure::default());
    config.reconnect.max_attempts = Some(1);
    let mut h = Harness::new(config);
    h.connect();
    h.feed(&refusal(503));
    assert_retried(&mut h, rejected(503));
    h.connect();
    h.feed(&refusal(503));
    let evs = h.take_events();
    assert!(
        matches!(
            &evs[..],
            [StreamEvent::Crashed(EndReason::GaveUp { attempts: 1, .. })]
        ),
        "{evs:?}"
    );
}
