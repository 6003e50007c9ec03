//! # feedwire-replay
//!
//! A local market-data server for tests, demos and benchmarks: WebSocket (Binance-style) and
//! CRLF lines (Betfair-style), plain or TLS with a CA generated at start-up, on 127.0.0.1.
//! Deterministic payloads in the shapes of real streams, firehose, paced or live (one feed
//! shared by every connection) delivery, real
//! subscription answers, and faults on demand.

mod child;
pub mod example_args;
pub mod measure;
mod pki;
mod scenario;
mod server;
mod wire;

pub use child::{root_store_of, serve_if_child, ChildServer, CHILD_ARG};
pub use pki::TestPki;
pub use scenario::{Scenario, BETFAIR_IMAGE_CLK};
pub use server::{feed_seq, sent_at_us, Fault, Mode, ReplayConfig, ReplayServer, STAMP_WITHIN};
