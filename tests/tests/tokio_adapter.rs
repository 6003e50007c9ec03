//! The shared loopback scenarios, run against the tokio adapter.

use feedwire_tests::adapter::TokioAdapter;

feedwire_tests::adapter_scenarios!(TokioAdapter);
