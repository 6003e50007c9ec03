//! The shared loopback scenarios, run against the tokio adapter.

use feedwire_tests::adapter::TokioAdapter;

feedwire_tests::adapter_scenarios!(TokioAdapter);

/// tokio: an answer that arrived while the stream's task could not run (its thread busy
/// for longer than the request timeout) is read before the deadline it beat is fired — as
/// on the mio loop (`mio_embedded`): the subscription is confirmed, not timed out.
#[test]
fn an_answer_that_came_while_the_task_was_held_up_beats_its_deadline() {
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tokio::TokioOptions;

    let srv = ReplayServer::start(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    // One thread: while the test's task sleeps on it, the stream's task cannot run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config = StreamConfig::binance_stream(&srv.url());
        config.router.request_timeout = Duration::from_millis(100);
        let (handle, mut events) =
            feedwire_tokio::connect(config, TokioOptions::default()).unwrap();
        let in_time = Duration::from_secs(20);
        while !matches!(
            tokio::time::timeout(in_time, events.next()).await.unwrap(),
            Some(StreamEvent::Opened { .. })
        ) {}
        handle.subscribe(&["ethusdt@trade"]).await.unwrap();
        // Let the task send it, then hold the thread past the deadline.
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_millis(300));
        let next = tokio::time::timeout(in_time, events.next()).await.unwrap();
        let confirmed = |streams: &Vec<String>| streams == &["ethusdt@trade"];
        assert!(
            matches!(&next, Some(StreamEvent::Subscribed { streams, .. }) if confirmed(streams)),
            "{next:?}"
        );
        handle.stop();
    });
}

/// tokio: `Events` is a `futures_core::Stream`, so many streams merge into one consumer
/// (`select_all` here; `tokio_stream::StreamMap` keyed the same way) — the tokio side of
/// the mio loop's `shared_event_channel`. Each stream's messages complete and in order, and
/// the merged stream ends after the last stream's end.
#[test]
fn many_streams_merge_into_one_consumer() {
    use std::collections::HashMap;
    use std::time::Duration;

    use bytes::Bytes;
    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tokio::TokioOptions;
    use futures_util::stream::{select_all, StreamExt};

    const PER_STREAM: usize = 3_000;
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(PER_STREAM),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Batches of two events: every stream waits for the merged consumer again and again.
        let options = TokioOptions {
            event_capacity: 2,
            ..TokioOptions::default()
        };
        let (mut handles, mut merged) = (Vec::new(), Vec::new());
        for n in 0..5 {
            let config = StreamConfig::binance_stream(&srv.url());
            let (handle, events) = feedwire_tokio::connect(config, options.clone()).unwrap();
            handles.push(handle);
            merged.push(events.map(move |e| (n, e)));
        }
        let mut merged = select_all(merged);
        let mut data: HashMap<usize, Vec<Bytes>> = HashMap::new();
        let mut ended = 0;
        let in_time = Duration::from_secs(20);
        while let Some((n, event)) = tokio::time::timeout(in_time, merged.next()).await.unwrap() {
            match event {
                StreamEvent::Data { payload, .. } => {
                    let got = data.entry(n).or_default();
                    got.push(payload);
                    if got.len() == PER_STREAM {
                        handles[n].stop();
                    }
                }
                StreamEvent::Closed { .. } => ended += 1,
                StreamEvent::Crashed(reason) => panic!("stream {n} crashed: {reason}"),
                _ => {}
            }
        }
        assert_eq!(ended, 5, "the merged stream ends after every stream's end");
        let first = &data[&0];
        assert_eq!(first.len(), PER_STREAM);
        for n in 1..5 {
            assert!(
                data[&n] == *first,
                "stream {n}: the feed, complete and in order"
            );
        }
    });
}
