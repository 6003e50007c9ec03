//! The loop: readiness, commands, deadlines; each stream's core in between.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use feedwire_core::rustls::ClientConfig;
use feedwire_core::{
    default_tls_config, os_seed, HandshakeOnly, LendingInput, RequestId, Stream, StreamEvent,
    StreamInput, TlsSession, TransportCommand, WriteQueue,
};
use feedwire_sockopt::RecvLowWater;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::deadlines::{Deadlines, StreamDeadline};
use crate::handle::{Command, Delivery, LoopError, MioOptions, Reply, StreamId};
use crate::resolver::Resolver;
use crate::slot::Slab;

const WAKER: Token = Token(usize::MAX);

/// Tokens with this bit set belong to the application's own sources (see
/// [`crate::user_token`]); stream tokens never have it (31-bit generations).
pub(crate) const USER_TOKEN_BIT: usize = 1 << (usize::BITS - 1);

/// A stream that read nothing for this long gives its read buffer back (idle memory).
const IDLE_RELEASE: Duration = Duration::from_secs(1);

fn token(id: StreamId) -> Token {
    Token(((id.generation as usize) << 32) | id.index as usize)
}

fn id_of(token: Token) -> StreamId {
    StreamId {
        index: token.0 as u32,
        generation: (token.0 >> 32) as u32,
    }
}

struct Sock {
    tcp: TcpStream,
    tls: Option<TlsSession>,
    out: WriteQueue,
    /// TCP connect completed (and TLS handshake, if any).
    ready: bool,
    /// Registered for writability: until the TCP connect completes, then only while bytes
    /// wait in `out` (an idle stream gets no writable wake-ups).
    writable_interest: bool,
    /// The peer's end (or an error) was reported: read until the socket says so, a short
    /// read no longer means drained (the report does not come again).
    read_closed: bool,
    /// `SO_RCVLOWAT`, kept at what the stream can use (see `set_low_water`).
    low_water: RecvLowWater,
}

struct Entry {
    stream: Stream,
    sock: Option<Sock>,
    delivery: Delivery,
    /// Events the channel had no room for yet.
    pending: VecDeque<StreamEvent>,
    waiting: HashMap<RequestId, Reply<Bytes>>,
    /// Readable and not yet drained (edge-triggered readiness: `WouldBlock`, or a short read).
    readable: bool,
    deadline: StreamDeadline,
    /// Already in this iteration's service list.
    queued: bool,
    /// Last time bytes were read; quiet streams give their read buffer back.
    last_read: Instant,
    /// Resolved addresses not tried yet, last first: a refused connect moves to the next
    /// (`localhost` may resolve to `::1` before `127.0.0.1`).
    addrs: Vec<SocketAddr>,
}

pub(crate) struct EventLoop {
    poll: Poll,
    commands: Receiver<Command>,
    resolver: Resolver,
    streams: Slab<Entry>,
    deadlines: Deadlines,
    /// Streams to service in this iteration: touched by readiness, a command or a timer, or
    /// left with unread input or undelivered events. Only these are visited, so a wake costs
    /// what happened, not the number of streams.
    ready: Vec<StreamId>,
    /// The list being serviced: swapped with `ready` each iteration, so that neither is
    /// allocated again once both have grown (an allocation per wake-up otherwise: per
    /// message, on a paced stream).
    servicing: Vec<StreamId>,
    /// When quiet streams' read buffers are released next.
    next_sweep: Instant,
    tls: Arc<ClientConfig>,
    options: MioOptions,
}

impl EventLoop {
    pub(crate) fn new(
        options: MioOptions,
        commands: Receiver<Command>,
        loopback: Sender<Command>,
    ) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        // mio allows one waker per Poll: the handle and the resolver threads share it.
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((
            Self {
                poll,
                commands,
                resolver: Resolver::new(loopback, waker.clone()),
                streams: Slab::default(),
                deadlines: Deadlines::default(),
                ready: Vec::new(),
                servicing: Vec::new(),
                next_sweep: Instant::now() + IDLE_RELEASE,
                tls: options.tls.clone().unwrap_or_else(default_tls_config),
                options,
            },
            waker,
        ))
    }

    /// Turns until shutdown (the loop's own thread).
    pub(crate) fn run(mut self) {
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
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.wait(events, timeout)?;
            for event in events.iter() {
                if event.token() == WAKER {
                    continue;
                }
                if event.token().0 & USER_TOKEN_BIT != 0 {
                    user(event);
                    continue;
                }
                let id = id_of(event.token());
                if let Some(entry) = self.streams.get_mut(id.index, id.generation) {
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        entry.readable = true;
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
            while let Ok(cmd) = self.commands.try_recv() {
                if !self.command(cmd) {
                    return Ok(false);
                }
            }
            self.service_ready();
            Ok(true)
        }
    }

    /// Waits for readiness for at most `timeout` (`None`: without a limit). With
    /// [`MioOptions::busy_poll`], the first part of the wait polls without sleeping: the
    /// data is taken the moment it is readable, not after the thread's wake-up.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let spin = self.options.busy_poll;
        if spin.is_zero() || timeout == Some(Duration::ZERO) {
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
                let rest = timeout.map(|t| t.saturating_sub(spun));
                return poll(&mut self.poll, events, rest);
            }
        }
    }

    /// Fires due timers and services every marked stream.
    pub(crate) fn service_ready(&mut self) {
        self.fire_timers();
        self.sweep_idle_buffers();
        let mut servicing = std::mem::take(&mut self.servicing);
        std::mem::swap(&mut servicing, &mut self.ready);
        for &id in &servicing {
            if let Some(e) = self.streams.get_mut(id.index, id.generation) {
                e.queued = false;
            }
            self.service(id);
        }
        servicing.clear();
        self.servicing = servicing;
    }

    /// Queues `id` for service in this iteration (once).
    fn mark(&mut self, id: StreamId) {
        if let Some(e) = self.streams.get_mut(id.index, id.generation) {
            if !e.queued {
                e.queued = true;
                self.ready.push(id);
            }
        }
    }

    /// Zero while a stream still has unread input; 1 ms while a channel is full (a consumer
    /// draining it does not wake us); else until the earliest deadline.
    fn poll_timeout(&mut self) -> Option<Duration> {
        let mut more_input = false;
        let mut undelivered = false;
        for id in &self.ready {
            if let Some(e) = self.streams.get_mut(id.index, id.generation) {
                more_input |= e.readable && e.pending.is_empty();
                undelivered |= !e.pending.is_empty();
            }
        }
        if more_input {
            return Some(Duration::ZERO);
        }
        let now = Instant::now();
        let timer = self
            .deadlines
            .next()
            .map(|t| t.saturating_duration_since(now));
        let retry = undelivered.then_some(Duration::from_millis(1));
        let sweep = Some(self.next_sweep.saturating_duration_since(now));
        [timer, retry, sweep].into_iter().flatten().min()
    }

    /// Once a second: streams quiet for [`IDLE_RELEASE`] release their read buffers, so an
    /// idle connection holds no read memory.
    fn sweep_idle_buffers(&mut self) {
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + IDLE_RELEASE;
        for (index, generation) in self.streams.ids() {
            if let Some(e) = self.streams.get_mut(index, generation) {
                if now.saturating_duration_since(e.last_read) >= IDLE_RELEASE {
                    e.stream.release_read_buffer(now);
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.deadlines.pop_due(now) {
            let (index, generation) = entry.1;
            if let Some(e) = self.streams.get_mut(index, generation) {
                if self.deadlines.settle(entry, &mut e.deadline, now) {
                    e.stream.handle_timeout(now);
                    self.mark(StreamId { index, generation });
                }
            }
        }
    }

    /// Returns false on shutdown.
    pub(crate) fn command(&mut self, cmd: Command) -> bool {
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
                        waiting: HashMap::new(),
                        readable: false,
                        deadline: StreamDeadline::default(),
                        queued: false,
                        last_read: now,
                        addrs: Vec::new(),
                    };
                    let (index, generation) = self.streams.insert(entry);
                    (StreamId { index, generation }, stats)
                });
                if let Ok((id, _)) = &result {
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
            Command::SubscribeMarkets(id, sub, reply) => {
                let r = self.with(id, |e| {
                    e.stream
                        .subscribe_markets(sub, now)
                        .map_err(LoopError::from)
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
            Command::Request(id, method, reply) => {
                let entry = self.streams.get_mut(id.index, id.generation);
                match entry {
                    Some(e) => match e.stream.request(&method, None, now) {
                        Ok(rid) => {
                            e.waiting.insert(rid, reply);
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
            Command::Shutdown => return false,
        }
        true
    }

    fn with<T>(&mut self, id: StreamId, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        self.streams.get_mut(id.index, id.generation).map(f)
    }

    fn resolved(&mut self, id: StreamId, result: Result<Vec<SocketAddr>, String>) {
        let now = Instant::now();
        let registry = self.poll.registry();
        let Some(e) = self.streams.get_mut(id.index, id.generation) else {
            return;
        };
        if !matches!(
            e.stream.state(),
            feedwire_core::StreamState::Connecting { .. }
        ) {
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
        let Some(e) = self.streams.get_mut(id.index, id.generation) else {
            return;
        };
        let Some(sock) = e.sock.as_mut() else { return };
        if !sock.ready && sock.tls.is_none() {
            match sock.tcp.take_error() {
                Ok(None) if sock.tcp.peer_addr().is_ok() => {}
                Ok(None) => return, // not connected yet
                Ok(Some(err)) | Err(err) => {
                    let addr = sock.tcp.peer_addr().ok();
                    e.sock = None;
                    let reason = match addr {
                        Some(a) => format!("connect {a}: {err}"),
                        None => format!("connect: {err}"),
                    };
                    return connect_next(e, registry, id, now, reason);
                }
            }
            let _ = sock.tcp.set_nodelay(true);
            let endpoint = e.stream.endpoint().clone();
            if endpoint.scheme.is_tls() {
                match TlsSession::new(tls_config, &endpoint.host) {
                    Ok(t) => sock.tls = Some(t),
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
    fn service(&mut self, id: StreamId) {
        let budget = self.options.read_budget;
        let now = Instant::now();
        let Some(e) = self.streams.get_mut(id.index, id.generation) else {
            return;
        };
        if e.readable && e.pending.is_empty() {
            read(e, budget, now);
        }
        set_low_water(e, now);
        pump(e, &mut self.resolver, id, self.poll.registry());
        deliver(e);
        self.deadlines.set(
            (id.index, id.generation),
            &mut e.deadline,
            e.stream.poll_timeout(),
        );
        let finished = e.stream.state().is_terminal() && e.pending.is_empty() && e.sock.is_none();
        let busy = (e.readable && e.sock.is_some()) || !e.pending.is_empty();
        if finished {
            self.streams.remove(id.index, id.generation);
        } else if busy {
            // Budget spent or consumer behind: carry over to the next iteration.
            self.mark(id);
        }
    }
}

/// One `epoll_wait`; a signal's interruption counts as a wait that found nothing.
fn poll(poll: &mut Poll, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
    match poll.poll(events, timeout) {
        Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
        _ => Ok(()),
    }
}

/// Starts a TCP connect to the next resolved address; when none is left, reports
/// `last_error` (the previous address's failure) to the stream.
fn connect_next(
    e: &mut Entry,
    registry: &mio::Registry,
    id: StreamId,
    now: Instant,
    mut last_error: String,
) {
    while let Some(addr) = e.addrs.pop() {
        let mut tcp = match TcpStream::connect(addr) {
            Ok(tcp) => tcp,
            Err(err) => {
                last_error = format!("connect {addr}: {err}");
                continue;
            }
        };
        if let Err(err) =
            registry.register(&mut tcp, token(id), Interest::READABLE | Interest::WRITABLE)
        {
            last_error = format!("register {addr}: {err}");
            continue;
        }
        e.sock = Some(Sock {
            tcp,
            tls: None,
            out: WriteQueue::default(),
            ready: false,
            writable_interest: true,
            read_closed: false,
            low_water: RecvLowWater::default(),
        });
        return;
    }
    e.stream.handle_connect_failed(&last_error, now);
}

/// Reads until the socket is drained, the budget is spent, or the channel is full; drives a
/// TLS handshake first. Drained: `WouldBlock`, or a read that filled less than it was
/// offered — with edge-triggered readiness, bytes arriving after that read raise a new
/// event, so the read that would only find `WouldBlock` (a system call per wake-up; on a
/// paced stream, one per message) is not made. After the peer's end was reported, reads go
/// on until the socket says so.
fn read(e: &mut Entry, mut budget: usize, now: Instant) {
    while budget > 0 {
        let Some(sock) = e.sock.as_mut() else {
            e.readable = false;
            return;
        };
        if sock.ready && !e.stream.is_connected() {
            // The stream ended (a Close, a protocol error): its socket goes with the next
            // transport command; bytes read now would never be taken.
            e.readable = false;
            return;
        }
        let drained;
        if let Some(tls) = sock.tls.as_mut() {
            let buf = tls.read_buf();
            let offered = buf.len();
            let n = match sock.tcp.read(buf) {
                Ok(0) => {
                    let _ = tls.handle_eof(&mut StreamInput {
                        stream: &mut e.stream,
                        now,
                    });
                    e.stream.handle_eof(now);
                    e.readable = false;
                    return;
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    e.readable = false;
                    return;
                }
                Err(err) => {
                    e.stream.handle_transport_error(&err.to_string(), now);
                    return;
                }
            };
            budget = budget.saturating_sub(n);
            e.last_read = now;
            drained = n < offered && !sock.read_closed;
            if !sock.ready {
                if let Err(err) = tls.handle_read(n, &mut HandshakeOnly) {
                    return e.stream.handle_tls_error(&err, now);
                }
                if !tls.is_handshaking() {
                    sock.ready = true;
                    e.stream.handle_connected(now);
                    if let Err(err) = tls.flush_plaintext(&mut StreamInput {
                        stream: &mut e.stream,
                        now,
                    }) {
                        return e.stream.handle_tls_error(&err, now);
                    }
                }
            } else if let Err(err) = tls.handle_read(
                n,
                &mut LendingInput {
                    stream: &mut e.stream,
                    now,
                    handler: e.delivery.lender(e.pending.is_empty()),
                },
            ) {
                return e.stream.handle_tls_error(&err, now);
            }
        } else {
            if !sock.ready {
                e.readable = false;
                return;
            }
            let buf = e.stream.read_buf();
            let offered = buf.len();
            match sock.tcp.read(buf) {
                Ok(0) => {
                    e.stream.handle_eof(now);
                    e.readable = false;
                    return;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    e.last_read = now;
                    drained = n < offered && !sock.read_closed;
                    let lender = e.delivery.lender(e.pending.is_empty());
                    e.stream.handle_read_lending(n, now, lender);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    e.readable = false;
                    return;
                }
                Err(err) => {
                    e.stream.handle_transport_error(&err.to_string(), now);
                    return;
                }
            }
        }
        collect(e);
        if !e.pending.is_empty() {
            deliver(e);
            if !e.pending.is_empty() {
                return; // the consumer is behind: stop reading this stream
            }
        }
        if drained {
            e.readable = false;
            return;
        }
    }
}

/// Keeps the socket's receive low-water mark at what the stream can use
/// ([`Stream::read_low_water`](feedwire_core::Stream::read_low_water)): a large frame's
/// rest wakes the loop once, not once per arriving piece. Checked after every service (a
/// read, a timer, a command), set only when it changes.
fn set_low_water(e: &mut Entry, now: Instant) {
    let Some(sock) = e.sock.as_mut().filter(|s| s.ready) else {
        return;
    };
    let wanted = e.stream.socket_low_water(sock.tls.as_ref());
    if let Err(err) = sock.low_water.set(&sock.tcp, wanted) {
        e.stream
            .handle_transport_error(&format!("SO_RCVLOWAT: {err}"), now);
    }
}

/// The core's outputs: bytes (through TLS) to the socket, transport commands, events.
fn pump(e: &mut Entry, resolver: &mut Resolver, id: StreamId, registry: &mio::Registry) {
    while let Some(chunk) = e.stream.poll_transmit() {
        if let Some(sock) = e.sock.as_mut() {
            match sock.tls.as_mut() {
                Some(tls) => tls.write_plaintext(&chunk),
                None => sock.out.push(chunk),
            }
        }
    }
    if let Some(sock) = e.sock.as_mut() {
        if let Some(tls) = sock.tls.as_mut() {
            while let Some(c) = tls.poll_transmit() {
                sock.out.push(c);
            }
        }
    }
    flush(e, registry, id);
    while let Some(cmd) = e.stream.poll_transport() {
        match cmd {
            TransportCommand::Connect(endpoint) => {
                resolver.resolve(id, &endpoint.host, endpoint.port);
            }
            TransportCommand::Disconnect => {
                if let Some(mut sock) = e.sock.take() {
                    if !matches!(e.stream.state(), feedwire_core::StreamState::Crashed(_)) {
                        if let Some(tls) = sock.tls.as_mut() {
                            tls.send_close_notify();
                            while let Some(c) = tls.poll_transmit() {
                                sock.out.push(c);
                            }
                        }
                        // Best effort, without blocking the loop: what the socket takes now.
                        let tcp = &mut sock.tcp;
                        let _ = sock.out.write_with(|slices| tcp.write_vectored(slices));
                        let _ = sock.tcp.shutdown(std::net::Shutdown::Write);
                    }
                    let _ = registry.deregister(&mut sock.tcp);
                }
                e.readable = false;
            }
        }
    }
    collect(e);
}

/// Moves the core's events to the pending queue; awaited request answers go to their callers.
fn collect(e: &mut Entry) {
    while let Some(ev) = e.stream.poll_event() {
        // The common case, data to a handler, goes straight through (no queue in between).
        if e.pending.is_empty() {
            match &mut e.delivery {
                Delivery::Handler(h) if matches!(ev, StreamEvent::Data { .. }) => {
                    h.on_event(ev);
                    continue;
                }
                Delivery::Lend(h) => {
                    if let Some(d) = ev.as_data() {
                        h.on_data(d);
                        continue;
                    }
                }
                _ => {}
            }
        }
        match ev {
            StreamEvent::Response {
                id,
                payload,
                is_error,
                kind,
            } => match e.waiting.remove(&id) {
                Some(reply) => {
                    let _ = reply.send(Ok(payload));
                }
                None => e.pending.push_back(StreamEvent::Response {
                    id,
                    kind,
                    payload,
                    is_error,
                }),
            },
            StreamEvent::RequestTimedOut { id, kind } => match e.waiting.remove(&id) {
                Some(reply) => {
                    let _ = reply.send(Err(LoopError::TimedOut));
                }
                None => e
                    .pending
                    .push_back(StreamEvent::RequestTimedOut { id, kind }),
            },
            other => e.pending.push_back(other),
        }
    }
    if e.stream.state().is_terminal() {
        e.waiting.clear();
    }
}

/// Hands pending events to the handler or channel.
fn deliver(e: &mut Entry) {
    match &mut e.delivery {
        Delivery::Handler(h) => {
            while let Some(ev) = e.pending.pop_front() {
                h.on_event(ev);
            }
        }
        Delivery::Lend(h) => {
            while let Some(ev) = e.pending.pop_front() {
                h.deliver(ev);
            }
        }
        Delivery::Channel(tx) => {
            while let Some(ev) = e.pending.pop_front() {
                match tx.try_send(ev) {
                    Ok(()) => {}
                    Err(TrySendError::Full(ev)) => {
                        e.pending.push_front(ev);
                        return;
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        // Nobody listens any more: stop the stream.
                        e.pending.clear();
                        if !e.stream.state().is_terminal() {
                            e.stream.stop(Instant::now());
                        }
                        return;
                    }
                }
            }
        }
    }
}

/// Writes queued bytes, vectored, until `WouldBlock`; asks for a writable event only while
/// something is left.
fn flush(e: &mut Entry, registry: &mio::Registry, id: StreamId) {
    let Some(sock) = e.sock.as_mut() else { return };
    if !sock.ready && sock.tls.is_none() {
        return;
    }
    if let Some(tls) = sock.tls.as_mut() {
        while let Some(c) = tls.poll_transmit() {
            sock.out.push(c);
        }
    }
    let tcp = &mut sock.tcp;
    if let Err(err) = sock.out.write_with(|slices| tcp.write_vectored(slices)) {
        return e
            .stream
            .handle_transport_error(&err.to_string(), Instant::now());
    }
    let want = !sock.out.is_empty();
    if want != sock.writable_interest {
        let interest = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if let Err(err) = registry.reregister(&mut sock.tcp, token(id), interest) {
            return e
                .stream
                .handle_transport_error(&err.to_string(), Instant::now());
        }
        sock.writable_interest = want;
    }
}
