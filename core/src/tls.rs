//! TLS for both transports, sans-IO: rustls's unbuffered client between the socket's bytes
//! and an engine's plaintext read buffer. The transport reads ciphertext into
//! [`TlsSession::read_buf`], reports it with [`TlsSession::handle_read`] (which decrypts
//! every complete record and moves the plaintext into the engine at once), encrypts the
//! engine's output with [`TlsSession::write_plaintext`] and writes
//! [`TlsSession::poll_transmit`] to the socket — after every `handle_read` too, not only after
//! writing: the handshake's last flight (the client's Finished, which a server may wait for
//! before it says anything) and replies such as key updates come out of reads. Certificate
//! verification is always on; a certificate that does not verify is a typed error, never a
//! fallback.
//!
//! Why the unbuffered API: rustls's buffered `ClientConnection` copies each received byte
//! into its own deframing buffer (4 KiB at a time) and shifts the unprocessed rest to the
//! front after every record. Here records are decrypted in place in the session's own
//! ciphertext buffer, and only a trailing partial record moves, once per read. rustls 0.23
//! still copies each record's plaintext into a `Vec` of its own before handing it out
//! (`ReadTraffic::next_record`; in-place decryption is its to-do): one allocation per record,
//! the only one per message on a TLS stream (`tests/tests/steady_state_allocations.rs`).

use std::sync::{Arc, OnceLock};

use bytes::{Buf, Bytes, BytesMut};
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::{ClientConfig, RootCertStore};

use crate::read_room::ReadRoom;

/// Ciphertext bytes offered per socket read, at least (one TLS record is at most ~16.7 KiB),
/// once the reads have ramped up from [`FIRST_READ`].
const CIPHERTEXT_READ: usize = 64 * 1024;

/// Ciphertext bytes offered by a session's first read and by the first after a release (one
/// page): reads double from here while they fill what they are offered, to
/// [`CIPHERTEXT_READ`] after four. The buffer is allocated whole with the session but zeroed
/// with the reads, so an idle connection touches a page of it, not 82 KB; a stream that wakes
/// from a quiet spell for a message allocates a page, not the whole buffer (zeroing 82 KB:
/// 2.5-3 µs before the message is read).
const FIRST_READ: usize = 4 * 1024;

/// The largest TLS record on the wire, bytes: a 5-byte header and up to 2^14 + 2048 bytes
/// of ciphertext (TLS 1.2's limit, RFC 5246 §6.2.3; TLS 1.3's is lower).
const MAX_RECORD: usize = 5 + (1 << 14) + 2048;

/// The ciphertext buffer's size, bytes, at most. Unprocessed ciphertext is at most one
/// partial record, or during a handshake a handshake message rustls is joining across
/// records (rustls refuses one over 64 KiB) and a partial record after it; reads still get
/// their room.
const INCOMING_LIMIT: usize = CIPHERTEXT_READ + 0x1_0000 + 2 * MAX_RECORD;

/// Plaintext held for a sink that does not take input yet (a stream not yet told it is
/// connected), bytes, at most. Data a server sends right after the handshake is well
/// below this; more is an error rather than memory without bound.
pub const HELD_PLAINTEXT_LIMIT: usize = 256 * 1024;

/// A TLS failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The host name is not a valid DNS name or IP address for SNI and verification.
    #[error("invalid TLS server name {0:?}")]
    InvalidServerName(String),
    /// rustls refused the connection: certificate verification, handshake failure, alert.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// The peer closed TCP without a TLS close_notify (truncation is possible).
    #[error("TLS connection closed without close_notify")]
    UnexpectedEof,
    /// More than [`HELD_PLAINTEXT_LIMIT`] bytes of plaintext arrived while the sink took
    /// none.
    #[error(
        "more than {HELD_PLAINTEXT_LIMIT} bytes of TLS plaintext arrived before the stream \
         took any"
    )]
    PlaintextNotTaken,
}

impl TlsError {
    /// Whether the peer's certificate failed verification.
    pub fn is_certificate_error(&self) -> bool {
        matches!(self, Self::Rustls(rustls::Error::InvalidCertificate(_)))
    }
}

/// A TLS failure as a stream reports it: comparable and cloneable, keeping what matters to
/// an operator (was it the certificate?) and rustls's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TlsFailure {
    /// The peer's certificate failed verification (unknown issuer, wrong name, expired, …).
    pub certificate: bool,
    /// What rustls said.
    pub message: String,
}

impl From<&TlsError> for TlsFailure {
    fn from(e: &TlsError) -> Self {
        Self {
            certificate: e.is_certificate_error(),
            message: e.to_string(),
        }
    }
}

/// Where decrypted bytes go: an engine's read buffer.
pub trait PlaintextSink {
    /// Space for the next plaintext bytes.
    fn read_buf(&mut self) -> &mut [u8];
    /// The room for the next plaintext bytes as the session fills it: by default
    /// [`read_buf`](Self::read_buf)'s bytes; a sink with an engine's read buffer behind it
    /// gives the same room as uninitialised memory ([`ReadRoom::Spare`]), which the session
    /// copies into with [`put_slice`](bytes::BufMut::put_slice) — so that a queueing stream's
    /// block is not zeroed before each lap.
    fn read_room(&mut self) -> ReadRoom<'_> {
        ReadRoom::Bytes(self.read_buf())
    }
    /// `n` bytes were written at the start of `read_buf` (or into `read_room`'s room).
    fn handle_read(&mut self, n: usize);
    /// Whether the engine takes input now (a closed stream takes none, nor does one not yet
    /// told it is connected).
    fn accepts_input(&self) -> bool {
        true
    }

    /// The session's own buffers hold `bytes` ([`TlsSession::buffer_capacity`]): told before
    /// each read's records are processed, for a sink that keeps statistics. Ignored by
    /// default.
    fn tls_buffer_bytes(&mut self, bytes: usize) {
        let _ = bytes;
    }

    /// Feeds bytes the caller already holds, in pieces no larger than one read, as a
    /// transport would; stops when the engine takes no more input. Returns the bytes taken.
    fn feed(&mut self, data: &[u8]) -> usize {
        let mut taken = 0;
        while taken < data.len() && self.accepts_input() {
            let rest = &data[taken..];
            let mut room = self.read_room();
            let n = room.len().min(rest.len());
            room.write(0, &rest[..n]);
            if n == 0 {
                break;
            }
            self.handle_read(n);
            taken += n;
        }
        taken
    }
}

/// A client TLS session over a transport the caller owns.
pub struct TlsSession {
    conn: UnbufferedClientConnection,
    /// Ciphertext read and not yet processed is `incoming[start..end]`: after
    /// [`handle_read`](Self::handle_read), at most one partial record (or, during the
    /// handshake, a handshake message rustls is joining across records).
    /// INVARIANT: `start <= end <= incoming.len() <= INCOMING_LIMIT`, zeroed once; at least
    /// `end + read_size` long after [`read_buf`](Self::read_buf). Allocated whole
    /// (`CIPHERTEXT_READ + MAX_RECORD`) with the session, lengthened (zeroed) with the reads;
    /// after [`release_read_buffer`](Self::release_read_buffer) empty, then allocated and
    /// lengthened with the reads.
    incoming: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes the next read is offered at least: [`FIRST_READ`] at the session's start and
    /// after a release, doubled by every read that filled its offer, to [`CIPHERTEXT_READ`].
    read_size: usize,
    /// Plaintext decrypted while the sink took no input, delivered before anything newer.
    held: BytesMut,
    /// Plaintext to encrypt once rustls allows application data (written during the
    /// handshake).
    unsent: BytesMut,
    /// A close_notify was asked for and not yet encrypted.
    close_wanted: bool,
    /// Ciphertext ready for the socket.
    outbox: BytesMut,
    /// The peer sent close_notify.
    closed_by_peer: bool,
    /// An error that happened while encrypting, reported by the next `handle_*` call.
    failed: Option<TlsError>,
}

/// A client configuration trusting the Mozilla root store (webpki-roots), TLS 1.2 and 1.3,
/// aws-lc-rs crypto: the same one for every caller in the process. Its session cache then serves
/// every stream that uses it — a second stream to a host, or a reconnect, resumes a session
/// another began (no certificate chain to check again) — and the roots are held once, where
/// a configuration per stream cost each stream about 15 KB on top of its connection.
pub fn default_tls_config() -> Arc<ClientConfig> {
    static SHARED: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    SHARED
        .get_or_init(|| tls_config_with_roots(mozilla_roots()))
        .clone()
}

/// The Mozilla root store (webpki-roots), to extend with a private CA.
pub fn mozilla_roots() -> RootCertStore {
    RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned())
}

/// A client configuration trusting exactly `roots` (private or test CAs), with rustls's
/// aws-lc-rs provider: its key exchanges offer X25519MLKEM768 first (post-quantum, hybrid
/// with X25519), which *ring*'s provider lacks — rustls deprecated that provider for it in
/// 0.23.48. A key share for X25519 goes in the same ClientHello, so a server without
/// ML-KEM costs no extra round trip. The hybrid's shares add about 1 KB to each side's first
/// flight and about 3 KB to an idle connection (32-33 against 29.5-29.7 KB, `many_streams
/// --tls` with and without `--x25519`); an application holding many idle streams can narrow the
/// provider's `kx_groups` to X25519 in a configuration of its own (`many_streams`'s
/// `x25519_only`).
pub fn tls_config_with_roots(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

impl TlsSession {
    /// Starts a session to `host` (SNI and the name the certificate must carry); the
    /// ClientHello is ready in [`poll_transmit`](Self::poll_transmit).
    pub fn new(config: Arc<ClientConfig>, host: &str) -> Result<Self, TlsError> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| TlsError::InvalidServerName(host.to_owned()))?;
        let conn = UnbufferedClientConnection::new(config, name)?;
        let mut session = Self {
            conn,
            // Allocated whole from the start: a stream is busy soon after its handshake, and
            // a buffer grown in steps cost 0.2 KB messages over TLS 3-5% more CPU
            // (bench/ANALYSIS.md). Zeroed with the reads, which start at a page: an idle
            // session touches only what it read into.
            incoming: Vec::with_capacity(CIPHERTEXT_READ + MAX_RECORD),
            start: 0,
            end: 0,
            read_size: FIRST_READ,
            held: BytesMut::new(),
            unsent: BytesMut::new(),
            close_wanted: false,
            outbox: BytesMut::new(),
            closed_by_peer: false,
            failed: None,
        };
        session.process(&mut HandshakeOnly)?;
        Ok(session)
    }

    /// Whether the handshake is still in progress (no application data yet).
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Bytes of memory the session's own buffers hold (their capacity): ciphertext in
    /// (81 KiB, more only while a handshake message spans records; none after
    /// [`release_read_buffer`](Self::release_read_buffer), then 4 KiB at the next read and
    /// growing while reads come back full), plaintext held or waiting to be encrypted,
    /// ciphertext not yet taken. rustls's own state is not counted.
    pub fn buffer_capacity(&self) -> usize {
        self.incoming.capacity()
            + self.held.capacity()
            + self.unsent.capacity()
            + self.outbox.capacity()
    }

    /// Whether the peer ended the TLS session with close_notify.
    pub fn is_closed_by_peer(&self) -> bool {
        self.closed_by_peer
    }

    /// The fewest ciphertext bytes worth waking up to read (≥ 1), given the plaintext bytes
    /// the stream needs before anything can complete
    /// ([`Stream::read_low_water`](crate::Stream::read_low_water)): each record carries at
    /// least as many bytes as it decrypts to, so that many minus the partial record already
    /// buffered is a lower bound. 1 during the handshake and while plaintext is held.
    pub fn read_low_water(&self, plaintext_wanted: usize) -> usize {
        if self.is_handshaking() || !self.held.is_empty() {
            return 1;
        }
        plaintext_wanted
            .saturating_sub(self.end - self.start)
            .max(1)
    }

    /// Space for the next ciphertext read: 4 KiB at the session's first read and the first
    /// after a release, doubling while reads fill what they are offered, to at least 64 KiB.
    /// Allocates the buffer when the session has none: ask once the socket is readable, not
    /// before a wait (see [`Stream::read_buf`](crate::Stream::read_buf)).
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.incoming.len() - self.end < self.read_size {
            // A partial record (at most ~16.7 KiB) moves once per read, not once per record.
            self.incoming.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.incoming.len() - self.end < self.read_size {
            // At the session's start (within the capacity allocated with it) and after a
            // release, with the reads: the full size has room for a partial record besides,
            // so that the buffer then stays as it is.
            let len = if self.read_size < CIPHERTEXT_READ {
                self.end + self.read_size
            } else if self.incoming.len() < CIPHERTEXT_READ + MAX_RECORD {
                (self.end + CIPHERTEXT_READ).max(CIPHERTEXT_READ + MAX_RECORD)
            } else {
                // Only a handshake message joined across records stays this long: grow once.
                INCOMING_LIMIT
            };
            self.incoming.reserve_exact(len - self.incoming.len());
            self.incoming.resize(len, 0);
        }
        debug_assert!(self.incoming.len() <= INCOMING_LIMIT);
        &mut self.incoming[self.end..]
    }

    /// Frees the ciphertext buffer if no partial record waits in it, and every other buffer
    /// that holds nothing (the outbox keeps the room of the largest flight it held, the
    /// ClientHello's, otherwise): for a transport holding many quiet streams. The next
    /// [`read_buf`](Self::read_buf) offers 4 KiB, and reads double from there while they
    /// come back full. Returns whether the ciphertext buffer was freed.
    pub fn release_read_buffer(&mut self) -> bool {
        for buf in [&mut self.outbox, &mut self.held, &mut self.unsent] {
            if buf.is_empty() {
                *buf = BytesMut::new();
            }
        }
        if self.start != self.end || self.incoming.capacity() == 0 {
            return false;
        }
        self.incoming = Vec::new();
        self.start = 0;
        self.end = 0;
        self.read_size = FIRST_READ;
        true
    }

    /// `n` ciphertext bytes arrived in [`read_buf`](Self::read_buf): decrypts every complete
    /// record and moves the plaintext into `sink` before returning. Plaintext a sink does
    /// not take (it is not connected yet, or closed) is held for
    /// [`flush_plaintext`](Self::flush_plaintext).
    pub fn handle_read(&mut self, n: usize, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        debug_assert!(self.end + n <= self.incoming.len());
        // Nothing moved `end` since `read_buf`: it offered `incoming.len() - end`.
        if n > 0 && n >= self.incoming.len() - self.end && self.read_size < CIPHERTEXT_READ {
            self.read_size = (2 * self.read_size).min(CIPHERTEXT_READ);
        }
        self.end = (self.end + n).min(self.incoming.len());
        self.process(sink)
    }

    /// Moves plaintext that arrived while the sink took no input into `sink`: call it when a
    /// sink starts accepting input (e.g. right after the stream learns it is connected), so
    /// that data that arrived with the last handshake records is not left waiting for the
    /// next read.
    pub fn flush_plaintext(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        self.feed_held(sink);
        self.process(sink)
    }

    /// Plaintext held while the sink took no input, to `sink` if it takes input now.
    fn feed_held(&mut self, sink: &mut impl PlaintextSink) {
        if !self.held.is_empty() && sink.accepts_input() {
            let taken = sink.feed(&self.held);
            self.held.advance(taken);
        }
    }

    /// The transport reached end of stream. Without a prior close_notify this is an error:
    /// the last bytes may have been cut off.
    pub fn handle_eof(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        self.flush_plaintext(sink)?;
        if self.closed_by_peer {
            Ok(())
        } else {
            Err(TlsError::UnexpectedEof)
        }
    }

    /// Encrypts `data` for sending (once the handshake allows application data; until then
    /// it waits, in order).
    pub fn write_plaintext(&mut self, data: &[u8]) {
        self.unsent.extend_from_slice(data);
        self.drive_output();
    }

    /// Queues a close_notify alert, after any plaintext written before it.
    pub fn send_close_notify(&mut self) {
        self.close_wanted = true;
        self.drive_output();
    }

    /// The next ciphertext to write to the socket.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if self.outbox.is_empty() {
            None
        } else {
            Some(self.outbox.split().freeze())
        }
    }

    /// Runs rustls without new input, so that written plaintext and a close_notify get
    /// encrypted; a failure is kept for the next `handle_*` call.
    fn drive_output(&mut self) {
        if self.failed.is_none() {
            if let Err(e) = self.process(&mut HandshakeOnly) {
                self.failed = Some(e);
            }
        }
    }

    /// Drives rustls over the unprocessed ciphertext until it needs more input: plaintext to
    /// `sink` (or held), handshake records and encrypted writes to the outbox. What was
    /// decrypted before an error is handed over all the same: it is not lost.
    fn process(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        if let Some(e) = self.failed.clone() {
            return Err(e);
        }
        sink.tls_buffer_bytes(self.buffer_capacity());
        self.process_records(sink)
    }

    /// The records' plaintext goes into the space one `read_buf` of the sink offered, record
    /// after record, and the sink hears of it — one `handle_read` — when that space is full
    /// or the records are done: one engine read however many records a socket read brought
    /// (a read costs the engine some 500 instructions besides its messages), one copy each.
    /// Plaintext held from before goes first; while the sink takes no input, plaintext is held.
    fn process_records(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        self.feed_held(sink);
        let mut space = ReadRoom::Bytes(&mut []);
        let mut filled = 0;
        let result = loop {
            let UnbufferedStatus { mut discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[self.start..self.end]);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    self.start += discard;
                    break Err(e.into());
                }
            };
            let mut done = false;
            match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    let mut failed = None;
                    while let Some(record) = traffic.next_record() {
                        let record = match record {
                            Ok(record) => record,
                            Err(e) => {
                                failed = Some(e.into());
                                break;
                            }
                        };
                        discard += record.discard;
                        let mut rest = record.payload;
                        while !rest.is_empty() {
                            if space.left(filled) == 0 {
                                // Full (or none yet): the sink hears of what it holds.
                                space = ReadRoom::Bytes(&mut []);
                                if filled > 0 {
                                    sink.handle_read(filled);
                                    filled = 0;
                                }
                                if self.held.is_empty() && sink.accepts_input() {
                                    space = sink.read_room();
                                }
                                if space.is_empty() {
                                    if let Err(e) = hold(&mut self.held, rest) {
                                        failed = Some(e);
                                    }
                                    break;
                                }
                            }
                            let n = space.left(filled).min(rest.len());
                            space.write(filled, &rest[..n]);
                            filled += n;
                            rest = &rest[n..];
                        }
                        if failed.is_some() {
                            break;
                        }
                    }
                    if let Some(e) = failed {
                        self.start += discard;
                        break Err(e);
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    // Asked with no room, rustls names the size: the outbox grows by exactly
                    // that. Room for a whole record each time left ~37 KiB of zeroed
                    // capacity behind in every connection for its lifetime (measured: 57 KB
                    // an idle TLS connection, 16 KB a plaintext one).
                    let mut need = 0;
                    loop {
                        let at = self.outbox.len();
                        self.outbox.resize(at + need, 0);
                        match encode.encode(&mut self.outbox[at..]) {
                            Ok(written) => {
                                self.outbox.truncate(at + written);
                                break;
                            }
                            Err(EncodeError::InsufficientSize(s)) => {
                                self.outbox.truncate(at);
                                need = s.required_size;
                            }
                            Err(EncodeError::AlreadyEncoded) => {
                                self.outbox.truncate(at);
                                break;
                            }
                        }
                    }
                }
                ConnectionState::TransmitTlsData(mut transmit) => {
                    // Encoded handshake records wait in the outbox, in order, until the
                    // transport takes them; rustls only needs to know they are on their way.
                    if let Some(mut traffic) = transmit.may_encrypt_app_data() {
                        if let Err(e) =
                            encrypt_unsent(&mut traffic, &mut self.unsent, &mut self.outbox)
                        {
                            break Err(e);
                        }
                    }
                    transmit.done();
                }
                ConnectionState::WriteTraffic(mut traffic) => {
                    if let Err(e) = encrypt_unsent(&mut traffic, &mut self.unsent, &mut self.outbox)
                    {
                        break Err(e);
                    }
                    if self.close_wanted {
                        self.close_wanted = false;
                        if let Err(e) = queue_close_notify(&mut traffic, &mut self.outbox) {
                            break Err(e);
                        }
                    }
                    done = true;
                }
                ConnectionState::PeerClosed => self.closed_by_peer = true,
                ConnectionState::Closed => {
                    self.closed_by_peer = true;
                    done = true;
                }
                // BlockedHandshake: more ciphertext is needed. Early data is a server's.
                _ => done = true,
            }
            self.start += discard;
            if self.closed_by_peer {
                // rustls reads nothing after close_notify; what follows is dropped so that
                // the buffer never fills with bytes nobody will process.
                self.start = self.end;
            }
            if done {
                break Ok(());
            }
        };
        if filled > 0 {
            sink.handle_read(filled);
        }
        result
    }
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("handshaking", &self.conn.is_handshaking())
            .field("unprocessed", &(self.end - self.start))
            .field("held", &self.held.len())
            .field("unsent", &self.unsent.len())
            .field("outbox", &self.outbox.len())
            .field("closed_by_peer", &self.closed_by_peer)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// `rest` of a record's plaintext, held for a sink that takes no input now (in order after
/// what is held already); more than [`HELD_PLAINTEXT_LIMIT`] is an error rather than memory
/// without bound.
fn hold(held: &mut BytesMut, rest: &[u8]) -> Result<(), TlsError> {
    if held.len() + rest.len() > HELD_PLAINTEXT_LIMIT {
        return Err(TlsError::PlaintextNotTaken);
    }
    held.extend_from_slice(rest);
    Ok(())
}

/// Encrypts everything in `unsent` into `outbox` (in records of up to 16 KiB).
fn encrypt_unsent<D>(
    traffic: &mut rustls::unbuffered::WriteTraffic<'_, D>,
    unsent: &mut BytesMut,
    outbox: &mut BytesMut,
) -> Result<(), TlsError> {
    if unsent.is_empty() {
        return Ok(());
    }
    // A record adds a header, the AEAD tag and the content type: 64 bytes covers any
    // suite; a key update rustls sends with the data is covered by the retry.
    let need = unsent.len() + (unsent.len() / (1 << 14) + 1) * 64;
    append_encrypted(outbox, need, |room| traffic.encrypt(unsent, room))?;
    unsent.clear();
    Ok(())
}

/// A close_notify alert into `outbox`: one small record.
fn queue_close_notify<D>(
    traffic: &mut rustls::unbuffered::WriteTraffic<'_, D>,
    outbox: &mut BytesMut,
) -> Result<(), TlsError> {
    append_encrypted(outbox, 64, |room| traffic.queue_close_notify(room))
}

/// Appends what `write` encrypts to `outbox`, offering `need` bytes of room first and, if
/// rustls asks for more, exactly what it asks for.
fn append_encrypted(
    outbox: &mut BytesMut,
    mut need: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, EncryptError>,
) -> Result<(), TlsError> {
    loop {
        let at = outbox.len();
        outbox.resize(at + need, 0);
        match write(&mut outbox[at..]) {
            Ok(written) => {
                outbox.truncate(at + written);
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) => {
                outbox.truncate(at);
                need = s.required_size;
            }
            Err(e) => {
                outbox.truncate(at);
                return Err(encrypt_error(e));
            }
        }
    }
}

fn encrypt_error(e: EncryptError) -> TlsError {
    match e {
        EncryptError::EncryptExhausted => TlsError::Rustls(rustls::Error::EncryptError),
        // Callers size the buffer from rustls's own answer; keep its words if it still
        // disagrees.
        other => TlsError::Rustls(rustls::Error::General(other.to_string())),
    }
}

/// A sink that takes nothing yet: for driving the TLS handshake before the stream is told it
/// is connected. Plaintext that arrives with the last handshake records stays in rustls until
/// [`TlsSession::flush_plaintext`] moves it.
#[derive(Debug, Default, Clone, Copy)]
pub struct HandshakeOnly;

impl PlaintextSink for HandshakeOnly {
    fn read_buf(&mut self) -> &mut [u8] {
        &mut []
    }

    fn handle_read(&mut self, _: usize) {}

    fn accepts_input(&self) -> bool {
        false
    }
}

impl PlaintextSink for crate::WebSocketClient {
    fn read_buf(&mut self) -> &mut [u8] {
        crate::WebSocketClient::read_buf(self)
    }

    fn read_room(&mut self) -> ReadRoom<'_> {
        ReadRoom::Spare(crate::WebSocketClient::read_spare(self))
    }

    fn handle_read(&mut self, n: usize) {
        crate::WebSocketClient::handle_read(self, n);
    }

    fn accepts_input(&self) -> bool {
        !matches!(self.state(), crate::State::Closed | crate::State::Failed)
    }
}

impl PlaintextSink for crate::LineClient {
    fn read_buf(&mut self) -> &mut [u8] {
        crate::LineClient::read_buf(self)
    }

    fn read_room(&mut self) -> ReadRoom<'_> {
        ReadRoom::Spare(crate::LineClient::read_spare(self))
    }

    fn handle_read(&mut self, n: usize) {
        crate::LineClient::handle_read(self, n);
    }

    fn accepts_input(&self) -> bool {
        !self.is_finished()
    }
}

/// A [`crate::Stream`] as a plaintext sink, with the time the bytes arrived.
#[derive(Debug)]
pub struct StreamInput<'a> {
    /// The stream.
    pub stream: &'a mut crate::Stream,
    /// When the ciphertext was read.
    pub now: std::time::Instant,
}

impl PlaintextSink for StreamInput<'_> {
    fn read_buf(&mut self) -> &mut [u8] {
        self.stream.read_buf()
    }

    fn read_room(&mut self) -> ReadRoom<'_> {
        self.stream.read_room()
    }

    fn handle_read(&mut self, n: usize) {
        self.stream.handle_read(n, self.now);
    }

    fn tls_buffer_bytes(&mut self, bytes: usize) {
        self.stream.set_tls_buffer_bytes(bytes, self.now);
    }

    fn accepts_input(&self) -> bool {
        self.stream.is_connected()
    }
}

/// [`StreamInput`] for a stream that lends its data messages to `handler` when there is one
/// (see [`crate::Stream::handle_read_lending`]). `H` is the handler's type: a concrete one
/// lets its `on_data` be inlined; by default any handler, called through its vtable.
pub struct LendingInput<'a, H: crate::DataHandler + ?Sized = dyn crate::DataHandler + 'a> {
    /// The stream.
    pub stream: &'a mut crate::Stream,
    /// When the ciphertext was read.
    pub now: std::time::Instant,
    /// Where data messages are lent; `None` queues them as events.
    pub handler: Option<&'a mut H>,
}

impl<H: crate::DataHandler + ?Sized> std::fmt::Debug for LendingInput<'_, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LendingInput")
            .field("stream", &self.stream)
            .field("now", &self.now)
            .field("lends", &self.handler.is_some())
            .finish()
    }
}

impl<H: crate::DataHandler + ?Sized> PlaintextSink for LendingInput<'_, H> {
    fn read_buf(&mut self) -> &mut [u8] {
        self.stream.read_buf()
    }

    fn read_room(&mut self) -> ReadRoom<'_> {
        self.stream.read_room()
    }

    fn handle_read(&mut self, n: usize) {
        self.stream
            .handle_read_lending(n, self.now, self.handler.as_deref_mut());
    }

    fn tls_buffer_bytes(&mut self, bytes: usize) {
        self.stream.set_tls_buffer_bytes(bytes, self.now);
    }

    fn accepts_input(&self) -> bool {
        self.stream.is_connected()
    }
}
