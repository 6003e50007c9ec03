//! The loop: readiness, commands, deadlines; each stream's core in between.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedwire_core::rustls::ClientConfig;
use feedwire_core::{default_tls_config, os_seed, AwaitedAnswers, DataHandler, Stream, TlsSession};
use mio::{Events, Poll, Token, Waker};

use crate::deadlines::{Deadlines, StreamDeadline};
use crate::doorbell::Doorbell;
use crate::handle::{Command, Delivery, LoopError, MioOptions, StreamId};
use crate::loop_thread::LoopId;
use crate::resolver::Resolver;
use crate::slot::Slab;
use crate::stream_io::{
    connect_next, deliver, fall_back_if_due, flush, follow_consumer, id_of, pump, read,
    set_low_water, Entry,
};

const WAKER: Token = Token(usize::MAX);

/// Tokens with this bit set belong to the application's own sources (see
/// [`crate::user_token`]); stream tokens never have it (31-bit generations).
pub(crate) const USER_TOKEN_BIT: usize = 1 << (usize::BITS - 1);

/// Commands taken in one turn at most: a burst (a thousand streams added at once, each a
/// connect and a resolved address) is taken a slice at a time between the streams' reads,
/// not in one go while every open stream waits (measured: 1,200 in one turn, 482 ms).
const COMMANDS_PER_TURN: usize = 32;

pub(crate) struct EventLoop<H> {
    poll: Poll,
    /// INVARIANT: every sender wakes the loop's `Waker` after each send (`LoopHandle::send`,
    /// the resolver's report, a dropped event receiver's stop): `turn` reads the channel only
    /// after a wake.
    commands: Receiver<Command<H>>,
    /// A sender of `commands`, for the loop's own (a dropped event receiver's stop).
    loopback: Sender<Command<H>>,
    resolver: Resolver<H>,
    streams: Slab<Entry<H>>,
    deadlines: Deadlines,
    /// Streams to service in this iteration: touched by readiness, a command or a timer, or
    /// left with unread input or undelivered events. Only these are visited, so a wake costs
    /// what happened, not the number of streams.
    ready: Vec<StreamId>,
    /// The list being serviced: swapped with `ready` each iteration, so that neither is
    /// allocated again once both have grown (an allocation per wake-up otherwise: per
    /// message, on a paced stream).
    servicing: Vec<StreamId>,
    tls: Arc<ClientConfig>,
    options: MioOptions,
    id: LoopId,
    doorbell: Doorbell,
    /// Commands were left in the channel at the end of the last turn's slice.
    commands_left: bool,
}

impl<H: DataHandler + Send + 'static> EventLoop<H> {
    pub(crate) fn new(
        options: MioOptions,
        commands: Receiver<Command<H>>,
        loopback: Sender<Command<H>>,
    ) -> io::Result<(Self, Doorbell)> {
        let poll = Poll::new()?;
        // mio allows one waker per Poll: the handles and the resolver threads share it.
        let doorbell = Doorbell::new(Waker::new(poll.registry(), WAKER)?);
        Ok((
            Self {
                poll,
                commands,
                loopback: loopback.clone(),
                resolver: Resolver::new(loopback, doorbell.waker()),
                streams: Slab::default(),
                deadlines: Deadlines::default(),
                ready: Vec::new(),
                servicing: Vec::new(),
                tls: options.tls.clone().unwrap_or_else(default_tls_config),
                options,
                id: LoopId::new(),
                doorbell: doorbell.clone(),
                commands_left: false,
            },
            doorbell,
        ))
    }

    /// Turns until shutdown (the loop's own thread).
    pub(crate) fn run(mut self) {
        let _inside = self.id.enter();
        let mut events = Events::with_capacity(1024);
        loop {
            match self.turn(&mut events, None, &mut |_| {}) {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::error!(error = %e, "mio poll failed; loop ends");
                    return;
                }
            }
        }
    }

    /// Which loop this is (its handles carry the id too).
    pub(crate) fn id(&self) -> LoopId {
        self.id
    }

    pub(crate) fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// One iteration: waits for readiness, a command or the earliest deadline (at most
    /// `max_wait`), then services what happened. Events for the application's own sources
    /// (tokens with the top bit set) go to `user`. Returns false once shut down.
    pub(crate) fn turn(
        &mut self,
        events: &mut Events,
        max_wait: Option<Duration>,
        user: &mut dyn FnMut(&mio::event::Event),
    ) -> io::Result<bool> {
        {
            let timeout = match (self.poll_timeout(), max_wait) {
                (Some(t), Some(m)) => Some(t.min(m)),
                (t, m) => t.or(m),
            };
            self.wait(events, timeout)?;
            // Every command is sent with a wake: the channel is looked at only after one.
            let mut woken = false;
            for event in events.iter() {
                if event.token() == WAKER {
                    woken = true;
                    continue;
                }
                if event.token().0 & USER_TOKEN_BIT != 0 {
                    user(event);
                    continue;
                }
                let id = id_of(event.token(), &self.streams);
                if let Some(entry) = self.streams.get_mut(id) {
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        entry.readable = true;
                        // Urgent data alone may be skipped by a read that then waits.
                        let urgent_only =
                            event.is_priority() && !(event.is_read_closed() || event.is_error());
                        if let Some(sock) = entry.sock.as_mut().filter(|_| !urgent_only) {
                            sock.reads.readable();
                        }
                    }
                    if event.is_read_closed() || event.is_error() {
                        if let Some(sock) = entry.sock.as_mut() {
                            sock.read_closed = true;
                        }
                    }
                    self.mark(id);
                    if event.is_writable() || event.is_error() {
                        self.on_writable(id);
                    }
                }
            }
            if (woken || self.commands_left) && !self.take_commands() {
                return Ok(false);
            }
            self.service_ready();
            Ok(true)
        }
    }

    /// Takes up to [`COMMANDS_PER_TURN`] commands; the rest after this turn's reads (the
    /// next turn does not wait). Returns false on shutdown. Out of line: a paced stream's
    /// wake-ups, one a message, come from its socket, not from a command.
    #[inline(never)]
    fn take_commands(&mut self) -> bool {
        self.doorbell.answer();
        self.commands_left = false;
        for taken in 1..=COMMANDS_PER_TURN {
            let Ok(cmd) = self.commands.try_recv() else {
                return true;
            };
            if !self.command(cmd) {
                return false;
            }
            if taken == COMMANDS_PER_TURN {
                self.commands_left = true;
            }
        }
        true
    }

    /// Waits for readiness for at most `timeout` (`None`: until something happens). With
    /// [`MioOptions::busy_poll`], the first part of the wait polls without sleeping: the
    /// data is taken the moment it is readable, not after the thread's wake-up.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let spin = self.options.busy_poll;
        if spin.is_zero() || timeout.is_some_and(|t| t.is_zero()) {
            return poll(&mut self.poll, events, timeout);
        }
        let spin = timeout.map_or(spin, |t| t.min(spin));
        let start = Instant::now();
        loop {
            poll(&mut self.poll, events, Some(Duration::ZERO))?;
            if !events.is_empty() {
                return Ok(());
            }
            let spun = start.elapsed();
            if spun >= spin {
                return poll(
                    &mut self.poll,
                    events,
                    timeout.map(|t| t.saturating_sub(spun)),
                );
            }
        }
    }

    /// Services every marked stream, then fires due timers and services the streams they
    /// touched. Input goes first: a deadline that passed while the loop was not turning (a
    /// slow handler, an application busy between turns of an embedded loop) fires only if
    /// what it waited for is not already in the socket — an answer is read before its
    /// request times out, a Close before the close timer, data before the idle timer. The
    /// clock is read once for the first stream and again before each further one: every
    /// stream's input is stamped with the time its service began, the timers
    /// take the last stream's time (a deadline due within a service fires at the next turn,
    /// which then does not wait), and a wake-up for one stream (on a paced feed, one a
    /// message) reads the clock once.
    pub(crate) fn service_ready(&mut self) {
        let now = self.service_marked(Instant::now(), 0);
        // Streams left with unread input or undelivered events are marked for the next
        // iteration already; the timers' own marks follow them and are serviced now.
        let carried = self.ready.len();
        self.fire_timers(now);
        if self.ready.len() > carried {
            self.service_marked(now, carried);
        }
    }

    /// Services the streams marked from index `from` on (earlier marks stay for the next
    /// iteration); returns the time the last service began (`now` if none).
    #[inline(always)]
    fn service_marked(&mut self, mut now: Instant, from: usize) -> Instant {
        let mut servicing = std::mem::take(&mut self.servicing);
        if from == 0 {
            // Every mark: the lists trade places (no copy on a wake-up's path).
            std::mem::swap(&mut servicing, &mut self.ready);
        } else {
            servicing.extend(self.ready.drain(from..));
        }
        for (i, &id) in servicing.iter().enumerate() {
            if let Some(e) = self.streams.get_mut(id) {
                e.queued = false;
            }
            if i > 0 {
                now = Instant::now();
            }
            self.service_contained(id, now);
        }
        servicing.clear();
        self.servicing = servicing;
        now
    }

    /// [`service`](Self::service), a panic in it — a handler's, mostly — contained to the
    /// stream: that stream is dropped, the loop and its other streams go on. Uncontained, one
    /// handler's panic (a parser's `unwrap` on a rare message) unwound the loop's thread and
    /// ended every stream on it without a word to their handlers; further calls said
    /// `LoopGone`. Handlers are called only in their own stream's service, so the panic is
    /// that stream's.
    #[inline(always)]
    fn service_contained(&mut self, id: StreamId, now: Instant) {
        let serviced = catch_unwind(AssertUnwindSafe(|| self.service(id, now)));
        if serviced.is_err() {
            self.drop_panicked(id, now);
        }
    }

    /// Drops a stream whose service panicked. Its handler is not called again (its state is
    /// whatever the panic left); the stream is crashed first so that its statistics say so,
    /// its socket is closed with it, and callers awaiting its answers get `NoStream`.
    #[cold]
    #[inline(never)]
    fn drop_panicked(&mut self, id: StreamId, now: Instant) {
        if let Some(mut e) = self.streams.remove(id) {
            let host = e.stream.endpoint().host.clone();
            tracing::error!(%host, "stream service panicked (its handler?): stream dropped");
            e.stream.crash("panicked in its service", now);
            for reply in e.awaited.take_all() {
                let _ = reply.send(Err(LoopError::NoStream));
            }
        }
    }

    /// Queues `id` for service in this iteration (once).
    fn mark(&mut self, id: StreamId) {
        if let Some(e) = self.streams.get_mut(id) {
            if !e.queued {
                e.queued = true;
                self.ready.push(id);
            }
        }
    }

    /// Zero while a stream still has unread input or commands wait; else until the earliest
    /// deadline, `None` if there is none (a loop of quiet streams that gave their read
    /// memory back sleeps until something happens). A stream whose events wait for room in
    /// its channel needs no turn before its consumer takes them, which wakes the loop.
    fn poll_timeout(&mut self) -> Option<Duration> {
        let mut more_input = false;
        for id in &self.ready {
            if let Some(e) = self.streams.get_mut(*id) {
                more_input |= e.readable && e.pending.is_empty();
            }
        }
        if more_input || self.commands_left {
            return Some(Duration::ZERO);
        }
        self.deadlines
            .next()
            .map(|earliest| earliest.saturating_duration_since(Instant::now()))
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(entry) = self.deadlines.pop_due(now) {
            let (index, generation) = entry.1;
            let id = self.streams.id(index, generation);
            if let Some(e) = self.streams.get_mut(id) {
                if self.deadlines.settle(entry, &mut e.deadline, now) {
                    // Reads wait for the application: the peer is not what is silent.
                    if !e.pending.is_empty() {
                        e.stream.handle_reads_held(now);
                    }
                    e.stream.handle_timeout(now);
                    if e.stream.poll_read_memory_released() {
                        release_quiet_memory(e, now);
                    }
                    fall_back_if_due(e, self.poll.registry(), id, now);
                    self.mark(id);
                }
            }
        }
    }

    /// Returns false on shutdown.
    pub(crate) fn command(&mut self, cmd: Command<H>) -> bool {
        let now = Instant::now();
        if let Some(id) = cmd.stream() {
            self.mark(id);
        }
        match cmd {
            Command::Connect(config, delivery, reply) => {
                let result = Stream::new(*config, os_seed(), now).map(|stream| {
                    let stats = stream.stats_handle();
                    let entry = Entry {
                        stream,
                        sock: None,
                        delivery,
                        pending: VecDeque::new(),
                        awaited: AwaitedAnswers::new(),
                        readable: false,
                        deadline: StreamDeadline::default(),
                        queued: false,
                        addrs: Vec::new(),
                        trying: None,
                        fallback_at: None,
                    };
                    (self.streams.insert(entry), stats)
                });
                if let Ok((id, _)) = &result {
                    self.attach_channel(*id);
                    self.mark(*id);
                }
                let _ = reply.send(result.map_err(LoopError::from));
            }
            Command::Stop(id) => {
                self.with(id, |e| e.stream.stop(now));
            }
            Command::Crash(id, reason) => {
                self.with(id, |e| e.stream.crash(&reason, now));
            }
            Command::Subscribe(id, streams, reply) => {
                let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
                let r = self.with(id, |e| {
                    e.stream.subscribe(&refs, now).map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::Unsubscribe(id, streams, reply) => {
                let refs: Vec<&str> = streams.iter().map(String::as_str).collect();
                let r = self.with(id, |e| {
                    e.stream.unsubscribe(&refs, now).map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::ListSubscriptions(id, reply) => {
                let r = self.with(id, |e| {
                    e.stream.list_subscriptions(now).map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::Subscriptions(id, reply) => {
                let r = self.with(id, |e| {
                    e.stream.subscriptions().map(str::to_owned).collect()
                });
                let _ = reply.send(r.ok_or(LoopError::NoStream));
            }
            Command::SubscribeMarkets(id, sub, reply) => {
                let r = self.with(id, |e| {
                    e.stream
                        .subscribe_markets(sub, now)
                        .map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::SubscribeOrders(id, sub, reply) => {
                let r = self.with(id, |e| {
                    e.stream.subscribe_orders(sub, now).map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::SetBetfairAuth(id, auth, reply) => {
                let r = self.with(id, |e| {
                    e.stream.set_betfair_auth(auth).map_err(LoopError::from)
                });
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::SendText(id, text, reply) => {
                let r = self.with(id, |e| e.stream.send_text(&text).map_err(LoopError::from));
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::SendBinary(id, data, reply) => {
                let r = self.with(id, |e| e.stream.send_binary(&data).map_err(LoopError::from));
                let _ = reply.send(r.unwrap_or(Err(LoopError::NoStream)));
            }
            Command::Request(id, method, params, reply) => {
                let entry = self.streams.get_mut(id);
                match entry {
                    Some(e) => match e.stream.request(&method, params.as_deref(), now) {
                        Ok(rid) => {
                            e.awaited.insert(rid, reply);
                        }
                        Err(err) => {
                            let _ = reply.send(Err(err.into()));
                        }
                    },
                    None => {
                        let _ = reply.send(Err(LoopError::NoStream));
                    }
                }
            }
            Command::Resolved(id, result) => self.resolved(id, result),
            Command::Looked(host, port, result) => {
                for id in self.resolver.finished(host, port) {
                    self.mark(id);
                    self.resolved(id, result.clone());
                }
            }
            Command::Shutdown => {
                self.stop_all(now);
                return false;
            }
        }
        true
    }

    /// At shutdown: every stream is stopped, and what that has it send — a WebSocket Close
    /// — is written if its socket takes it now, with its queued events handed on; then the
    /// loop ends without waiting for the peers' answers. A `stop` sent just before the
    /// shutdown used to be dropped with the stream: the server saw the connection end
    /// without a Close.
    fn stop_all(&mut self, now: Instant) {
        for id in self.streams.ids() {
            let stopped = catch_unwind(AssertUnwindSafe(|| {
                if let Some(e) = self.streams.get_mut(id) {
                    e.stream.stop(now);
                    pump(e, &mut self.resolver, id, self.poll.registry());
                    deliver(e);
                }
            }));
            if stopped.is_err() {
                self.drop_panicked(id, now);
            }
        }
    }

    /// A stream delivering to an [`event_channel`](crate::event_channel) or a
    /// [`shared_event_channel`](crate::shared_event_channel): its consumer wakes the loop
    /// when it makes room, and dropping the receiver stops the stream.
    fn attach_channel(&mut self, id: StreamId) {
        let Some(e) = self.streams.get_mut(id) else {
            return;
        };
        if matches!(e.delivery, Delivery::Handler(_) | Delivery::Lend(_)) {
            return;
        }
        let (commands, doorbell) = (self.loopback.clone(), self.doorbell.clone());
        let stop = Box::new(move || {
            if commands.send(Command::Stop(id)).is_ok() {
                let _ = doorbell.ring();
            }
        });
        match &mut e.delivery {
            Delivery::Channel(tx) => tx.attach(self.doorbell.waker(), stop),
            Delivery::Shared(tx) => tx.attach(id, self.doorbell.waker(), stop),
            Delivery::Handler(_) | Delivery::Lend(_) => {}
        }
    }

    fn with<T>(&mut self, id: StreamId, f: impl FnOnce(&mut Entry<H>) -> T) -> Option<T> {
        self.streams.get_mut(id).map(f)
    }

    fn resolved(&mut self, id: StreamId, result: Result<Vec<SocketAddr>, String>) {
        let now = Instant::now();
        let registry = self.poll.registry();
        let Some(e) = self.streams.get_mut(id) else {
            return;
        };
        // A stream that connects already (addresses from an earlier attempt's lookup that
        // outlived its connect timeout came first) keeps its connect.
        if !matches!(
            e.stream.state(),
            feedwire_core::StreamState::Connecting { .. }
        ) || e.sock.is_some()
        {
            return;
        }
        match result {
            Ok(mut addrs) => {
                addrs.reverse(); // `pop` takes them in the resolver's order
                e.addrs = addrs;
                connect_next(e, registry, id, now, String::from("no address"));
            }
            Err(reason) => e.stream.handle_connect_failed(&reason, now),
        }
    }

    /// Writability: completes a pending TCP connect, then flushes queued bytes.
    fn on_writable(&mut self, id: StreamId) {
        let now = Instant::now();
        let tls_config = self.tls.clone();
        let registry = self.poll.registry();
        let Some(e) = self.streams.get_mut(id) else {
            return;
        };
        let Some(sock) = e.sock.as_mut() else { return };
        if sock.tcp_connecting() {
            match sock.tcp.take_error() {
                Ok(None) if sock.tcp.peer_addr().is_ok() => {}
                Ok(None) => return, // not connected yet
                Ok(Some(err)) | Err(err) => {
                    e.sock = None;
                    let reason = match e.trying {
                        Some(a) => format!("connect {a}: {err}"),
                        None => format!("connect: {err}"),
                    };
                    return connect_next(e, registry, id, now, reason);
                }
            }
            e.fallback_at = None;
            let _ = sock.tcp.set_nodelay(true);
            sock.reads.enable(&sock.tcp);
            let endpoint = e.stream.endpoint().clone();
            if endpoint.scheme.is_tls() {
                match TlsSession::new(tls_config, &endpoint.host) {
                    Ok(t) => sock.tls = Some(Box::new(t)),
                    Err(err) => {
                        e.sock = None;
                        return e.stream.handle_tls_error(&err, now);
                    }
                }
            } else {
                sock.ready = true;
                e.stream.handle_connected(now);
            }
        }
        flush(e, registry, id);
    }

    /// Everything one stream needs after any input: read, pump outputs, deliver, re-arm.
    fn service(&mut self, id: StreamId, now: Instant) {
        let budget = self.options.read_budget;
        let Some(e) = self.streams.get_mut(id) else {
            return;
        };
        if e.readable && e.pending.is_empty() {
            read(e, budget, &self.doorbell, now);
        }
        set_low_water(e, now);
        pump(e, &mut self.resolver, id, self.poll.registry());
        deliver(e);
        follow_consumer(e, self.poll.registry(), id);
        let deadline = match (e.stream.poll_timeout(), e.fallback_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.deadlines
            .set((id.index, id.generation), &mut e.deadline, deadline);
        let finished = e.stream.state().is_terminal() && e.pending.is_empty() && e.sock.is_none();
        let busy = (e.readable && e.sock.is_some()) || !e.pending.is_empty();
        if finished {
            self.streams.remove(id);
        } else if busy {
            // Budget spent or consumer behind: carry over to the next iteration.
            self.mark(id);
        }
    }
}

/// The stream went quiet and gave its read block back: the TLS session's ciphertext buffer
/// goes too, and so do the empty event queues' buffers (each with room for as many events
/// as a read once brought), the loop's and its own channel's.
#[cold]
fn release_quiet_memory<H>(e: &mut Entry<H>, now: Instant) {
    if let Some(tls) = e.sock.as_mut().and_then(|s| s.tls.as_deref_mut()) {
        tls.release_read_buffer();
        e.stream.set_tls_buffer_bytes(tls.buffer_capacity(), now);
    }
    if e.pending.is_empty() {
        e.pending = VecDeque::new();
    }
    if let Delivery::Channel(tx) = &e.delivery {
        tx.release_room();
    }
}

/// One `epoll_wait`; a signal's interruption counts as a wait that found nothing.
fn poll(poll: &mut Poll, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
    match poll.poll(events, timeout) {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
        _ => Ok(()),
    }
}
