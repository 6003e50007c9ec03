//! mio only: many streams, on two loops, delivering into one `shared_event_channel` — each
//! event tagged with its stream, each stream's events complete and in order through a
//! channel far smaller than what they send (back-pressure across loops); the receiver ends
//! once every sender is gone; dropping it stops every stream, and one added afterwards. The
//! tags can be told apart because stream ids are unique across loops: a loop given another
//! loop's id finds no stream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use feedwire_core::{StreamConfig, StreamEvent};
use feedwire_mio::{shared_event_channel, Delivery, LoopHandle, MioOptions, StreamId};
use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};

const TIMEOUT: Duration = Duration::from_secs(20);
/// `StatsSnapshot::state` of a closed stream.
const CLOSED: u8 = 5;

fn server(count: usize) -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(count),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .expect("replay server")
}

#[test]
fn many_streams_share_one_receiver_each_complete_and_in_order() {
    const PER_STREAM: usize = 3_000;
    let srv = server(PER_STREAM);
    let loops = [
        LoopHandle::spawn(MioOptions::default()).unwrap(),
        LoopHandle::spawn(MioOptions::default()).unwrap(),
    ];
    // 16 events at most waiting, for six streams sending 3,000 each: every stream is held
    // back again and again, on both loops.
    let (tx, rx) = shared_event_channel(16);
    let mut ids = Vec::new();
    for n in 0..6 {
        let feed = &loops[n % 2];
        let delivery = Delivery::Shared(tx.clone());
        let (id, _) = feed
            .connect(StreamConfig::binance_stream(&srv.url()), delivery)
            .unwrap();
        ids.push((id, n % 2));
    }
    drop(tx);
    let mut data: HashMap<StreamId, Vec<Bytes>> = HashMap::new();
    let mut ended = 0;
    let mut rx = rx;
    while ended < ids.len() {
        let (id, event) = rx.recv_timeout(TIMEOUT).unwrap_or_else(|e| {
            let counts: Vec<_> = ids
                .iter()
                .map(|(i, l)| (l, data.get(i).map_or(0, Vec::len)))
                .collect();
            panic!("{e:?} with {ended} streams ended: {counts:?}")
        });
        assert!(ids.iter().any(|(i, _)| *i == id), "an id we were given");
        match event {
            StreamEvent::Data { payload, .. } => {
                let got = data.entry(id).or_default();
                got.push(payload);
                if got.len() == PER_STREAM {
                    let feed = &loops[ids.iter().find(|(i, _)| *i == id).unwrap().1];
                    feed.stop(id);
                }
            }
            StreamEvent::Closed { .. } => ended += 1,
            StreamEvent::Crashed(reason) => panic!("{id:?} crashed: {reason}"),
            _ => {}
        }
    }
    // Every sender is gone with its stream: the receiver ends.
    assert!(
        rx.recv_timeout(TIMEOUT).is_err(),
        "ended after the last stream"
    );
    assert_eq!(data.len(), ids.len(), "every stream delivered");
    let first = &data[&ids[0].0];
    assert_eq!(first.len(), PER_STREAM);
    for (id, _) in &ids[1..] {
        // The replay sends every connection the same messages in the same order.
        assert!(
            data[id] == *first,
            "{id:?}: the feed, complete and in order"
        );
    }
}

#[test]
fn dropping_the_shared_receiver_stops_every_stream_and_any_added_later() {
    let srv = server(10);
    let feed = LoopHandle::spawn(MioOptions::default()).unwrap();
    let (tx, mut rx) = shared_event_channel(64);
    let mut stats = Vec::new();
    for _ in 0..3 {
        let delivery = Delivery::Shared(tx.clone());
        let (_, s) = feed
            .connect(StreamConfig::binance_stream(&srv.url()), delivery)
            .unwrap();
        stats.push(s);
    }
    // Each stream delivers its ten messages, then is quiet (the server holds it open).
    let mut data = 0;
    while data < 30 {
        if let (_, StreamEvent::Data { .. }) = rx.recv_timeout(TIMEOUT).unwrap() {
            data += 1;
        }
    }
    drop(rx);
    let late = feed
        .connect(
            StreamConfig::binance_stream(&srv.url()),
            Delivery::Shared(tx.clone()),
        )
        .unwrap()
        .1;
    stats.push(late);
    let deadline = Instant::now() + TIMEOUT;
    for (n, s) in stats.iter().enumerate() {
        while s.snapshot(Instant::now()).state != CLOSED {
            assert!(Instant::now() < deadline, "stream {n} still running");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Ids are unique across loops: the first stream of each loop has the same slot and
/// generation, and a loop given the other's id used to act on its own stream. Now it finds
/// no stream, and its own goes on.
#[test]
fn a_loop_given_another_loops_id_finds_no_stream() {
    use feedwire_mio::LoopError;

    let srv = server(10);
    let (one, other) = (
        LoopHandle::spawn(MioOptions::default()).unwrap(),
        LoopHandle::spawn(MioOptions::default()).unwrap(),
    );
    let (tx, mut rx) = shared_event_channel(64);
    let config = StreamConfig::binance_stream(&srv.url());
    let (id_one, stats_one) = one
        .connect(config.clone(), Delivery::Shared(tx.clone()))
        .unwrap();
    let (id_other, stats_other) = other.connect(config, Delivery::Shared(tx)).unwrap();
    assert_ne!(id_one, id_other);
    let mut data = 0;
    while data < 20 {
        if let (_, StreamEvent::Data { .. }) = rx.recv_timeout(TIMEOUT).unwrap() {
            data += 1;
        }
    }
    assert_eq!(
        other.subscriptions(id_one).unwrap_err(),
        LoopError::NoStream
    );
    other.stop(id_one);
    other.crash(id_one, "not yours");
    // A call answered by the loop: the stop and crash before it were taken.
    assert_eq!(other.subscriptions(id_other).unwrap(), ["btcusdt@aggTrade"]);
    const OPEN: u8 = 2;
    let now = Instant::now();
    assert_eq!(stats_one.snapshot(now).state, OPEN);
    assert_eq!(
        stats_other.snapshot(now).state,
        OPEN,
        "its own stream untouched"
    );
    one.stop(id_one);
    other.stop(id_other);
}
