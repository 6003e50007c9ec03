//! # feedwire-mio
//!
//! One thread, one `mio::Poll`, many streams: each connection has its own sans-IO
//! [`Stream`](feedwire_core::Stream); the loop moves bytes between sockets (TCP, and TLS via
//! the core's shared [`TlsSession`](feedwire_core::TlsSession)) and the cores, sleeps until
//! the earliest deadline (a heap across streams), and wakes at once on a command (a
//! `mio::Waker` and a channel). No tokio in the dependency tree.
//!
//! Two ways to run it: [`LoopHandle::spawn`] gives the loop a thread of its own, controlled
//! from any thread; [`MioLoop`] is turned by the application's own thread, which can register
//! its own sources in the same `Poll` ([`user_token`]).
//!
//! Delivery: per stream, a [`Handler`] called on the loop thread with every event; a
//! [`DataHandler`] called on the loop thread with data messages lent in place (no copy, no
//! event — the cheapest way to read; on a loop typed for its handler, [`MioLoop::lending_to`]
//! or [`LoopHandle::spawn_lending_to`], called directly rather than through a vtable) and
//! other events; or a bounded [`event_channel`] for consuming on another thread (when it is
//! full the loop stops reading that stream until the consumer takes what waits), or one
//! [`shared_event_channel`] for many streams, their events tagged with their ids.

mod channel;
mod deadlines;
mod doorbell;
mod embedded;
mod event_loop;
mod handle;
mod loop_thread;
mod resolver;
mod shared_channel;
mod slot;
mod stream_io;

pub use channel::{event_channel, EventSender, Events};
pub use embedded::{user_token, user_token_number, MioLoop};
pub use feedwire_core::DataHandler;
pub use handle::{AnyDataHandler, Delivery, Handler, LoopError, LoopHandle, MioOptions, StreamId};
pub use shared_channel::{shared_event_channel, SharedEventSender};
