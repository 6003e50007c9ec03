//! Client for the Autobahn|Testsuite fuzzingserver.
//!
//! ```text
//! cargo run --release -p feedwire-core --example autobahn_client -- --url ws://127.0.0.1:9001 --agent feedwire [--read-size BYTES]
//! ```
//! Protocol: `GET /getCaseCount` (one text message: the count), then for each case
//! `/runCase?case=N&agent=NAME`, echoing every text and binary message unchanged until the
//! server closes, then `/updateReports?agent=NAME`. A failed case is reported and the run
//! goes on.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

mod autobahn;

/// What `--help` prints.
const USAGE: &str = "usage: autobahn_client [--url URL (ws://127.0.0.1:9001)] \
[--agent NAME (feedwire)] [--read-size BYTES]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = "ws://127.0.0.1:9001".to_owned();
    let mut agent = "feedwire".to_owned();
    let mut read_size = feedwire_core::WsConfig::default().max_read_size;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--url" => url = args.next().ok_or("--url needs a value")?,
            "--agent" => agent = args.next().ok_or("--agent needs a value")?,
            "--read-size" => {
                read_size = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--read-size needs a byte count above 0")?
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
        }
    }
    autobahn::run_suite(&url, &agent, read_size, |line| println!("{line}"))
}
