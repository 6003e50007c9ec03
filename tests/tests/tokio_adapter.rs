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
