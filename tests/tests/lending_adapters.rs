//! The shared loopback scenarios against both adapters with data lent in place (mio's
//! `Delivery::Lend`, tokio's `connect_lending`): the same events, in the same order, as
//! their queued deliveries. Left out: the two scenarios about a full or dropped receiver (a
//! handler cannot push back).

macro_rules! lending_scenarios {
    ($adapter:expr) => {
        feedwire_tests::adapter_scenarios!(@each $adapter;
            websocket_firehose,
            betfair_lines_over_tls,
            stop_on_an_idle_stream,
            crash_on_a_busy_stream,
            stop_with_a_half_received_message,
            untrusted_certificate_is_a_typed_error,
            faults_reconnect_without_loss_or_duplicates,
            refused_upgrades_back_off_and_retry,
            silence_after_subscribe_hits_the_first_data_timeout,
            unanswered_handshake_hits_the_connect_timeout,
            ws_api_request_resolves,
            unanswered_request_times_out,
            reconnect_resubscribes_and_data_flows_again,
            interop_echo_0_bytes_to_1_mib,
            host_names_are_resolved,
        );
    };
}

mod mio {
    lending_scenarios!(feedwire_tests::adapter::MioLendAdapter);
}

mod tokio {
    lending_scenarios!(feedwire_tests::adapter::TokioLendAdapter);
}
