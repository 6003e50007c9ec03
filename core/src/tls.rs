//! TLS for both transports, sans-IO: rustls's `ClientConnection` between the socket's bytes
//! and an engine's plaintext read buffer. The transport reads ciphertext into
//! [`TlsSession::read_buf`], reports it with [`TlsSession::handle_read`] (which moves every
//! decrypted byte into the engine at once), encrypts the engine's output with
//! [`TlsSession::write_plaintext`] and writes [`TlsSession::poll_transmit`] to the socket.
//! Certificate verification is always on; a certificate that does not verify is a typed
//! error, never a fallback.

use std::io::{self, Read, Write};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// Ciphertext bytes taken per socket read (one TLS record is at most ~16.7 KiB).
const CIPHERTEXT_READ: usize = 64 * 1024;

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
    /// `n` bytes were written at the start of `read_buf`.
    fn handle_read(&mut self, n: usize);
    /// Whether the engine still takes input (a closed stream takes none).
    fn accepts_input(&self) -> bool {
        true
    }

    /// Feeds bytes the caller already holds, in pieces no larger than one read, as a
    /// transport would; stops when the engine takes no more input.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.accepts_input() {
            let dst = self.read_buf();
            let n = dst.len().min(data.len());
            if n == 0 {
                return;
            }
            dst[..n].copy_from_slice(&data[..n]);
            self.handle_read(n);
            data = &data[n..];
        }
    }
}

/// A client TLS session over a transport the caller owns.
#[derive(Debug)]
pub struct TlsSession {
    conn: ClientConnection,
    /// INVARIANT: `inbox.len() == CIPHERTEXT_READ`, zeroed once.
    inbox: Vec<u8>,
    outbox: BytesMut,
    /// The peer sent close_notify.
    closed_by_peer: bool,
}

/// A client configuration trusting the Mozilla root store (webpki-roots), TLS 1.2 and 1.3,
/// ring crypto.
pub fn default_tls_config() -> Arc<ClientConfig> {
    tls_config_with_roots(mozilla_roots())
}

/// The Mozilla root store (webpki-roots), to extend with a private CA.
pub fn mozilla_roots() -> RootCertStore {
    RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned())
}

/// A client configuration trusting exactly `roots` (private or test CAs).
pub fn tls_config_with_roots(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
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
        let mut conn = ClientConnection::new(config, name)?;
        // The engine's transmit queue is what bounds outgoing memory (the transport drains
        // it only as fast as the socket takes bytes); rustls's own 64 KiB cap would make a
        // large message fail half-written.
        conn.set_buffer_limit(None);
        Ok(Self {
            conn,
            inbox: vec![0; CIPHERTEXT_READ],
            outbox: BytesMut::new(),
            closed_by_peer: false,
        })
    }

    /// Whether the handshake is still in progress (no application data yet).
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether the peer ended the TLS session with close_notify.
    pub fn is_closed_by_peer(&self) -> bool {
        self.closed_by_peer
    }

    /// Space for the next ciphertext read.
    pub fn read_buf(&mut self) -> &mut [u8] {
        &mut self.inbox
    }

    /// `n` ciphertext bytes arrived in [`read_buf`](Self::read_buf): decrypts them and moves
    /// all plaintext into `sink` before returning (rustls buffers only a bounded amount).
    pub fn handle_read(&mut self, n: usize, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        let mut offset = 0;
        while offset < n {
            let mut input = &self.inbox[offset..n];
            let taken = self
                .conn
                .read_tls(&mut input)
                .map_err(|e| rustls::Error::General(e.to_string()))?;
            offset += taken;
            self.conn.process_new_packets()?;
            self.deliver(sink)?;
            if taken == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Moves plaintext that rustls already decrypted into `sink`: call it when a sink starts
    /// accepting input (e.g. right after the stream learns it is connected), so that data
    /// that arrived with the last handshake records is not left waiting for the next read.
    pub fn flush_plaintext(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        self.deliver(sink)
    }

    /// The transport reached end of stream. Without a prior close_notify this is an error:
    /// the last bytes may have been cut off.
    pub fn handle_eof(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        let mut nothing: &[u8] = &[];
        let _ = self.conn.read_tls(&mut nothing);
        self.conn.process_new_packets()?;
        self.deliver(sink)?;
        if self.closed_by_peer {
            Ok(())
        } else {
            Err(TlsError::UnexpectedEof)
        }
    }

    /// Encrypts `data` for sending.
    pub fn write_plaintext(&mut self, data: &[u8]) {
        self.conn
            .writer()
            .write_all(data)
            .expect("the buffer limit is lifted in `new`, so rustls takes every byte");
    }

    /// Queues a close_notify alert.
    pub fn send_close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// The next ciphertext to write to the socket.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        while self.conn.wants_write() {
            let mut w = (&mut self.outbox).writer();
            if self.conn.write_tls(&mut w).is_err() {
                break;
            }
        }
        if self.outbox.is_empty() {
            None
        } else {
            Some(self.outbox.split().freeze())
        }
    }

    fn deliver(&mut self, sink: &mut impl PlaintextSink) -> Result<(), TlsError> {
        while sink.accepts_input() {
            let buf = sink.read_buf();
            match self.conn.reader().read(buf) {
                Ok(0) => {
                    self.closed_by_peer = true;
                    return Ok(());
                }
                Ok(n) => sink.handle_read(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(TlsError::UnexpectedEof)
                }
                Err(e) => return Err(rustls::Error::General(e.to_string()).into()),
            }
        }
        Ok(())
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

    fn handle_read(&mut self, n: usize) {
        self.stream.handle_read(n, self.now);
    }

    fn accepts_input(&self) -> bool {
        self.stream.is_connected()
    }
}

/// [`StreamInput`] for a stream that lends its data messages to `handler` when there is one
/// (see [`crate::Stream::handle_read_lending`]).
pub struct LendingInput<'a> {
    /// The stream.
    pub stream: &'a mut crate::Stream,
    /// When the ciphertext was read.
    pub now: std::time::Instant,
    /// Where data messages are lent; `None` queues them as events.
    pub handler: Option<&'a mut dyn crate::DataHandler>,
}

impl std::fmt::Debug for LendingInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LendingInput")
            .field("stream", &self.stream)
            .field("now", &self.now)
            .field("lends", &self.handler.is_some())
            .finish()
    }
}

impl PlaintextSink for LendingInput<'_> {
    fn read_buf(&mut self) -> &mut [u8] {
        self.stream.read_buf()
    }

    fn handle_read(&mut self, n: usize) {
        self.stream
            .handle_read_lending(n, self.now, self.handler.as_deref_mut());
    }

    fn accepts_input(&self) -> bool {
        self.stream.is_connected()
    }
}
