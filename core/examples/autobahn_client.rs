//! Client for the Autobahn|Testsuite fuzzingserver.
//!
//! ```text
//! cargo run --release -p feedwire-core --example autobahn_client -- --url ws://127.0.0.1:9001 --agent feedwire
//! ```
//! Protocol: `GET /getCaseCount` (one text message: the count), then for each case
//! `/runCase?case=N&agent=NAME`, echoing every text and binary message unchanged until the
//! server closes, then `/updateReports?agent=NAME`. A failed case is reported and the run
//! goes on.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example reports to the terminal"
)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use feedwire_core::{os_seed, Event, MessageKind, WebSocketClient, WsConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "ws://127.0.0.1:9001".to_owned();
    let mut agent = "feedwire".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => url = args.next().ok_or("--url needs a value")?,
            "--agent" => agent = args.next().ok_or("--agent needs a value")?,
            other => {
                return Err(
                    format!("unknown argument {other:?}; use --url URL --agent NAME").into(),
                )
            }
        }
    }
    let url = url.trim_end_matches('/');

    let mut count_text = String::new();
    run_connection(&format!("{url}/getCaseCount"), |ws, kind, payload| {
        if kind == MessageKind::Text {
            count_text = String::from_utf8_lossy(payload).into_owned();
        }
        let _ = ws;
    })?;
    let count: u32 = count_text
        .trim()
        .parse()
        .map_err(|_| format!("bad case count {count_text:?}"))?;
    println!("{count} cases");

    for case in 1..=count {
        let result = run_connection(
            &format!("{url}/runCase?case={case}&agent={agent}"),
            |ws, kind, payload| {
                // Sending fails only once a close started; the server decides the verdict.
                let _ = match kind {
                    MessageKind::Text => {
                        ws.send_text(std::str::from_utf8(payload).expect("core validated UTF-8"))
                    }
                    MessageKind::Binary => ws.send_binary(payload),
                };
            },
        );
        match result {
            Ok(outcome) => println!("case {case}/{count}: {outcome}"),
            Err(e) => eprintln!("case {case}/{count}: transport error: {e}"),
        }
    }

    run_connection(&format!("{url}/updateReports?agent={agent}"), |_, _, _| {})?;
    println!("reports updated for agent {agent}");
    Ok(())
}

/// Runs one connection to its end, calling `on_message` for every data message. Returns how
/// it ended; only transport errors (connect, socket I/O) are `Err`.
fn run_connection(
    url: &str,
    mut on_message: impl FnMut(&mut WebSocketClient, MessageKind, &[u8]),
) -> Result<String, Box<dyn std::error::Error>> {
    let config = WsConfig {
        max_frame_size: 64 << 20,
        max_message_size: 64 << 20,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(url, config, os_seed())?;
    let mut sock = TcpStream::connect((ws.endpoint().host.as_str(), ws.endpoint().port))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut outcome = "ended without close".to_owned();
    loop {
        while let Some(chunk) = ws.poll_transmit() {
            sock.write_all(&chunk)?;
        }
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
        if ws.is_finished() {
            // Echoes and pongs queued by on_message were flushed above; let the server close
            // TCP first (RFC 6455 §7.1.1), but do not wait forever.
            while let Some(chunk) = ws.poll_transmit() {
                sock.write_all(&chunk)?;
            }
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
