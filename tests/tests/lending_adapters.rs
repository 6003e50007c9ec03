//! The shared loopback scenarios against both adapters with data lent in place (mio's
//! `Delivery::Lend`, tokio's `connect_lending`): the same events, in the same order, as
//! their queued deliveries — every scenario a delivery that cannot push back can run.

mod mio {
    feedwire_tests::adapter_scenarios!(@handler feedwire_tests::adapter::MioLendAdapter);
}

mod tokio {
    feedwire_tests::adapter_scenarios!(@handler feedwire_tests::adapter::TokioLendAdapter);
}

/// A stop from the handler on a busy stream: the Close follows the read that lent the
/// stopping message, and nothing read after the stop is lent. The adapters used to read on
/// to their per-wake budget (tokio 4 MiB, mio 1 MiB) first — measured: 23,327 messages
/// lent after a stop at the 10th on tokio, 6,836 on mio.
mod stop_from_the_handler {
    use std::sync::{Arc, Mutex, OnceLock};

    use feedwire_core::StreamConfig;
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tests::stops_itself::{
        assert_stopped_within_a_read, Lent, StopFn, StopsItself, MAX_READ,
    };

    /// Well into the stream: reads have grown to `MAX_READ`.
    const STOP_AT: usize = 20_000;
    /// The smallest `small_aggtrade` message is larger, bytes.
    const MIN_MESSAGE: usize = 150;

    fn firehose() -> (ReplayServer, StreamConfig) {
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(200_000),
            hold_open: true,
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        let mut config = StreamConfig::binance_stream(&srv.url());
        config.ws.max_read_size = MAX_READ;
        (srv, config)
    }

    fn handler() -> (StopsItself, Arc<OnceLock<StopFn>>, Arc<Mutex<Lent>>) {
        let stop = Arc::new(OnceLock::new());
        let lent = Arc::new(Mutex::new(Lent::default()));
        let handler = StopsItself {
            stop_at: STOP_AT,
            stop: stop.clone(),
            lent: lent.clone(),
        };
        (handler, stop, lent)
    }

    #[test]
    fn tokio() {
        let (_srv, config) = firehose();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (handler, stop, lent) = handler();
        let handle = rt.block_on(async {
            feedwire_tokio::connect_lending(config, Default::default(), handler).unwrap()
        });
        let _ = stop.set(Box::new(move || handle.stop()));
        assert_stopped_within_a_read(&lent, STOP_AT, MIN_MESSAGE);
    }

    #[test]
    fn mio() {
        let (_srv, config) = firehose();
        let feed = feedwire_mio::LoopHandle::spawn(Default::default()).unwrap();
        let (handler, stop, lent) = handler();
        let (id, _) = feed
            .connect(config, feedwire_mio::Delivery::Lend(Box::new(handler)))
            .unwrap();
        let on_loop = feed.clone();
        let _ = stop.set(Box::new(move || on_loop.stop(id)));
        assert_stopped_within_a_read(&lent, STOP_AT, MIN_MESSAGE);
        feed.shutdown();
    }
}
