//! The future that drives one stream (on a task of its own, or awaited by the caller): wait
//! for a command, readability, writability, a finished connect, room in the event queue, or
//! the core's next deadline — whichever comes first.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use feedwire_core::rustls::ClientConfig;
use feedwire_core::{
    default_tls_config, Answer, AwaitedAnswers, DataHandler, LendingInput, ReadRoom, Stream,
    StreamEvent, StreamInput, TransportCommand,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Sleep;

use crate::handle::{
    Command, CommandError, Events, Response, ResponseReply, StreamHandle, TokioOptions,
};
use crate::io::{open, Conn, OpenError};
use crate::registered::Registered;
use crate::socket::Socket;

/// Most bytes read per wake-up, so that one busy stream leaves the runtime to others (a
/// command ends the wake-up's reads sooner).
const READ_BUDGET: usize = 4 << 20;

enum Wake {
    Command(Option<Command>),
    EventRoom,
    /// The application dropped its [`Events`].
    EventsGone,
    /// Bytes were read (and handed to the stream), or the socket ended.
    Read,
    Writable,
    Connected(Result<Box<Conn>, OpenError>),
    Deadline,
    /// Nothing is left that could wake the task (no handle, connection, connect or timer).
    Stranded,
}

/// A reservation of room for one batch in the event channel.
type RoomWait = dyn Future<Output = Result<mpsc::OwnedPermit<VecDeque<StreamEvent>>, mpsc::error::SendError<()>>>
    + Send;

/// Where events go. `H`: the lending handler's type, so that the read path calls its
/// `on_data` directly (inlined) rather than through a vtable per message.
enum Output<H> {
    /// Batches of events to the application's [`Events`]: one channel operation per read
    /// batch, not per message.
    Channel {
        events: mpsc::Sender<VecDeque<StreamEvent>>,
        /// Emptied batches coming back from the application, reused so that a batch costs
        /// no allocation (and its memory stays warm) in steady state.
        spare: mpsc::UnboundedReceiver<VecDeque<StreamEvent>>,
    },
    /// A handler called on this task, data lent from the read buffer.
    Lend(H),
}

impl<H> Output<H> {
    /// The handler to lend data to: a lending output's, and only while no event waits for it
    /// (`nothing_pending`), so that nothing overtakes a queued event.
    fn lender(&mut self, nothing_pending: bool) -> Option<&mut H> {
        match self {
            Self::Lend(h) if nothing_pending => Some(h),
            _ => None,
        }
    }
}

/// The handler type of a driver whose events go to a channel: there is none.
pub(crate) enum Unlent {}

impl DataHandler for Unlent {
    fn on_data(&mut self, _: feedwire_core::DataRef<'_>) {
        match *self {}
    }

    fn on_event(&mut self, _: StreamEvent) {
        match *self {}
    }
}

pub(crate) struct Driver<H> {
    stream: Stream,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Whether `commands` holds our waker: while it does and is empty, a wait skips it.
    commands_waker: Registered,
    output: Output<H>,
    /// The batch being filled; handed over whole when the channel has room (a handler
    /// takes it at once).
    pending: VecDeque<StreamEvent>,
    capacity: usize,
    conn: Option<Conn>,
    connecting: Option<JoinHandle<Result<Conn, OpenError>>>,
    tls: Arc<ClientConfig>,
    options: TokioOptions,
    /// Every [`StreamHandle`] is gone: the command channel is closed and no longer waited
    /// on (a closed channel is always ready, so waiting on it would spin until the close
    /// handshake ended).
    handles_gone: bool,
    /// Waits for room in the event channel while a batch is held back (made when the
    /// application falls behind, dropped when the room comes).
    room: Option<Pin<Box<RoomWait>>>,
    /// Waits for the application's [`Events`] to be dropped while no batch is held back
    /// (when one is, `room` sees it): a dropped receiver stops the stream at once — a quiet
    /// stream's next batch, which would find nobody, might never come, and the stream held
    /// its connection (Betfair allows an account a few) for as long as its handle lived.
    events_dropped: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Whether `events_dropped` holds our waker.
    events_dropped_waker: Registered,
    /// The drop was seen (the stream was stopped for it): not waited for again.
    events_gone: bool,
    /// Requests whose caller awaits the response.
    awaited: AwaitedAnswers<ResponseReply>,
    /// The deadline timer, kept across waits (made on the first, inside the runtime).
    timer: Option<Pin<Box<Sleep>>>,
    /// What `timer` is armed for: the core's deadline when that came earlier than what it
    /// was armed for. A deadline that moves later (a busy stream's idle deadline, on every
    /// read) leaves it alone: it fires early once, nothing is due, and it is armed again —
    /// instead of a timer registered and cancelled on every wait.
    armed: Option<Instant>,
    /// Whether `timer` holds our waker: while it does and has not fired, a wait skips it.
    timer_waker: Registered,
}

impl Driver<Unlent> {
    /// A driver whose events go to the returned [`Events`].
    pub(crate) fn new(stream: Stream, options: TokioOptions) -> (StreamHandle, Events, Self) {
        // One batch waiting in the channel while the next fills: reading pauses when both are
        // full, so at most about three batches of `capacity` events exist at once.
        let (ev_tx, ev_rx) = mpsc::channel(1);
        let (spare_tx, spare_rx) = mpsc::unbounded_channel();
        let output = Output::Channel {
            events: ev_tx,
            spare: spare_rx,
        };
        let (handle, driver) = Self::with_output(stream, options, output);
        let events = Events {
            rx: ev_rx,
            batch: VecDeque::new(),
            spare: spare_tx,
        };
        (handle, events, driver)
    }
}

/// A driver dropped before its stream ended (the future of `drive_lending` dropped in a
/// `select!`, a runtime shutting down) takes its connection attempt with it: the connect
/// task — DNS, TCP, the TLS handshake — has no deadline of its own (the stream's connect
/// timer ends it through the driver), and a server that accepts and never answers would
/// keep it and its socket for good.
///
/// A driver dropped while its stream is connected — the runtime shut down right after a
/// `stop()` (a `main` that stops its stream and returns), the future dropped — stops the
/// stream and writes what that sends, the Close, if the socket takes it now (no waiting):
/// the server hears the client go, as a `stop()` promises. The stop used to be still a
/// command in the channel when the task went, and go nowhere. A `crash()` still waiting
/// there is honoured, and so is a handler's panic (the driver dropped while unwinding):
/// nothing is sent, as for a crash.
impl<H> Drop for Driver<H> {
    fn drop(&mut self) {
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
        if self.stream.state().is_terminal() || std::thread::panicking() {
            return;
        }
        while let Ok(cmd) = self.commands.try_recv() {
            if matches!(cmd, Command::Crash(_)) {
                return;
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        self.stream.stop(Instant::now());
        let stream = &mut self.stream;
        conn.out
            .fill_for_close(|| stream.poll_transmit(), conn.tls.as_deref_mut());
        while let Some(chunk) = conn.out.pop() {
            if !matches!(conn.sock.try_write(&conn.sweep, &chunk), Ok(n) if n == chunk.len()) {
                break;
            }
        }
    }
}

impl<H: DataHandler + Send + 'static> Driver<H> {
    /// A driver that lends data to `handler` and hands it every other event.
    pub(crate) fn lending(
        stream: Stream,
        options: TokioOptions,
        handler: H,
    ) -> (StreamHandle, Self) {
        Self::with_output(stream, options, Output::Lend(handler))
    }

    fn with_output(
        stream: Stream,
        options: TokioOptions,
        output: Output<H>,
    ) -> (StreamHandle, Self) {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let handle = StreamHandle {
            commands: cmd_tx,
            stats: stream.stats_handle(),
        };
        let driver = Self {
            stream,
            commands: cmd_rx,
            commands_waker: Registered::default(),
            output,
            pending: VecDeque::new(),
            capacity: options.event_capacity.max(1),
            conn: None,
            connecting: None,
            tls: options.tls.clone().unwrap_or_else(default_tls_config),
            options,
            handles_gone: false,
            room: None,
            events_dropped: None,
            events_dropped_waker: Registered::default(),
            events_gone: false,
            awaited: AwaitedAnswers::new(),
            timer: None,
            armed: None,
            timer_waker: Registered::default(),
        };
        (handle, driver)
    }

    /// Drives the stream until it ends: the stream's whole task.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn's future keeps its arguments beside the locals they move into: \
                  the driver twice, 12 KB a stream instead of 6"
    )]
    pub(crate) fn run(mut self) -> impl Future<Output = ()> {
        async move {
            loop {
                self.pump();
                if let Err(e) = self.write_ready() {
                    self.stream
                        .handle_transport_error(&e.to_string(), Instant::now());
                    continue;
                }
                if let Err(e) = self.set_low_water() {
                    self.stream
                        .handle_transport_error(&format!("SO_RCVLOWAT: {e}"), Instant::now());
                    continue;
                }
                if let Err(e) = self.follow_application() {
                    self.stream.handle_transport_error(
                        &format!("socket in or out of the reactor: {e}"),
                        Instant::now(),
                    );
                    continue;
                }
                if self.stream.state().is_terminal()
                    && self.pending.is_empty()
                    && self.connecting.is_none()
                {
                    return;
                }
                match self.wait().await {
                    Wake::Command(Some(cmd)) => self.command(cmd),
                    // Every handle is gone: nobody can stop us later, so stop now.
                    Wake::Command(None) => {
                        self.handles_gone = true;
                        self.stream.stop(Instant::now());
                    }
                    Wake::EventRoom => self.forward_events(),
                    // Nobody listens: stop (the next forward drops the batch, so this wake does
                    // not repeat).
                    Wake::EventsGone => {
                        self.events_gone = true;
                        self.events_dropped = None;
                        self.stream.stop(Instant::now());
                    }
                    Wake::Read | Wake::Writable => {}
                    Wake::Connected(result) => {
                        self.connecting = None;
                        let now = Instant::now();
                        match result {
                            Ok(conn) => {
                                self.conn = Some(*conn);
                                self.stream.handle_connected(now);
                                if let Some(tls) =
                                    self.conn.as_mut().and_then(|c| c.tls.as_deref_mut())
                                {
                                    let mut sink = StreamInput {
                                        stream: &mut self.stream,
                                        now,
                                    };
                                    if let Err(e) = tls.flush_plaintext(&mut sink) {
                                        self.stream.handle_tls_error(&e, now);
                                    }
                                }
                            }
                            Err(OpenError::Connect(reason)) => {
                                self.stream.handle_connect_failed(&reason, now)
                            }
                            Err(OpenError::Tls(e)) => self.stream.handle_tls_error(&e, now),
                        }
                    }
                    Wake::Deadline => {
                        self.armed = None;
                        let now = Instant::now();
                        // Reads wait for the application: the peer is not what is silent.
                        if !self.pending.is_empty() {
                            self.stream.handle_reads_held(now);
                        }
                        self.stream.handle_timeout(now);
                        if self.stream.poll_read_memory_released() {
                            self.release_quiet_memory(now);
                        }
                    }
                    // Only a stream that can no longer change gets here (the core arms a timer
                    // in every state that waits for something): end it rather than hang.
                    Wake::Stranded => self
                        .stream
                        .crash("the stream has nothing left to wait for", Instant::now()),
                }
            }
        }
    }

    /// Arms the timer for the core's next deadline, then waits for whatever comes first.
    async fn wait(&mut self) -> Wake {
        if let Some(deadline) = self.stream.poll_timeout() {
            if self.armed.is_none_or(|armed| deadline < armed) {
                match self.timer.as_mut() {
                    Some(timer) => timer.as_mut().reset(deadline.into()),
                    None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline.into()))),
                }
                self.armed = Some(deadline);
                self.timer_waker.clear();
            }
        }
        if !self.options.busy_poll.is_zero() {
            // Elapsed time against the spin, not a deadline: `Instant + Duration::MAX`
            // would overflow, and a spin that long is a valid "never sleep".
            let start = Instant::now();
            loop {
                let looked = std::future::poll_fn(|cx| Poll::Ready(self.poll_wake(cx))).await;
                if let Poll::Ready(wake) = looked {
                    return wake;
                }
                if start.elapsed() >= self.options.busy_poll {
                    break;
                }
                // tokio resumes a yielded task after polling its drivers, without sleeping
                // (the task is ready): new bytes or a due timer are seen by the next look.
                tokio::task::yield_now().await;
            }
        }
        std::future::poll_fn(|cx| self.poll_wake(cx)).await
    }

    /// Polls every source the stream waits on, in priority order (a command first: `stop()`
    /// takes effect before more data is read). Written out rather than a `select!`, whose
    /// future was rebuilt and moved on every wait: this touches only the sources, and each
    /// keeps its waker registered until it is ready.
    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<Wake> {
        // Whether some source now holds our waker: if none does, nothing can wake us.
        let mut polled = false;
        if !self.handles_gone {
            polled = true;
            // A send or the last handle's drop wakes the waker the channel holds; until
            // then an empty, open channel holding it has nothing to say.
            let quiet = self.commands_waker.holds(cx)
                && self.commands.is_empty()
                && !self.commands.is_closed();
            if !quiet {
                let had_budget = tokio::task::coop::has_budget_remaining();
                match self.commands.poll_recv(cx) {
                    Poll::Ready(cmd) => {
                        self.commands_waker.clear();
                        return Poll::Ready(Wake::Command(cmd));
                    }
                    Poll::Pending => self.commands_waker.pending(cx, had_budget),
                }
            }
        }
        // Only a channel can be full (a handler takes everything at once).
        match &self.output {
            Output::Channel { events, .. } if !self.pending.is_empty() => {
                polled = true;
                let room = self
                    .room
                    .get_or_insert_with(|| Box::pin(events.clone().reserve_owned()));
                if let Poll::Ready(permit) = room.as_mut().poll(cx) {
                    self.room = None;
                    // The permit goes (and frees its slot) at once: this task is the only
                    // sender, so the batch's `try_send` finds the slot free.
                    return Poll::Ready(match permit {
                        Ok(_) => Wake::EventRoom,
                        Err(_) => Wake::EventsGone,
                    });
                }
            }
            Output::Channel { events, .. } => {
                self.room = None;
                // Not counted in `polled`: the receiver's drop is no progress of the stream's
                // own, and a stream with nothing else left should still be found stranded.
                let dropped = events.is_closed();
                if !self.events_gone && (dropped || !self.events_dropped_waker.holds(cx)) {
                    let had_budget = tokio::task::coop::has_budget_remaining();
                    let wait = self.events_dropped.get_or_insert_with(|| {
                        let events = events.clone();
                        Box::pin(async move { events.closed().await })
                    });
                    if wait.as_mut().poll(cx).is_ready() {
                        self.events_dropped_waker.clear();
                        return Poll::Ready(Wake::EventsGone);
                    }
                    self.events_dropped_waker.pending(cx, had_budget);
                }
            }
            Output::Lend(_) => self.room = None,
        }
        // A batch still waiting for room means the application is behind: read nothing more
        // until it catches up (bounded memory, and the read buffer's blocks come back). The
        // read itself is the readiness check: a socket with nothing to read registers the
        // waker in the same poll, and one that has bytes is not polled twice.
        if self.conn.is_some() && self.stream.is_connected() && self.pending.is_empty() {
            polled = true;
            if self.read(cx) {
                return Poll::Ready(Wake::Read);
            }
        }
        if let Some(conn) = self.conn.as_ref() {
            if !conn.out.is_empty() {
                polled = true;
                // Registered: the run loop does not park a socket with output waiting.
                if let Socket::Registered(sock) = &conn.sock {
                    if sock.poll_write_ready(cx).is_ready() {
                        return Poll::Ready(Wake::Writable);
                    }
                }
            }
        }
        if let Some(connecting) = self.connecting.as_mut() {
            polled = true;
            if let Poll::Ready(res) = Pin::new(connecting).poll(cx) {
                return Poll::Ready(Wake::Connected(
                    res.unwrap_or_else(|e| {
                        Err(OpenError::Connect(format!("connect task failed: {e}")))
                    })
                    .map(Box::new),
                ));
            }
        }
        if let Some(timer) = self.timer.as_mut().filter(|_| self.armed.is_some()) {
            polled = true;
            // Firing wakes the waker the timer holds; until then it has nothing to say.
            if timer.is_elapsed() || !self.timer_waker.holds(cx) {
                let had_budget = tokio::task::coop::has_budget_remaining();
                if timer.as_mut().poll(cx).is_ready() {
                    self.timer_waker.clear();
                    return Poll::Ready(Wake::Deadline);
                }
                self.timer_waker.pending(cx, had_budget);
            }
        }
        if polled {
            Poll::Pending
        } else {
            Poll::Ready(Wake::Stranded)
        }
    }

    fn command(&mut self, cmd: Command) {
        let now = Instant::now();
        match cmd {
            Command::SendText(text, reply) => {
                let _ = reply.send(self.stream.send_text(&text));
            }
            Command::SendBinary(data, reply) => {
                let _ = reply.send(self.stream.send_binary(&data));
            }
            Command::Request { call, reply } => {
                match self.stream.request(&call.0, call.1.as_deref(), now) {
                    Ok(id) => {
                        self.awaited.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                    }
                }
            }
            Command::Subscribe(streams, reply) => {
                let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
                let _ = reply.send(self.stream.subscribe(&refs, now));
            }
            Command::Unsubscribe(streams, reply) => {
                let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
                let _ = reply.send(self.stream.unsubscribe(&refs, now));
            }
            Command::ListSubscriptions(reply) => {
                let _ = reply.send(self.stream.list_subscriptions(now));
            }
            Command::Subscriptions(reply) => {
                let _ = reply.send(self.stream.subscriptions().map(str::to_owned).collect());
            }
            Command::SubscribeMarkets(sub, reply) => {
                let _ = reply.send(self.stream.subscribe_markets(*sub, now));
            }
            Command::SubscribeOrders(sub, reply) => {
                let _ = reply.send(self.stream.subscribe_orders(*sub, now));
            }
            Command::SetBetfairAuth(auth, reply) => {
                let _ = reply.send(self.stream.set_betfair_auth(*auth));
            }
            Command::Stop => self.stream.stop(now),
            Command::Crash(reason) => self.stream.crash(&reason, now),
        }
    }

    /// Moves the core's output where it goes: bytes to the socket queue (through TLS),
    /// transport commands to sockets, events towards the application.
    fn pump(&mut self) {
        let stream = &mut self.stream;
        match self.conn.as_mut() {
            // Bounded: what a peer that does not read leaves unsent stays in the stream.
            Some(conn) => {
                conn.out
                    .fill(|| stream.poll_transmit(), conn.tls.as_deref_mut());
            }
            None => while stream.poll_transmit().is_some() {},
        }
        while let Some(cmd) = self.stream.poll_transport() {
            match cmd {
                TransportCommand::Connect(endpoint) => {
                    let tls = self.tls.clone();
                    let options = self.options.clone();
                    self.connecting =
                        Some(tokio::spawn(
                            async move { open(endpoint, tls, &options).await },
                        ));
                }
                TransportCommand::Disconnect => self.disconnect(),
            }
        }
        self.collect_events();
        self.forward_events();
    }

    fn disconnect(&mut self) {
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if matches!(self.stream.state(), feedwire_core::StreamState::Crashed(_)) {
            return; // dropped at once
        }
        // Every byte the stream still holds for this connection (its Close frame), so that
        // none is left to go out on the next one.
        let stream = &mut self.stream;
        conn.out
            .fill_for_close(|| stream.poll_transmit(), conn.tls.as_deref_mut());
        // Let the last bytes (a Close frame, TLS close_notify) out, briefly, off the hot path —
        // through tokio's own writes, which wait for writability on a non-blocking socket.
        if conn.sock.stop_sweeping(&mut conn.sweep).is_err() {
            return; // a socket left blocking could stall the runtime: closed at once
        }
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let flush = async {
                let sock = conn.sock.registered(&mut conn.sweep)?;
                while let Some(chunk) = conn.out.pop() {
                    sock.write_all(&chunk).await?;
                }
                sock.shutdown().await
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), flush).await;
        });
    }

    /// Moves the core's events to the application queue; answers and timeouts of awaited
    /// requests go to their callers instead (each exactly once).
    fn collect_events(&mut self) {
        // Nearly every read only lends data and queues nothing: then only the end is checked.
        if self.stream.has_events() {
            if self.awaited.is_empty() {
                // Nobody awaits an answer: the whole queue moves at once.
                self.stream.drain_events_into(&mut self.pending);
            }
            while let Some(event) = self.stream.poll_event() {
                let unclaimed = self.awaited.claim(event, |reply, answer| {
                    let _ = reply.send(match answer {
                        Answer::Response {
                            id,
                            payload,
                            is_error,
                        } => Ok(Response {
                            id,
                            payload,
                            is_error,
                        }),
                        Answer::TimedOut => Err(CommandError::TimedOut),
                        Answer::Lost => Err(CommandError::ConnectionLost),
                    });
                });
                self.pending.extend(unclaimed);
            }
        }
        if self.stream.state().is_terminal() {
            // Dropping the senders tells every waiting caller that the stream ended.
            self.awaited.clear();
        }
    }

    /// The stream went quiet and gave its read block back: the TLS session's ciphertext
    /// buffer goes too, and so do the event batches kept for reuse (each with room for as
    /// many events as a read once brought, up to `event_capacity`), the application's
    /// among them: `Events` gives its emptied batch back before it waits.
    #[cold]
    fn release_quiet_memory(&mut self, now: Instant) {
        if let Some(tls) = self.conn.as_mut().and_then(|c| c.tls.as_deref_mut()) {
            tls.release_read_buffer();
            self.stream.set_tls_buffer_bytes(tls.buffer_capacity(), now);
        }
        if self.pending.is_empty() {
            self.pending = VecDeque::new();
        }
        if let Output::Channel { spare, .. } = &mut self.output {
            while spare.try_recv().is_ok() {}
        }
    }

    fn forward_events(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let (events, spare) = match &mut self.output {
            Output::Channel { events, spare } => (events, spare),
            Output::Lend(handler) => {
                while let Some(event) = self.pending.pop_front() {
                    handler.deliver(event);
                }
                return;
            }
        };
        // No room: keep filling this batch (and leave the spare buffers where they are, so
        // none is taken out only to be dropped).
        if events.capacity() == 0 {
            return;
        }
        let empty = spare.try_recv().unwrap_or_default();
        match events.try_send(std::mem::replace(&mut self.pending, empty)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(batch)) => self.pending = batch,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                if !self.stream.state().is_terminal() {
                    self.stream.stop(Instant::now());
                }
            }
        }
    }

    /// Reads until the socket is drained, the budget is spent, the event queue is full, or a
    /// command waits; straight into the core's read buffer (or TLS's ciphertext buffer).
    /// Drained: the read would block, or it filled less than it was offered — the socket's
    /// `poll_read` then clears its readiness (new bytes raise a new event; see `Socket`),
    /// so no read is made only to find the socket empty (a system call per wake-up; on a
    /// paced stream, per message).
    /// Whether the socket gave anything (bytes, its end or an error): `false` means the first
    /// poll found nothing, and the socket holds the task's waker (or tokio's budget asked for
    /// a yield).
    fn read(&mut self, cx: &mut Context<'_>) -> bool {
        let mut budget = READ_BUDGET;
        let mut progress = false;
        while budget > 0 && self.pending.len() < self.capacity && self.stream.is_connected() {
            let Some(conn) = self.conn.as_mut() else {
                break;
            };
            let mut offered = 0;
            // Asked for only once the socket is readable: a quiet stream gave its buffer back.
            let (tls, stream, offered_len) =
                (conn.tls.as_deref_mut(), &mut self.stream, &mut offered);
            let buf = move || {
                let room = match tls {
                    Some(tls) => ReadRoom::Bytes(tls.read_buf()),
                    // Uninitialised: a queueing stream's block is not zeroed a lap.
                    None => stream.read_room(),
                };
                *offered_len = room.len();
                room
            };
            // Registered before every wait that reads; a move that fails is the socket's
            // error.
            let Poll::Ready(result) = conn.sock.poll_read(cx, &mut conn.sweep, buf) else {
                break;
            };
            progress = true;
            // After the poll: a wait that finds nothing reads no clock.
            let now = Instant::now();
            let n = match result {
                Err(e) => {
                    self.stream.handle_transport_error(&e.to_string(), now);
                    break;
                }
                Ok(n) => n,
            };
            if n == 0 {
                if let Some(tls) = conn.tls.as_deref_mut() {
                    let mut sink = StreamInput {
                        stream: &mut self.stream,
                        now,
                    };
                    let _ = tls.handle_eof(&mut sink);
                }
                self.stream.handle_eof(now);
                break;
            }
            match conn.tls.as_deref_mut() {
                Some(tls) => {
                    let mut sink = LendingInput {
                        stream: &mut self.stream,
                        now,
                        handler: self.output.lender(self.pending.is_empty()),
                    };
                    if let Err(e) = tls.handle_read(n, &mut sink) {
                        self.stream.handle_tls_error(&e, now);
                        break;
                    }
                }
                None => {
                    let lender = self.output.lender(self.pending.is_empty());
                    self.stream.handle_read_lending(n, now, lender);
                }
            }
            budget = budget.saturating_sub(n);
            // Hand each read's events over at once: the application works on bytes that are
            // still in cache, and the read buffer's blocks come back for reuse. If it has not
            // taken the previous batch yet, stop reading until it does. (A read that only lent
            // data, nearly every one, has nothing to hand over; the stream's end is seen by
            // `pump` before the next wait.)
            if self.stream.has_events() {
                self.collect_events();
                self.forward_events();
            }
            if !self.pending.is_empty() || n < offered {
                break;
            }
            // A command (a stop above all) waits for no more reads: the wait that follows
            // takes it before the socket. Read on, and a stop on a busy stream took effect
            // only after the whole budget — megabytes read after it, lent or queued.
            if !self.commands.is_empty() {
                break;
            }
        }
        progress
    }

    /// Keeps the socket's receive low-water mark at what the stream can use
    /// ([`Stream::read_low_water`]): a large frame's rest wakes the task once, not once per
    /// arriving piece. Checked before every wait (after a read, a timer, a command), set
    /// only when it changes.
    fn set_low_water(&mut self) -> io::Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let wanted = self.stream.socket_low_water(conn.tls.as_deref());
        conn.sock
            .set_low_water(&mut conn.sweep, &mut conn.low_water, wanted)
    }

    /// While the application is behind and nothing waits to go out, the socket is parked
    /// out of the reactor (see [`crate::socket`]); otherwise it is in. Checked before every
    /// wait; a move only when the application falls behind or catches up.
    fn follow_application(&mut self) -> io::Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        if !self.pending.is_empty() && conn.out.is_empty() {
            conn.sock.park()
        } else {
            conn.sock.registered(&mut conn.sweep).map(drop)
        }
    }

    /// Writes queued bytes, vectored, until the socket would block.
    /// Writes what the socket takes now; while that empties the queue, takes more from the
    /// stream (a backlog held back while the peer was not reading) and writes again.
    fn write_ready(&mut self) -> io::Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let stream = &mut self.stream;
        loop {
            conn.out
                .write_with(|slices| conn.sock.try_write_vectored(&conn.sweep, slices))?;
            if !conn
                .out
                .refill(|| stream.poll_transmit(), conn.tls.as_deref_mut())
            {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command is 32 bytes: every stream's command channel starts with room for 32 of
    /// them, whether it is ever sent one or not.
    #[test]
    fn a_command_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Command>(), 32);
    }

    /// The stream's future holds its driver once: it is the stream's task, and an
    /// application may hold thousands of quiet streams.
    #[test]
    fn the_future_holds_the_driver_once() {
        let config = feedwire_core::StreamConfig::binance_stream("ws://127.0.0.1:9/ws");
        let stream = Stream::new(config, [0; 32], Instant::now()).unwrap();
        let (_handle, _events, driver) = Driver::new(stream, TokioOptions::default());
        let driver_size = std::mem::size_of_val(&driver);
        let future_size = std::mem::size_of_val(&driver.run());
        assert!(
            future_size < driver_size * 5 / 4,
            "the future {future_size} bytes, the driver {driver_size}"
        );
    }
}
