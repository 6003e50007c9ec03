//! What a planned reconnect misses on a live feed (the replay's `Mode::Live`: one numbered
//! feed for every connection at a fixed rate, as an exchange's), for each adapter, plain and
//! TLS, after a Binance `serverShutdown` notice:
//!
//! - `CloseThenConnect` (the default): the stream closes the connection and connects anew;
//!   missed is the feed's messages between the last before and the first after;
//! - `Advise` with the application's make-before-break: at `ReconnectDue` a second stream,
//!   the first stopped once the second has reached what the first delivered; missed is the
//!   gaps left when both are merged by the feed's numbers, and the overlap is the messages
//!   both delivered (what the application drops).
//!
//! Prints the median and the worst of each over the rounds. A benchmark, not a test.
//!
//! `cargo run --release -p feedwire-tests --example planned_reconnect_gap -- [rounds] [rate]`
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::{Duration, Instant};

use feedwire_core::{PlannedReconnect, StreamConfig, StreamEvent};
use feedwire_replay::{feed_seq, Fault, Mode, ReplayConfig, ReplayServer, Scenario};
use feedwire_tests::adapter::{Adapter, MioAdapter, Session, TokioAdapter};

const WAIT: Duration = Duration::from_secs(20);
/// Messages on a connection before its server's shutdown notice.
const NOTICE_AFTER: usize = 500;

/// Most events taken from one stream before looking at the other.
const TURN: usize = 64;

type Failure = Box<dyn std::error::Error>;

/// The next event; `Err` when the stream ended or a connection went unplanned.
fn next(s: &mut dyn Session) -> Result<StreamEvent, Failure> {
    match s.next_event(WAIT) {
        Ok(Some(
            e @ (StreamEvent::Reconnecting { planned: false, .. }
            | StreamEvent::Closed { .. }
            | StreamEvent::Crashed(_)),
        )) => Err(format!("{e:?}").into()),
        Ok(Some(e)) => Ok(e),
        Ok(None) => Err("the stream ended".into()),
        Err(()) => Err("no event in time".into()),
    }
}

fn seq(e: &StreamEvent) -> Option<u64> {
    match e {
        StreamEvent::Data { payload, .. } => feed_seq(payload),
        _ => None,
    }
}

/// Stops `s` and takes its events to the end.
fn finish(mut s: Box<dyn Session>) {
    s.stop();
    while let Ok(Some(_)) = s.next_event(WAIT) {}
}

/// Messages missed by one planned reconnect with the default.
fn close_then_connect(
    adapter: &dyn Adapter,
    srv: &ReplayServer,
    config: StreamConfig,
) -> Result<u64, Failure> {
    let mut s = adapter.start(config, srv.pki().map(|p| p.root_store()), 4096);
    let (mut before, mut planned) = (None, false);
    let missed = loop {
        let e = next(s.as_mut())?;
        match (seq(&e), planned) {
            (Some(q), false) => before = Some(q),
            (Some(q), true) => break q - before.ok_or("no message before")? - 1,
            (None, _) => planned |= matches!(e, StreamEvent::Reconnecting { planned: true, .. }),
        }
    };
    finish(s);
    Ok(missed)
}

/// One make-before-break: the messages missed (gaps in the merged feed) and those both
/// streams delivered.
fn make_before_break(
    adapter: &dyn Adapter,
    srv: &ReplayServer,
    config: StreamConfig,
) -> Result<(u64, u64), Failure> {
    let roots = || srv.pki().map(|p| p.root_store());
    let mut old = adapter.start(config.clone(), roots(), 4096);
    let mut from_old = Vec::new();
    loop {
        let e = next(old.as_mut())?;
        if matches!(e, StreamEvent::ReconnectDue { .. }) {
            break;
        }
        from_old.extend(seq(&e));
    }
    let mut new = adapter.start(config, roots(), 4096);
    let mut from_new: Vec<u64> = Vec::new();
    let give_up = Instant::now() + WAIT;
    while from_new
        .first()
        .is_none_or(|first| from_old.last() < Some(first))
    {
        if Instant::now() > give_up {
            return Err("the streams never overlapped".into());
        }
        // Turn about, a batch at most each: a stream that always has events ready must not
        // keep the other waiting.
        for (s, seqs) in [(&mut old, &mut from_old), (&mut new, &mut from_new)] {
            for _ in 0..TURN {
                let Ok(e) = s.next_event(Duration::from_millis(1)) else {
                    break;
                };
                seqs.extend(e.as_ref().and_then(seq));
            }
        }
    }
    finish(old);
    finish(new);
    let delivered = (from_old.len() + from_new.len()) as u64;
    let mut merged: Vec<u64> = from_old.into_iter().chain(from_new).collect();
    merged.sort_unstable();
    merged.dedup();
    let span = merged[merged.len() - 1] - merged[0] + 1;
    Ok((span - merged.len() as u64, delivered - merged.len() as u64))
}

/// Median and largest.
fn summary(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() - 1])
}

/// What `--help` prints.
const USAGE: &str = "usage: planned_reconnect_gap [ROUNDS (30) [RATE msgs/s (20000)]]";

fn main() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let (rounds, rate): (usize, u32) = match (args.next(), args.next()) {
        (Some(flag), _) if flag == "--help" || flag == "-h" => {
            println!("{USAGE}");
            return Ok(());
        }
        (rounds, rate) => (
            rounds.map_or(Ok(30), |a| a.parse()).map_err(|_| USAGE)?,
            rate.map_or(Ok(20_000), |a| a.parse()).map_err(|_| USAGE)?,
        ),
    };
    println!(
        "{rounds} planned reconnects (serverShutdown) per row, live feed at {rate} msgs/s, \
         127.0.0.1"
    );
    println!(
        "{:<7} {:<5} {:>26} {:>22} {:>20}",
        "adapter", "tls", "close-then-connect missed", "make-before-break missed", "overlap"
    );
    let adapters: [(&str, &dyn Adapter); 2] = [("tokio", &TokioAdapter), ("mio", &MioAdapter)];
    for tls in [false, true] {
        let srv = ReplayServer::start(ReplayConfig {
            mode: Mode::Live { per_sec: rate },
            fault: Some(Fault::ServerShutdown {
                after: NOTICE_AFTER,
            }),
            hold_open: true,
            tls,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })?;
        let config = StreamConfig::binance_stream(&srv.url());
        let mut advising = config.clone();
        advising.reconnect.planned = PlannedReconnect::Advise {
            grace: Duration::from_secs(60),
        };
        for (name, adapter) in adapters {
            let (mut closed, mut made, mut overlap) = (Vec::new(), Vec::new(), Vec::new());
            // Alternating, so that drift on a shared machine falls on both alike.
            for _ in 0..rounds {
                closed.push(close_then_connect(adapter, &srv, config.clone())?);
                let (missed, both) = make_before_break(adapter, &srv, advising.clone())?;
                made.push(missed);
                overlap.push(both);
            }
            let ms = |n: u64| n as f64 * 1e3 / f64::from(rate);
            let (c50, cmax) = summary(closed);
            let (m50, mmax) = summary(made);
            let (o50, omax) = summary(overlap);
            println!(
                "{name:<7} {tls:<5} {:>26} {:>22} {:>20}",
                format!("{c50} ({:.2} ms), max {cmax}", ms(c50)),
                format!("{m50}, max {mmax}"),
                format!("{o50}, max {omax}"),
            );
        }
    }
    Ok(())
}
