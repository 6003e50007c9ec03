//! The shared loopback scenarios, run against the mio adapter.

use feedwire_tests::adapter::MioAdapter;
use feedwire_tests::scenarios;

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                scenarios::$name(&MioAdapter);
            }
        )*
    };
}

scenarios!(
    websocket_firehose,
    betfair_lines_over_tls,
    stop_on_an_idle_stream,
    crash_on_a_busy_stream,
    stop_with_a_half_received_message,
    dropping_the_events_stops_the_stream,
    slow_consumer_keeps_memory_bounded,
    untrusted_certificate_is_a_typed_error,
    faults_reconnect_without_loss_or_duplicates,
    refused_upgrades_back_off_and_retry,
    silence_after_subscribe_hits_the_first_data_timeout,
    unanswered_handshake_hits_the_connect_timeout,
    ws_api_request_resolves,
    unanswered_request_times_out,
    reconnect_resubscribes_and_data_flows_again,
    interop_echo_0_bytes_to_1_mib,
);

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
