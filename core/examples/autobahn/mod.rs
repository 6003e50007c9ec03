//! The Autobahn|Testsuite client protocol over the core and blocking sockets. Shared by the
//! `autobahn_client` example and the test that runs it against a mock fuzzingserver.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use feedwire_core::{os_seed, Event, MessageKind, WebSocketClient, WsConfig};

/// Runs every case the server announces, then asks it to update its reports. Each case's
/// outcome goes to `report`; a failed case never stops the run. Each read takes at most
/// `max_read_size` bytes (tiny reads cut every frame the peer sends at many places).
pub(crate) fn run_suite(
    url: &str,
    agent: &str,
    max_read_size: usize,
    mut report: impl FnMut(String),
) -> Result<(), Box<dyn std::error::Error>> {
    let url = url.trim_end_matches('/');
    let mut count_text = String::new();
    run_connection(
        &format!("{url}/getCaseCount"),
        max_read_size,
        |_, kind, payload| {
            if kind == MessageKind::Text {
                count_text = String::from_utf8_lossy(payload).into_owned();
            }
        },
    )?;
    let count: u32 = count_text
        .trim()
        .parse()
        .map_err(|_| format!("bad case count {count_text:?}"))?;
    report(format!("{count} cases"));
    for case in 1..=count {
        let result = run_connection(
            &format!("{url}/runCase?case={case}&agent={agent}"),
            max_read_size,
            |ws, kind, payload| {
                // Sending fails only once a close started; the server judges the case.
                let _ = match kind {
                    MessageKind::Text => ws
                        .send_text(std::str::from_utf8(payload).expect("the core validated UTF-8")),
                    MessageKind::Binary => ws.send_binary(payload),
                };
            },
        );
        match result {
            Ok(outcome) => report(format!("case {case}/{count}: {outcome}")),
            Err(e) => report(format!("case {case}/{count}: transport error: {e}")),
        }
    }
    run_connection(
        &format!("{url}/updateReports?agent={agent}"),
        max_read_size,
        |_, _, _| {},
    )?;
    report(format!("reports updated for agent {agent}"));
    Ok(())
}

/// Runs one connection to its end, calling `on_message` for every data message. Returns how
/// it ended; only transport errors (connect, socket I/O) are `Err`.
fn run_connection(
    url: &str,
    max_read_size: usize,
    mut on_message: impl FnMut(&mut WebSocketClient, MessageKind, &[u8]),
) -> Result<String, Box<dyn std::error::Error>> {
    let config = WsConfig {
        max_frame_size: 64 << 20,
        max_message_size: 64 << 20,
        max_read_size,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(url, config, os_seed())?;
    let mut sock = TcpStream::connect((ws.endpoint().host.as_str(), ws.endpoint().port))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut outcome = "ended without close".to_owned();
    loop {
        while let Some(event) = ws.poll_event() {
            match event {
                Event::Message(m) => on_message(&mut ws, m.kind, &m.payload),
                Event::Closed { by, frame } => {
                    outcome = format!("closed by {by:?} with {}", frame.code)
                }
                Event::Failed(e) => {
                    outcome = format!("failed: {e} (close code {})", e.close_code())
                }
                _ => {}
            }
        }
        while let Some(chunk) = ws.poll_transmit() {
            sock.write_all(&chunk)?;
        }
        if ws.is_finished() {
            // RFC 6455 §7.1.1: let the server close TCP first, but do not wait forever.
            sock.set_read_timeout(Some(Duration::from_secs(2)))?;
            let mut sink = [0u8; 4096];
            while matches!(sock.read(&mut sink), Ok(n) if n > 0) {}
            return Ok(outcome);
        }
        match sock.read(ws.read_buf()) {
            Ok(0) => ws.handle_eof(),
            Ok(n) => ws.handle_read(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}
