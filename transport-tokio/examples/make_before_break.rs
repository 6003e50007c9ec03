//! Make-before-break with the tokio adapter: a stream whose connection is to be replaced
//! (`PlannedReconnect::Advise`: a `serverShutdown` notice, or the connection's age) reports
//! `ReconnectDue` and keeps delivering; the application starts a second stream with the
//! first one's subscriptions, takes both, and switches once the second has reached what the
//! first delivered — the messages held from the second until then, those the first already
//! delivered dropped by their ids. Nothing is missed, nothing repeated.
//!
//! ```text
//! cargo run --release -p feedwire-tokio --example make_before_break -- [handovers]
//! ```
//! Runs against the local replay server's live feed (one numbered feed for every
//! connection, as an exchange's, a `serverShutdown` notice every 5,000 messages of a
//! connection); the replay's `"seq"` stands in for a real feed's own ids (an aggTrade's
//! `a`, a depth update's `u`). Fails if any message of the feed is missed or repeated.
#![allow(clippy::print_stdout, reason = "an example reports to the terminal")]

use std::time::Duration;

use bytes::Bytes;
use feedwire_core::{PlannedReconnect, StreamConfig, StreamEvent};
use feedwire_replay::example_args::first_arg;
use feedwire_replay::{feed_seq, Fault, Mode, ReplayConfig, ReplayServer, Scenario};
use feedwire_tokio::{connect, Events, StreamHandle, TokioOptions};

/// Messages of the new stream held while the old one catches up; past this the old one is
/// taken to be stuck and the switch made anyway.
const MOST_HELD: usize = 100_000;

/// The application's side: each message of the feed once, in order.
#[derive(Default)]
struct Feed {
    /// The id of the last message handled.
    last: Option<u64>,
    handled: u64,
    /// Messages of the feed that never came (ids skipped).
    missed: u64,
}

impl Feed {
    /// Handles the message `id` unless it was handled already.
    fn offer(&mut self, id: u64, _payload: &Bytes) {
        if self.last.is_some_and(|last| id <= last) {
            return;
        }
        self.missed += self.last.map_or(0, |last| id - last - 1);
        self.last = Some(id);
        // The application's own handling of the payload goes here.
        self.handled += 1;
    }
}

struct Taking {
    handle: StreamHandle,
    events: Events,
}

/// The stream taking over, and its messages held until the old one has caught up.
struct Successor {
    stream: Taking,
    held: Vec<(u64, Bytes)>,
    /// Messages it delivered that the old stream had delivered already.
    overlap: u64,
    /// It reported `ReconnectDue` itself before taking over: hand over again at once.
    due: bool,
}

/// A second stream with `current`'s subscriptions.
async fn successor(
    config: &StreamConfig,
    current: &Taking,
) -> Result<Successor, Box<dyn std::error::Error>> {
    let streams = current.handle.subscriptions().await?;
    println!("a second stream for {streams:?}");
    Ok(Successor {
        stream: start(config, &streams).await?,
        held: Vec::new(),
        overlap: 0,
        due: false,
    })
}

async fn start(
    config: &StreamConfig,
    streams: &[String],
) -> Result<Taking, Box<dyn std::error::Error>> {
    let (handle, events) = connect(config.clone(), TokioOptions::default())?;
    let names: Vec<&str> = streams.iter().map(String::as_str).collect();
    handle.subscribe(&names).await?;
    Ok(Taking { handle, events })
}

/// What `--help` prints.
const USAGE: &str = "usage: make_before_break [HANDOVERS (3)]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(handovers) = first_arg::<u32>("HANDOVERS", 3, USAGE)? else {
        return Ok(());
    };
    let srv = ReplayServer::start(ReplayConfig {
        mode: Mode::Live { per_sec: 10_000 },
        fault: Some(Fault::ServerShutdown { after: 5_000 }),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })?;
    let mut config = StreamConfig::binance_stream(&srv.subscribe_url());
    config.reconnect.planned = PlannedReconnect::Advise {
        grace: Duration::from_secs(60),
    };
    let mut current = start(&config, &["btcusdt@aggTrade".to_owned()]).await?;
    let mut next: Option<Successor> = None;
    let (mut feed, mut done) = (Feed::default(), 0);
    while done < handovers {
        tokio::select! {
            event = current.events.next() => match event {
                Some(StreamEvent::Data { payload, .. }) => {
                    if let Some(id) = feed_seq(&payload) {
                        feed.offer(id, &payload);
                    }
                }
                Some(StreamEvent::ReconnectDue { reason, .. }) if next.is_none() => {
                    println!("{reason}");
                    next = Some(successor(&config, &current).await?);
                }
                Some(e @ (StreamEvent::Reconnecting { .. } | StreamEvent::Closed { .. }
                    | StreamEvent::Crashed(_))) => return Err(format!("{e:?}").into()),
                None => return Err("the stream ended".into()),
                Some(_) => {}
            },
            event = async {
                match next.as_mut() {
                    Some(n) => n.stream.events.next().await,
                    None => std::future::pending().await,
                }
            }, if next.is_some() => {
                let Some(n) = next.as_mut() else { continue };
                match event {
                    Some(StreamEvent::Data { payload, .. }) => {
                        let Some(id) = feed_seq(&payload) else { continue };
                        if feed.last.is_some_and(|last| id <= last) {
                            n.overlap += 1;
                        } else {
                            n.held.push((id, payload));
                        }
                    }
                    Some(e @ (StreamEvent::Reconnecting { .. } | StreamEvent::Closed { .. }
                        | StreamEvent::Crashed(_))) => return Err(format!("{e:?}").into()),
                    None => return Err("the new stream ended".into()),
                    Some(StreamEvent::ReconnectDue { .. }) => n.due = true,
                    Some(_) => {}
                }
            },
        }
        // Switch once the old stream has delivered what comes before the first message the
        // new one holds — or the new one delivered what the old one had.
        let caught_up = next.as_ref().is_some_and(|n| match n.held.first() {
            Some(&(first, _)) => {
                feed.last.is_some_and(|last| last + 1 >= first) || n.held.len() > MOST_HELD
            }
            None => n.overlap > 0,
        });
        if caught_up {
            let Some(n) = next.take() else { continue };
            current.handle.stop();
            let held = n.held.len();
            for (id, payload) in &n.held {
                feed.offer(*id, payload);
            }
            current = n.stream;
            done += 1;
            if n.due {
                next = Some(successor(&config, &current).await?);
            }
            println!(
                "handover {done}: {} messages from both, {held} held from the new one; \
                 {} handled, {} missed",
                n.overlap, feed.handled, feed.missed
            );
        }
    }
    current.handle.stop();
    if feed.missed > 0 {
        return Err(format!("{} messages of the feed missed", feed.missed).into());
    }
    println!(
        "{} messages of the feed, each once, in order, across {done} handovers",
        feed.handled
    );
    Ok(())
}
