//! The shared loopback scenarios, run against the mio adapter.

use feedwire_tests::adapter::MioAdapter;

feedwire_tests::adapter_scenarios!(MioAdapter);

/// mio only: a stream quiet for a second gives its read buffer back (idle memory).
#[test]
fn quiet_streams_give_their_read_buffer_back() {
    use std::time::Duration;

    use feedwire_core::{StreamConfig, StreamEvent};
    use feedwire_replay::{ReplayConfig, ReplayServer, Scenario};
    use feedwire_tests::adapter::Adapter;

    let srv = ReplayServer::start(ReplayConfig {
        count: Some(100),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap();
    let mut s = MioAdapter.start(StreamConfig::binance_stream(&srv.url()), None, 1024);
    let mut data = 0;
    while data < 100 {
        if let Some(StreamEvent::Data { .. }) = s.next_event(Duration::from_secs(20)).unwrap() {
            data += 1;
        }
    }
    assert!(
        s.stats().read_buffer_bytes > 0,
        "a busy stream holds its buffer"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        s.stats().read_buffer_bytes,
        0,
        "released after a quiet second"
    );
    s.stop();
}
