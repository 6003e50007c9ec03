//! The application's side: a cloneable command handle and a bounded event receiver.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use feedwire_core::rustls::ClientConfig;
use feedwire_core::{
    BetfairAuth, BetfairSubscription, RequestId, Seed, StatsHandle, StatsSnapshot, StreamError,
    StreamEvent,
};
use tokio::sync::{mpsc, oneshot};

/// Adapter settings.
#[derive(Debug, Clone)]
pub struct TokioOptions {
    /// TLS configuration for `wss://` and `tls://` (default:
    /// [`default_tls_config`](feedwire_core::default_tls_config), Mozilla roots via
    /// webpki-roots, one configuration for the process, so that reconnects and other streams
    /// resume TLS sessions). Verification is always on; pass a config with your own roots for
    /// private CAs (shared by the streams you give it to, with the same benefit).
    pub tls: Option<Arc<ClientConfig>>,
    /// Events per batch handed to the application (default 4096). When a batch is full and
    /// the previous one has not been taken, the adapter stops reading the socket until there
    /// is room (and takes it out of the reactor meanwhile: what arrives wakes no thread): at
    /// most about three batches exist at once, nothing is dropped.
    pub event_capacity: usize,
    /// `SO_RCVBUF` in bytes, if set.
    pub recv_buffer: Option<u32>,
    /// `SO_SNDBUF` in bytes, if set.
    pub send_buffer: Option<u32>,
    /// CSPRNG seed (default: from the OS).
    pub seed: Option<Seed>,
    /// Busy polling: when the stream would wait, its task first yields and looks again for
    /// up to this long (tokio polls its I/O and timer drivers, without sleeping, before it
    /// resumes a yielded task), then sleeps until woken. Default zero: never spin. The
    /// trade is the mio loop's `busy_poll`: no wake-up latency, a core kept busy while the
    /// stream is quiet — for a current-thread runtime on a core of its own.
    pub busy_poll: Duration,
}

impl Default for TokioOptions {
    fn default() -> Self {
        Self {
            tls: None,
            event_capacity: 4096,
            recv_buffer: None,
            send_buffer: None,
            seed: None,
            busy_poll: Duration::ZERO,
        }
    }
}

/// Why a command did not take effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The stream refused it.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The stream's task has ended.
    #[error("stream task has ended")]
    Ended,
    /// The request got no response within the request timeout.
    #[error("request timed out")]
    TimedOut,
    /// The connection the request went out on ended before its answer came.
    #[error("connection lost before the answer came")]
    ConnectionLost,
}

/// The answer to [`StreamHandle::request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The id the request was sent with.
    pub id: RequestId,
    /// The response (zero-copy).
    pub payload: Bytes,
    /// It reports an error (e.g. a non-200 status).
    pub is_error: bool,
}

pub(crate) type Reply = oneshot::Sender<Result<(), StreamError>>;
pub(crate) type ResponseReply = oneshot::Sender<Result<Response, CommandError>>;

/// A command for the driver task.
#[derive(Debug)]
pub(crate) enum Command {
    SendText(Box<str>, Reply),
    SendBinary(Box<[u8]>, Reply),
    Request {
        /// The method and its parameters (JSON).
        call: Box<(String, Option<String>)>,
        reply: ResponseReply,
    },
    Subscribe(Box<[String]>, Reply),
    Unsubscribe(Box<[String]>, Reply),
    ListSubscriptions(Reply),
    Subscriptions(oneshot::Sender<Vec<String>>),
    // Boxed, as the other variants' payloads (a `String` or `Vec` is 24 bytes, a box 16):
    // every stream's command channel starts with a block of 32 commands, each as large as
    // the largest variant (96 bytes with these inline, 32 without).
    SubscribeMarkets(Box<BetfairSubscription>, Reply),
    SubscribeOrders(Box<BetfairSubscription>, Reply),
    SetBetfairAuth(Box<BetfairAuth>, Reply),
    Stop,
    Crash(String),
}

/// Controls one stream; `Clone + Send + Sync`. Commands reach the stream's task at once
/// (it wakes on them), whatever the stream is doing.
#[derive(Debug, Clone)]
pub struct StreamHandle {
    pub(crate) commands: mpsc::UnboundedSender<Command>,
    pub(crate) stats: StatsHandle,
}

impl StreamHandle {
    async fn call(&self, make: impl FnOnce(Reply) -> Command) -> Result<(), CommandError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .map_err(|_| CommandError::Ended)?;
        rx.await
            .map_err(|_| CommandError::Ended)?
            .map_err(CommandError::from)
    }

    /// Sends a text message (WebSocket) or line.
    pub async fn send_text(&self, text: impl Into<String>) -> Result<(), CommandError> {
        let text = text.into().into_boxed_str();
        self.call(|r| Command::SendText(text, r)).await
    }

    /// Sends a binary message (WebSocket streams).
    pub async fn send_binary(&self, data: impl Into<Vec<u8>>) -> Result<(), CommandError> {
        let data = data.into().into_boxed_slice();
        self.call(|r| Command::SendBinary(data, r)).await
    }

    /// Sends a Binance WebSocket API request (`params_json`: a JSON value) and waits for its
    /// response, or [`CommandError::TimedOut`] after the request timeout.
    pub async fn request(
        &self,
        method: &str,
        params_json: Option<&str>,
    ) -> Result<Response, CommandError> {
        let (tx, rx) = oneshot::channel();
        let cmd = Command::Request {
            call: Box::new((method.to_owned(), params_json.map(str::to_owned))),
            reply: tx,
        };
        self.commands.send(cmd).map_err(|_| CommandError::Ended)?;
        rx.await.map_err(|_| CommandError::Ended)?
    }

    /// Subscribes Binance streams (sent now if open, else on connect; resent after reconnects).
    pub async fn subscribe(&self, streams: &[&str]) -> Result<(), CommandError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Subscribe(streams, r)).await
    }

    /// Unsubscribes Binance streams; unknown ones are an error.
    pub async fn unsubscribe(&self, streams: &[&str]) -> Result<(), CommandError> {
        let streams = streams.iter().map(|s| (*s).to_owned()).collect();
        self.call(|r| Command::Unsubscribe(streams, r)).await
    }

    /// Asks a Binance stream endpoint for the connection's streams (the stream must be
    /// open); the answer arrives among the events as [`StreamEvent::Response`] with
    /// [`RequestKind::ListSubscriptions`](feedwire_core::RequestKind::ListSubscriptions).
    pub async fn list_subscriptions(&self) -> Result<(), CommandError> {
        self.call(Command::ListSubscriptions).await
    }

    /// The Binance streams the stream subscribes on every connection (those its URL names
    /// among them, less those unsubscribed), as it has them now: what a second stream
    /// subscribes to take over from this one (make-before-break, at
    /// [`StreamEvent::ReconnectDue`]). A subscription the server refused is not among them.
    pub async fn subscriptions(&self) -> Result<Vec<String>, CommandError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Subscriptions(tx))
            .map_err(|_| CommandError::Ended)?;
        rx.await.map_err(|_| CommandError::Ended)
    }

    /// Sets the Betfair market subscription (resent with the latest clk after reconnects).
    pub async fn subscribe_markets(&self, sub: BetfairSubscription) -> Result<(), CommandError> {
        self.call(|r| Command::SubscribeMarkets(Box::new(sub), r))
            .await
    }

    /// Sets the Betfair order subscription.
    pub async fn subscribe_orders(&self, sub: BetfairSubscription) -> Result<(), CommandError> {
        self.call(|r| Command::SubscribeOrders(Box::new(sub), r))
            .await
    }

    /// Replaces the Betfair credentials for the logins to come (a renewed session token):
    /// see [`Stream::set_betfair_auth`](feedwire_core::Stream::set_betfair_auth).
    pub async fn set_betfair_auth(&self, auth: BetfairAuth) -> Result<(), CommandError> {
        self.call(|r| Command::SetBetfairAuth(Box::new(auth), r))
            .await
    }

    /// Graceful stop: Close frame on the wire at once, then wait for the peer (close
    /// timeout). No reconnect follows. What is still delivered after it (what was queued,
    /// and a message half received at the stop): [`Stream::stop`](feedwire_core::Stream::stop).
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Stop);
    }

    /// Immediate end: the connection is dropped at once. No reconnect follows.
    pub fn crash(&self, reason: &str) {
        let _ = self.commands.send(Command::Crash(reason.to_owned()));
    }

    /// A consistent statistics snapshot, its rates as of now (no lock on the stream's hot
    /// path).
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot(std::time::Instant::now())
    }
}

/// The stream's events, in order. Ends after `Closed` or `Crashed`. They arrive from the
/// stream's task in batches (one per read), so a message costs no channel operation of its
/// own.
///
/// On a multi-thread runtime, take them in a task spawned onto it rather than in `block_on`
/// (or `#[tokio::main]`'s body): a consumer outside the workers is woken across threads for
/// every batch, which doubled the CPU a 9 KB message cost (`events_consumer` example).
#[derive(Debug)]
pub struct Events {
    pub(crate) rx: mpsc::Receiver<VecDeque<StreamEvent>>,
    pub(crate) batch: VecDeque<StreamEvent>,
    /// Emptied batches go back to the stream's task for reuse.
    pub(crate) spare: mpsc::UnboundedSender<VecDeque<StreamEvent>>,
}

impl Events {
    /// The next event; `None` once the stream has ended and every event was taken.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next event if one is here; else the emptied batch goes back to the stream's task
    /// before waiting, so a consumer waiting on a quiet stream holds no buffer (the task's
    /// spare batches are freed when the stream goes quiet) — a busy one sends it back as
    /// before, one send a batch.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        loop {
            if let Some(e) = self.batch.pop_front() {
                return Poll::Ready(Some(e));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(batch)) => self.start(batch),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => {
                    self.give_back();
                    return Poll::Pending;
                }
            }
        }
    }

    /// Takes `next` as the current batch, the emptied one given back.
    fn start(&mut self, next: VecDeque<StreamEvent>) {
        self.give_back();
        self.batch = next;
    }

    /// Gives the emptied batch's buffer back to the stream's task for reuse.
    fn give_back(&mut self) {
        if self.batch.capacity() > 0 {
            // The task may be gone (stream ended): then the buffer is simply dropped.
            let _ = self.spare.send(std::mem::take(&mut self.batch));
        }
    }
}

impl futures_core::Stream for Events {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        self.poll_event(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> StreamEvent {
        StreamEvent::Connecting { attempt: n }
    }

    /// A consumer that took every event and waits holds no buffer: its emptied batch is
    /// back with the stream's task (which frees its spares when the stream goes quiet).
    #[test]
    fn a_waiting_consumer_gives_its_emptied_batch_back() {
        let (tx, rx) = mpsc::channel(4);
        let (spare, mut spares) = mpsc::unbounded_channel();
        let mut events = Events {
            rx,
            batch: VecDeque::new(),
            spare,
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        tx.try_send((0..500).map(event).collect()).unwrap();
        for n in 0..500 {
            assert_eq!(events.poll_event(&mut cx), Poll::Ready(Some(event(n))));
        }
        assert!(
            spares.try_recv().is_err(),
            "taken to the last event, not yet waiting"
        );
        assert_eq!(events.poll_event(&mut cx), Poll::Pending);
        assert_eq!(events.batch.capacity(), 0, "waits holding nothing");
        assert!(spares.try_recv().unwrap().capacity() >= 500);
        // The next batch arrives as ever; a batch taken while one waits sends the emptied
        // one back too.
        tx.try_send(VecDeque::from([event(500)])).unwrap();
        tx.try_send(VecDeque::from([event(501)])).unwrap();
        assert_eq!(events.poll_event(&mut cx), Poll::Ready(Some(event(500))));
        assert_eq!(events.poll_event(&mut cx), Poll::Ready(Some(event(501))));
        assert!(spares.try_recv().unwrap().capacity() >= 1);
        drop(tx);
        assert_eq!(events.poll_event(&mut cx), Poll::Ready(None));
    }
}
