//! A blocking `std::net` driver for [`WebSocketClient`]: the simplest embedding, used by the
//! interop tests.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use feedwire_core::rustls::RootCertStore;
use feedwire_core::{
    os_seed, tls_config_with_roots, Error, Event, SendError, TlsSession, WebSocketClient, WsConfig,
};

/// A connected client on a blocking socket.
#[derive(Debug)]
pub struct BlockingClient {
    ws: WebSocketClient,
    sock: TcpStream,
}

impl BlockingClient {
    /// Connects to `url` and completes the handshake. The socket's read timeout bounds every
    /// wait (`read_timeout`), so a silent peer cannot hang a test.
    pub fn connect(url: &str, config: WsConfig, read_timeout: Duration) -> io::Result<Self> {
        let ws = WebSocketClient::new(url, config, os_seed()).map_err(io::Error::other)?;
        let endpoint = ws.endpoint();
        let sock = TcpStream::connect((endpoint.host.as_str(), endpoint.port))?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(read_timeout))?;
        let mut client = Self { ws, sock };
        match client.next_event()? {
            Some(Event::Opened(_)) => Ok(client),
            other => Err(io::Error::other(format!(
                "handshake did not open: {other:?}"
            ))),
        }
    }

    /// The engine, for commands (`send_text`, `close`, …). Call [`flush`](Self::flush) after.
    pub fn ws(&mut self) -> &mut WebSocketClient {
        &mut self.ws
    }

    /// Writes every queued chunk.
    pub fn flush(&mut self) -> io::Result<()> {
        while let Some(chunk) = self.ws.poll_transmit() {
            self.sock.write_all(&chunk)?;
        }
        Ok(())
    }

    /// Sends a text message and flushes.
    pub fn send_text(&mut self, text: &str) -> Result<(), Box<dyn std::error::Error>> {
        self.ws.send_text(text)?;
        Ok(self.flush()?)
    }

    /// Sends a binary message and flushes.
    pub fn send_binary(&mut self, data: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
        self.ws.send_binary(data)?;
        Ok(self.flush()?)
    }

    /// Starts the close handshake and flushes.
    pub fn close(&mut self, code: u16, reason: &str) -> Result<(), Box<dyn std::error::Error>> {
        self.ws
            .close(code, reason, Instant::now())
            .map_err(|e: SendError| Box::new(e))?;
        Ok(self.flush()?)
    }

    /// The next event, reading from the socket as needed. `None` once the connection is
    /// finished and every event was taken. A read timeout is an error.
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        loop {
            self.flush()?;
            if let Some(event) = self.ws.poll_event() {
                return Ok(Some(event));
            }
            if self.ws.is_finished() {
                return Ok(None);
            }
            if let Some(deadline) = self.ws.poll_timeout() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.ws.handle_timeout(Instant::now());
                    continue;
                }
                self.sock.set_read_timeout(Some(left))?;
            }
            match self.sock.read(self.ws.read_buf()) {
                Ok(0) => self.ws.handle_eof(),
                Ok(n) => self.ws.handle_read(n),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if self.ws.poll_timeout().is_none() {
                        return Err(e);
                    }
                    self.ws.handle_timeout(Instant::now());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Every message until the connection ends, and how it ended: its last event (`None`
    /// when it finished without one) or the transport error (a read timeout among them).
    /// Pings, Pongs and the start of the close are skipped.
    pub fn messages_until_end(&mut self) -> (Vec<Bytes>, io::Result<Option<Event>>) {
        let mut msgs = Vec::new();
        loop {
            match self.next_event() {
                Ok(Some(Event::Message(m))) => msgs.push(m.payload),
                Ok(Some(Event::Ping(_) | Event::Pong(_) | Event::CloseStarted { .. })) => {}
                end => return (msgs, end),
            }
        }
    }

    /// The failure that ended the connection, if any.
    pub fn error(&self) -> Option<&Error> {
        self.ws.error()
    }
}

/// The messages of a `wss://` stream at `url` (served at `addr`, its certificate signed by a
/// CA in `roots`), driven on a blocking socket through the shared TLS layer. Sleeps for `lag`
/// before every read (a reader that falls behind); returns after `until` messages or at the
/// end. Panics on a transport or TLS error: a test's driver.
pub fn tls_messages(
    url: &str,
    addr: SocketAddr,
    roots: RootCertStore,
    until: usize,
    lag: Duration,
) -> Vec<Bytes> {
    let mut ws = WebSocketClient::new(url, WsConfig::default(), os_seed()).unwrap();
    let mut tls = TlsSession::new(tls_config_with_roots(roots), &ws.endpoint().host).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut msgs = Vec::new();
    loop {
        while let Some(c) = ws.poll_transmit() {
            tls.write_plaintext(&c);
        }
        while let Some(c) = tls.poll_transmit() {
            sock.write_all(&c).unwrap();
        }
        while let Some(e) = ws.poll_event() {
            match e {
                Event::Message(m) => msgs.push(m.payload),
                Event::Closed { .. } | Event::Failed(_) => return msgs,
                _ => {}
            }
        }
        if msgs.len() >= until {
            return msgs;
        }
        std::thread::sleep(lag);
        match sock.read(tls.read_buf()).unwrap() {
            0 => {
                let _ = tls.handle_eof(&mut ws);
                ws.handle_eof();
            }
            n => tls.handle_read(n, &mut ws).unwrap(),
        }
    }
}
