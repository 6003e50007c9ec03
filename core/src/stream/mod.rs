//! The stream state machine: one market-data stream over either framing, through connect,
//! handshake, subscriptions, stalls, reconnects, stop and crash. Sans-IO.

mod awaited;
mod backoff;
mod clocks;
mod config;
mod connect_budget;
mod connection;
mod event;
mod machine;
mod profile;
mod stats;
mod timers;

pub use awaited::{Answer, AwaitedAnswers};
pub use config::{
    BetfairAuth, PermanentFailure, PlannedReconnect, Profile, ReconnectPolicy, StreamConfig,
    Timeouts,
};
pub use connect_budget::ConnectBudget;
pub use event::{
    DataHandler, DataRef, EndReason, RequestKind, StreamEvent, StreamState, TransportCommand,
};
pub use machine::{Stream, LOW_WATER_MIN};
pub use profile::BetfairSubscription;
pub use stats::{StatsHandle, StatsSnapshot};
