//! The shared loopback scenarios against both adapters with data lent in place (mio's
//! `Delivery::Lend`, tokio's `connect_lending`): the same events, in the same order, as
//! their queued deliveries — every scenario a delivery that cannot push back can run.

mod mio {
    feedwire_tests::adapter_scenarios!(@handler feedwire_tests::adapter::MioLendAdapter);
}

mod tokio {
    feedwire_tests::adapter_scenarios!(@handler feedwire_tests::adapter::TokioLendAdapter);
}
