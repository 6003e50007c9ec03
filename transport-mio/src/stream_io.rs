//! One stream's slot in the loop — its socket and its core — and the I/O that moves bytes
//! and events between them: connect, read, write, hand events to the application.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use feedwire_core::{
    Answer, AwaitedAnswers, DataHandler, HandshakeOnly, LendingInput, ReadRoom, Stream,
    StreamEvent, StreamInput, TlsSession, TransportCommand, WriteQueue, ADDRESS_FALLBACK,
};
use feedwire_sockopt::{RecvLowWater, SweepingReads};
use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::deadlines::StreamDeadline;
use crate::doorbell::Doorbell;
use crate::handle::{Delivery, LoopError, Reply, StreamId};
use crate::resolver::Resolver;
use crate::slot::Slab;

/// A stream's mio token: the slot's generation above its index, so an event for a stream that
/// has ended and whose slot was reused finds no stream (a stale generation).
pub(crate) fn token(id: StreamId) -> Token {
    Token(((id.generation as usize) << 32) | id.index as usize)
}

/// The id a token of `streams`' stands for.
pub(crate) fn id_of<T>(token: Token, streams: &Slab<T>) -> StreamId {
    streams.id(token.0 as u32, (token.0 >> 32) as u32)
}

pub(crate) struct Sock {
    pub(crate) tcp: TcpStream,
    /// Boxed: a plaintext stream's entry does not carry a session's 1.2 KB.
    pub(crate) tls: Option<Box<TlsSession>>,
    pub(crate) out: WriteQueue,
    /// TCP connect completed (and TLS handshake, if any).
    pub(crate) ready: bool,
    /// Registered for readability: unless the stream's consumer is behind (see
    /// [`follow_consumer`]).
    pub(crate) readable_interest: bool,
    /// Registered for writability: until the TCP connect completes, then only while bytes
    /// wait in `out` (an idle stream gets no writable wake-ups).
    pub(crate) writable_interest: bool,
    /// The peer's end (or an error) was reported: read until the socket says so, a short
    /// read no longer means drained (the report does not come again).
    pub(crate) read_closed: bool,
    /// `SO_RCVLOWAT`, kept at what the stream can use (see `set_low_water`).
    pub(crate) low_water: RecvLowWater,
    /// Once connected, the first read after each readable event is made in blocking mode
    /// and takes what arrives while it copies (see [`SweepingReads`]).
    pub(crate) reads: SweepingReads,
}

pub(crate) struct Entry<H> {
    pub(crate) stream: Stream,
    pub(crate) sock: Option<Sock>,
    pub(crate) delivery: Delivery<H>,
    /// Events the channel had no room for yet.
    pub(crate) pending: VecDeque<StreamEvent>,
    /// Callers awaiting the answer to a request they sent.
    pub(crate) awaited: AwaitedAnswers<Reply<Bytes>>,
    /// Readable and not yet drained (edge-triggered readiness: `WouldBlock`, or a short read).
    pub(crate) readable: bool,
    pub(crate) deadline: StreamDeadline,
    /// Already in this iteration's service list.
    pub(crate) queued: bool,
    /// Resolved addresses not tried yet, last first: a refused connect moves to the next
    /// (`localhost` may resolve to `::1` before `127.0.0.1`).
    pub(crate) addrs: Vec<SocketAddr>,
    /// The address of the TCP connect under way (for its error's words: an unconnected
    /// socket has no peer address).
    pub(crate) trying: Option<SocketAddr>,
    /// While a TCP connect is under way and other addresses are left: when to give up on
    /// it and try the next ([`ADDRESS_FALLBACK`]).
    pub(crate) fallback_at: Option<Instant>,
}

impl Sock {
    /// The TCP connect has not completed yet: no TLS session is made and nothing is ready
    /// before it does.
    #[inline]
    pub(crate) fn tcp_connecting(&self) -> bool {
        !self.ready && self.tls.is_none()
    }
}

/// Starts a TCP connect to the next resolved address; when none is left, reports
/// `last_error` (the previous address's failure) to the stream.
pub(crate) fn connect_next<H>(
    e: &mut Entry<H>,
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
        e.trying = Some(addr);
        e.fallback_at = (!e.addrs.is_empty()).then(|| now + ADDRESS_FALLBACK);
        e.sock = Some(Sock {
            tcp,
            tls: None,
            out: WriteQueue::default(),
            ready: false,
            readable_interest: true,
            writable_interest: true,
            read_closed: false,
            low_water: RecvLowWater::default(),
            reads: SweepingReads::default(),
        });
        return;
    }
    e.fallback_at = None;
    e.stream.handle_connect_failed(&last_error, now);
}

/// A TCP connect that had [`ADDRESS_FALLBACK`] and did not complete: drops it and tries
/// the next address. Does nothing before its time, or once the connect completed.
pub(crate) fn fall_back_if_due<H>(
    e: &mut Entry<H>,
    registry: &mio::Registry,
    id: StreamId,
    now: Instant,
) {
    // The stream's own connect timeout may have ended the attempt in the same turn.
    let connecting = e.sock.as_ref().is_some_and(Sock::tcp_connecting)
        && matches!(
            e.stream.state(),
            feedwire_core::StreamState::Connecting { .. }
        );
    let due = e.fallback_at.is_some_and(|at| at <= now);
    if !(due && connecting) {
        return;
    }
    e.sock = None;
    let reason = match e.trying {
        Some(a) => format!("connect {a}: no answer within {ADDRESS_FALLBACK:?}"),
        None => format!("connect: no answer within {ADDRESS_FALLBACK:?}"),
    };
    connect_next(e, registry, id, now, reason);
}

/// Reads until the socket is drained, the budget is spent, the channel is full, or a command
/// waits; drives a TLS handshake first. Drained: `WouldBlock`, or a read that filled less
/// than it was offered — with edge-triggered readiness, bytes arriving after that read raise
/// a new event, so the read that would only find `WouldBlock` (a system call per wake-up; on
/// a paced stream, one per message) is not made. After the peer's end was reported, reads go
/// on until the socket says so.
pub(crate) fn read<H: DataHandler>(
    e: &mut Entry<H>,
    mut budget: usize,
    doorbell: &Doorbell,
    mut now: Instant,
) {
    let mut first = true;
    while budget > 0 {
        if doorbell.rung() {
            // A command first (a stop takes effect before more is read); the stream stays
            // readable and is read again after it, in the same wake-up's next turn.
            return;
        }
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
        if sock.tcp_connecting() {
            e.readable = false;
            return;
        }
        // Into the TLS session's buffer (ciphertext) or straight into the stream's: a sweeping
        // socket into its room as uninitialised memory (a queueing stream's block is not
        // zeroed a lap), else into the room as bytes.
        let mut room = match sock.tls.as_deref_mut() {
            Some(tls) => ReadRoom::Bytes(tls.read_buf()),
            None if sock.reads.is_enabled() => e.stream.read_room(),
            None => ReadRoom::Bytes(e.stream.read_buf()),
        };
        let offered = room.len();
        let tcp = &sock.tcp;
        let read = match &mut room {
            ReadRoom::Bytes(buf) => sock.reads.read(tcp, buf, |b| (&*tcp).read(b)),
            ReadRoom::Spare(spare) => sock.reads.read_spare(tcp, spare),
        };
        let n = match read {
            Ok(0) => {
                if let Some(tls) = sock.tls.as_deref_mut() {
                    let _ = tls.handle_eof(&mut StreamInput {
                        stream: &mut e.stream,
                        now,
                    });
                }
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
        // The service's time stamps its first read (a wake-up for one message reads the
        // clock once); a further read, after megabytes lent, is stamped anew: its
        // messages' `received` is when they were read.
        if !std::mem::take(&mut first) {
            now = Instant::now();
        }
        budget = budget.saturating_sub(n);
        let drained = n < offered && !sock.read_closed;
        match sock.tls.as_deref_mut() {
            None => {
                let lender = e.delivery.lender(e.pending.is_empty());
                e.stream.handle_read_lending(n, now, lender);
            }
            Some(tls) if !sock.ready => {
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
            }
            Some(tls) => {
                let mut input = LendingInput {
                    stream: &mut e.stream,
                    now,
                    handler: e.delivery.lender(e.pending.is_empty()),
                };
                if let Err(err) = tls.handle_read(n, &mut input) {
                    return e.stream.handle_tls_error(&err, now);
                }
            }
        }
        // A read that only lent data (nearly every one) queued nothing; the stream's end is
        // seen by `pump` after the reads.
        if e.stream.has_events() {
            collect(e);
        }
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
pub(crate) fn set_low_water<H>(e: &mut Entry<H>, now: Instant) {
    let Some(sock) = e.sock.as_mut().filter(|s| s.ready) else {
        return;
    };
    let wanted = e.stream.socket_low_water(sock.tls.as_deref());
    if let Err(err) = sock.reads.set_mark(&mut sock.low_water, &sock.tcp, wanted) {
        e.stream
            .handle_transport_error(&format!("SO_RCVLOWAT: {err}"), now);
    }
}

/// The core's outputs: bytes (through TLS) to the socket, transport commands, events.
pub(crate) fn pump<H: DataHandler + Send + 'static>(
    e: &mut Entry<H>,
    resolver: &mut Resolver<H>,
    id: StreamId,
    registry: &mio::Registry,
) {
    let stream = &mut e.stream;
    match e.sock.as_mut() {
        // Bounded: what a peer that does not read leaves unsent stays in the stream.
        Some(sock) => {
            sock.out
                .fill(|| stream.poll_transmit(), sock.tls.as_deref_mut());
        }
        None => while stream.poll_transmit().is_some() {},
    }
    flush(e, registry, id);
    while let Some(cmd) = e.stream.poll_transport() {
        match cmd {
            TransportCommand::Connect(endpoint) => {
                resolver.resolve(id, &endpoint);
            }
            TransportCommand::Disconnect => disconnect(e, registry),
        }
    }
    collect(e);
}

/// Lets the connection go: its last bytes out (best effort), then the socket closed.
/// Out of line: `pump` runs on every read, this once a connection.
#[cold]
#[inline(never)]
fn disconnect<H>(e: &mut Entry<H>, registry: &mio::Registry) {
    if let Some(mut sock) = e.sock.take() {
        if !matches!(e.stream.state(), feedwire_core::StreamState::Crashed(_)) {
            // Every byte the stream still holds for this connection (its Close frame): none
            // may be left to go out on the next one.
            let stream = &mut e.stream;
            sock.out
                .fill_for_close(|| stream.poll_transmit(), sock.tls.as_deref_mut());
            // Best effort, without blocking the loop: what the socket takes now.
            let (tcp, reads) = (&sock.tcp, &sock.reads);
            let _ = sock.out.write_with(|slices| {
                reads.write_vectored(tcp, slices, |b| (&*tcp).write_vectored(b))
            });
            let _ = sock.tcp.shutdown(std::net::Shutdown::Write);
        }
        let _ = registry.deregister(&mut sock.tcp);
    }
    e.readable = false;
}

/// Moves the core's events to the pending queue; awaited request answers go to their callers.
pub(crate) fn collect<H: DataHandler>(e: &mut Entry<H>) {
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
        let unclaimed = e.awaited.claim(ev, |reply, answer| {
            let _ = reply.send(match answer {
                Answer::Response { payload, .. } => Ok(payload),
                Answer::TimedOut => Err(LoopError::TimedOut),
                Answer::Lost => Err(LoopError::ConnectionLost),
            });
        });
        e.pending.extend(unclaimed);
    }
    if e.stream.state().is_terminal() {
        e.awaited.clear();
    }
}

/// Hands pending events to the handler or channel.
pub(crate) fn deliver<H: DataHandler>(e: &mut Entry<H>) {
    if e.pending.is_empty() {
        return;
    }
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
            if tx.send(&mut e.pending).is_err() {
                // Nobody listens any more: stop the stream.
                e.pending.clear();
                if !e.stream.state().is_terminal() {
                    e.stream.stop(Instant::now());
                }
            }
        }
        Delivery::Shared(tx) => {
            if tx.send(&mut e.pending).is_err() {
                // Nobody listens any more: stop the stream.
                e.pending.clear();
                if !e.stream.state().is_terminal() {
                    e.stream.stop(Instant::now());
                }
            }
        }
    }
}

/// Writes queued bytes, vectored, until `WouldBlock`; asks for a writable event only while
/// something is left.
pub(crate) fn flush<H>(e: &mut Entry<H>, registry: &mio::Registry, id: StreamId) {
    let Some(sock) = e.sock.as_mut() else { return };
    if sock.tcp_connecting() {
        return;
    }
    if let Some(tls) = sock.tls.as_deref_mut() {
        while let Some(c) = tls.poll_transmit() {
            sock.out.push(c);
        }
    }
    // While a write empties the queue, take more from the stream (a backlog held back while
    // the peer was not reading) and write again.
    let stream = &mut e.stream;
    loop {
        let (tcp, reads) = (&sock.tcp, &sock.reads);
        if let Err(err) = sock
            .out
            .write_with(|slices| reads.write_vectored(tcp, slices, |b| (&*tcp).write_vectored(b)))
        {
            return stream.handle_transport_error(&err.to_string(), Instant::now());
        }
        if !sock
            .out
            .refill(|| stream.poll_transmit(), sock.tls.as_deref_mut())
        {
            break;
        }
    }
    let (readable, writable) = (sock.readable_interest, !sock.out.is_empty());
    if let Err(err) = set_interest(sock, registry, id, readable, writable) {
        e.stream
            .handle_transport_error(&err.to_string(), Instant::now());
    }
}

/// While the stream's consumer is behind, its socket is not read (`read` waits for the
/// pending events to go), and it is not registered for readability either: under
/// edge-triggered readiness every segment that arrived meanwhile woke the loop for nothing,
/// a turn each until the receive window closed. Registered again once the consumer took
/// them, the socket reports what arrived meanwhile.
pub(crate) fn follow_consumer<H>(e: &mut Entry<H>, registry: &mio::Registry, id: StreamId) {
    let Some(sock) = e.sock.as_mut() else { return };
    let readable = e.pending.is_empty();
    if readable == sock.readable_interest {
        return;
    }
    let writable = sock.writable_interest;
    if let Err(err) = set_interest(sock, registry, id, readable, writable) {
        e.stream
            .handle_transport_error(&err.to_string(), Instant::now());
    }
}

/// Registers `sock` for what is wanted, when that changed; wanting neither deregisters it
/// (`epoll` has no empty interest), and registering it again reports the readiness it has.
fn set_interest(
    sock: &mut Sock,
    registry: &mio::Registry,
    id: StreamId,
    readable: bool,
    writable: bool,
) -> std::io::Result<()> {
    if (readable, writable) == (sock.readable_interest, sock.writable_interest) {
        return Ok(());
    }
    let registered = sock.readable_interest || sock.writable_interest;
    let interest = match (readable, writable) {
        (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
        (true, false) => Some(Interest::READABLE),
        (false, true) => Some(Interest::WRITABLE),
        (false, false) => None,
    };
    match interest {
        Some(interest) if registered => registry.reregister(&mut sock.tcp, token(id), interest)?,
        Some(interest) => registry.register(&mut sock.tcp, token(id), interest)?,
        None => registry.deregister(&mut sock.tcp)?,
    }
    sock.readable_interest = readable;
    sock.writable_interest = writable;
    Ok(())
}
