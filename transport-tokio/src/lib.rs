//! # feedwire-tokio
//!
//! The tokio adapter: one task per stream moves bytes between a socket (TCP, rustls TLS via
//! the core's shared [`TlsSession`](feedwire_core::TlsSession)) and the sans-IO
//! [`Stream`], sleeps until the core's next deadline, and wakes at once on a command — so
//! `stop()` puts the Close frame on the wire without waiting for traffic.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use feedwire_core::{StreamConfig, StreamEvent};
//! use feedwire_tokio::{connect, TokioOptions};
//!
//! let config = StreamConfig::binance_stream("wss://stream.binance.com:9443/ws");
//! let (handle, mut events) = connect(config, TokioOptions::default())?;
//! handle.subscribe(&["btcusdt@aggTrade"]).await?;
//! while let Some(event) = events.next().await {
//!     if let StreamEvent::Data { payload, .. } = event {
//!         println!("{}", String::from_utf8_lossy(&payload));
//!     }
//! }
//! # Ok(()) }
//! ```

mod driver;
mod handle;
mod io;
mod registered;
mod socket;

pub use handle::{CommandError, Events, Response, StreamHandle, TokioOptions};

pub use feedwire_core::DataHandler;
use feedwire_core::{os_seed, ConfigError, Stream, StreamConfig};

/// Starts a stream on the current tokio runtime: returns the command handle and the event
/// receiver. Dropping every handle stops the stream gracefully; dropping the receiver too.
///
/// # Panics
/// Outside a tokio runtime.
pub fn connect(
    config: StreamConfig,
    options: TokioOptions,
) -> Result<(StreamHandle, Events), ConfigError> {
    let stream = new_stream(config, &options)?;
    let (handle, events, driver) = driver::Driver::new(stream, options);
    tokio::spawn(driver.run());
    Ok((handle, events))
}

/// Starts a stream whose data messages are lent to `handler` in place, on the stream's own
/// task: no copy, no event, no channel, and no vtable (the stream's future is compiled for
/// the handler's type, so `on_data` can be inlined) — the cheapest way to read a stream.
/// Every other event goes to [`DataHandler::on_event`], in order. The handler must not block
/// (it holds up the stream); to keep a message, copy it. Dropping every handle stops the
/// stream gracefully.
///
/// # Panics
/// Outside a tokio runtime.
pub fn connect_lending(
    config: StreamConfig,
    options: TokioOptions,
    handler: impl DataHandler + Send + 'static,
) -> Result<StreamHandle, ConfigError> {
    let (handle, drive) = drive_lending(config, options, handler)?;
    tokio::spawn(drive);
    Ok(handle)
}

/// [`connect_lending`] without a task of its own: returns the handle and the future that
/// drives the stream until it ends, for the caller to await — in `block_on`, in its own task
/// beside other work (`select!`, `join!`), or spawned. Each wake-up then polls the stream in
/// the caller's task instead of scheduling another. The future needs a tokio runtime with
/// I/O and time enabled (it spawns the connect, and the last writes of a closing connection).
/// Dropping it before it ends drops the connection at once, without a Close (as
/// [`StreamHandle::crash`] does): in a `select!`, let `stop()` end it instead.
pub fn drive_lending(
    config: StreamConfig,
    options: TokioOptions,
    handler: impl DataHandler + Send + 'static,
) -> Result<(StreamHandle, impl std::future::Future<Output = ()> + Send), ConfigError> {
    let stream = new_stream(config, &options)?;
    let (handle, driver) = driver::Driver::lending(stream, options, handler);
    Ok((handle, driver.run()))
}

fn new_stream(config: StreamConfig, options: &TokioOptions) -> Result<Stream, ConfigError> {
    Stream::new(
        config,
        options.seed.unwrap_or_else(os_seed),
        std::time::Instant::now(),
    )
}
