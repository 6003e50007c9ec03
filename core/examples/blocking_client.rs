//! The sans-IO core driven by a blocking `std::net::TcpStream`: the embedding story for
//! users with their own event loop.
//!
//! ```text
//! cargo run --release -p feedwire-core --example blocking_client              # local peer
//! cargo run --release -p feedwire-core --example blocking_client -- ws://host:port/path
//! ```
//! Without a URL it starts a local peer on 127.0.0.1 that streams aggTrade-shaped messages,
//! then closes; the client prints throughput at the end.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{os_seed, Event, WebSocketClient, WsConfig};

const LOCAL_MESSAGES: u64 = 200_000;

/// What `--help` prints.
const USAGE: &str = "usage: blocking_client [ws://HOST:PORT/PATH (a local peer)]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = match std::env::args().nth(1) {
        Some(flag) if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            return Ok(());
        }
        Some(url) => url,
        None => format!(
            "ws://{}/stream?streams=btcusdt@aggTrade",
            start_local_peer(LOCAL_MESSAGES)?
        ),
    };
    let mut ws = WebSocketClient::new(&url, WsConfig::default(), os_seed())?;
    let mut sock = TcpStream::connect((ws.endpoint().host.as_str(), ws.endpoint().port))?;
    sock.set_nodelay(true)?;

    let (mut messages, mut bytes) = (0u64, 0u64);
    let started = Instant::now();
    // The whole embedding: flush what the core queued, take its events, read into its buffer.
    while !ws.is_finished() {
        while let Some(chunk) = ws.poll_transmit() {
            sock.write_all(&chunk)?;
        }
        while let Some(event) = ws.poll_event() {
            match event {
                Event::Message(m) => {
                    messages += 1;
                    bytes += m.payload.len() as u64;
                }
                Event::Opened(_) => println!("connected to {url}"),
                Event::Closed { by, frame } => println!("closed by {by:?}: code {}", frame.code),
                Event::Failed(e) => println!("failed: {e} (close code {})", e.close_code()),
                _ => {}
            }
        }
        if ws.is_finished() {
            break;
        }
        match sock.read(ws.read_buf())? {
            0 => ws.handle_eof(),
            n => ws.handle_read(n),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{messages} messages, {:.1} MB in {secs:.3} s: {:.0} msgs/s, {:.1} MB/s",
        bytes as f64 / 1e6,
        messages as f64 / secs,
        bytes as f64 / 1e6 / secs
    );
    if ws.error().is_some() {
        return Err("stream failed".into());
    }
    Ok(())
}

/// A minimal local WebSocket peer: answers the handshake, streams `count` text messages in
/// large pre-encoded writes, closes with 1000 and waits for the echo.
fn start_local_peer(count: u64) -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || -> std::io::Result<()> {
        let (mut sock, _) = listener.accept()?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            sock.read_exact(&mut byte)?;
            head.push(byte[0]);
        }
        sock.write_all(&accept_response(&head))?;
        let mut batch = Vec::with_capacity(256 * 1024);
        for i in 0..count {
            let msg = format!(
                "{{\"stream\":\"btcusdt@aggTrade\",\"data\":{{\"e\":\"aggTrade\",\"E\":{},\"s\":\"BTCUSDT\",\
                 \"a\":{i},\"p\":\"67321.{:02}\",\"q\":\"0.01200\",\"f\":{i},\"l\":{i},\"T\":{},\"m\":true,\"M\":true}}}}",
                1_700_000_000_000u64 + i,
                i % 100,
                1_700_000_000_000u64 + i
            );
            batch.extend(server_frame(true, 1, msg.as_bytes()));
            if batch.len() > 200 * 1024 {
                sock.write_all(&batch)?;
                batch.clear();
            }
        }
        batch.extend(server_frame(true, 8, &1000u16.to_be_bytes()));
        sock.write_all(&batch)?;
        let mut rest = Vec::new();
        sock.read_to_end(&mut rest)?; // the client's Close echo, then EOF
        Ok(())
    });
    Ok(addr)
}
