//! Checks that the replay server is not the bottleneck: a raw reader (256 KiB reads, no
//! parsing) against the firehose, next to the core's blocking client on the same server.
//!
//! `cargo run --release -p feedwire-replay --example raw_reader -- [scenario]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use feedwire_core::{os_seed, Event, WebSocketClient, WsConfig};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};

/// What `--help` prints.
const USAGE: &str = "usage: raw_reader [SCENARIO (small_aggtrade)]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scenario = match std::env::args().nth(1).as_deref() {
        None => Scenario::SmallAggTrade,
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return Ok(());
        }
        Some(n) => Scenario::from_name(n).ok_or(format!("unknown scenario {n} ({USAGE})"))?,
    };
    let server = ReplayServer::start(ReplayConfig::new(scenario))?;
    let count = server.messages_per_connection();

    // Raw: handshake by hand, then count bytes until the server closes.
    let mut ws = WebSocketClient::new(&server.url(), WsConfig::default(), os_seed())?;
    let mut sock = TcpStream::connect(server.addr())?;
    while let Some(c) = ws.poll_transmit() {
        sock.write_all(&c)?;
    }
    let mut buf = vec![0u8; 256 * 1024];
    let started = Instant::now();
    let mut bytes = 0u64;
    loop {
        let n = sock.read(&mut buf)?;
        if n == 0 || buf[..n].ends_with(&[0x88, 0x02, 0x03, 0xE8]) {
            bytes += n as u64;
            break;
        }
        bytes += n as u64;
    }
    let raw = started.elapsed().as_secs_f64();
    println!(
        "{}: raw reader {count} msgs, {:.1} MB in {raw:.3} s: {:.0} msgs/s, {:.0} MB/s",
        scenario.name(),
        bytes as f64 / 1e6,
        count as f64 / raw,
        bytes as f64 / 1e6 / raw
    );

    // The core on a blocking socket, same server.
    let mut ws = WebSocketClient::new(&server.url(), WsConfig::default(), os_seed())?;
    let mut sock = TcpStream::connect(server.addr())?;
    let started = Instant::now();
    let mut msgs = 0;
    while !ws.is_finished() {
        while let Some(c) = ws.poll_transmit() {
            sock.write_all(&c)?;
        }
        while let Some(e) = ws.poll_event() {
            if let Event::Message(_) = e {
                msgs += 1;
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
    let core = started.elapsed().as_secs_f64();
    println!(
        "{}: feedwire-core {msgs} msgs in {core:.3} s: {:.0} msgs/s",
        scenario.name(),
        msgs as f64 / core
    );
    Ok(())
}
