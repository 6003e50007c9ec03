//! Opening a connection: DNS, TCP (`TCP_NODELAY`, optional buffer sizes), and the TLS
//! handshake through the core's shared TLS layer.

use std::sync::Arc;

use feedwire_core::rustls::ClientConfig;
use feedwire_core::{
    connect_order, Endpoint, HandshakeOnly, TlsError, TlsSession, WriteQueue, ADDRESS_FALLBACK,
};
use feedwire_sockopt::RecvLowWater;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{lookup_host, TcpSocket};

use crate::handle::TokioOptions;
use crate::socket::{Socket, Sweep};

/// A live connection: the socket, TLS if any, and bytes waiting to be written.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sock: Socket,
    /// Boxed: a plaintext stream's connection does not carry a session's 1.2 KB.
    pub(crate) tls: Option<Box<TlsSession>>,
    pub(crate) out: WriteQueue,
    /// `SO_RCVLOWAT`, kept at what the stream can use (`Driver::set_low_water`).
    pub(crate) low_water: RecvLowWater,
    /// How the socket is read and written (sweeping on a current-thread runtime).
    pub(crate) sweep: Sweep,
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// DNS or TCP, named by step.
    Connect(String),
    /// The TLS handshake failed (certificate verification included).
    Tls(TlsError),
}

impl From<String> for OpenError {
    fn from(s: String) -> Self {
        Self::Connect(s)
    }
}

/// Connects to `endpoint`; errors name the step that failed (DNS, connect, TLS).
pub(crate) async fn open(
    endpoint: Endpoint,
    tls: Arc<ClientConfig>,
    options: &TokioOptions,
) -> Result<Conn, OpenError> {
    let addrs = if endpoint.connect_to.is_empty() {
        let target = (endpoint.host.as_str(), endpoint.port);
        connect_order(
            lookup_host(target)
                .await
                .map_err(|e| format!("DNS {}: {e}", endpoint.host))?,
        )
    } else {
        endpoint.connect_to.clone()
    };
    let mut last = format!("DNS: no address for {}", endpoint.host);
    let mut sock = None;
    let count = addrs.len();
    for (i, addr) in addrs.into_iter().enumerate() {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| e.to_string())?;
        if let Some(n) = options.recv_buffer {
            socket.set_recv_buffer_size(n).map_err(|e| e.to_string())?;
        }
        if let Some(n) = options.send_buffer {
            socket.set_send_buffer_size(n).map_err(|e| e.to_string())?;
        }
        let attempt = socket.connect(addr);
        // Every address but the last has a while; the last, the stream's connect timeout.
        let result = if i + 1 < count {
            match tokio::time::timeout(ADDRESS_FALLBACK, attempt).await {
                Ok(result) => result,
                Err(_) => {
                    last = format!("connect {addr}: no answer within {ADDRESS_FALLBACK:?}");
                    continue;
                }
            }
        } else {
            attempt.await
        };
        match result {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = format!("connect {addr}: {e}"),
        }
    }
    let mut sock = sock.ok_or(OpenError::Connect(last))?;
    sock.set_nodelay(true).map_err(|e| e.to_string())?;
    let tls = if endpoint.scheme.is_tls() {
        let mut session = Box::new(TlsSession::new(tls, &endpoint.host).map_err(OpenError::Tls)?);
        while session.is_handshaking() {
            while let Some(c) = session.poll_transmit() {
                sock.write_all(&c)
                    .await
                    .map_err(|e| format!("TLS handshake write: {e}"))?;
            }
            if !session.is_handshaking() {
                break;
            }
            let n = sock
                .read(session.read_buf())
                .await
                .map_err(|e| format!("TLS handshake read: {e}"))?;
            if n == 0 {
                return Err(OpenError::Connect(
                    "TLS handshake: connection closed by peer".to_owned(),
                ));
            }
            session
                .handle_read(n, &mut HandshakeOnly)
                .map_err(OpenError::Tls)?;
        }
        // Finished messages may still be queued.
        while let Some(c) = session.poll_transmit() {
            sock.write_all(&c)
                .await
                .map_err(|e| format!("TLS handshake write: {e}"))?;
        }
        Some(session)
    } else {
        None
    };
    let sweep = Sweep::new(&sock, tls.is_some());
    Ok(Conn {
        sock: Socket::Registered(sock),
        tls,
        out: WriteQueue::default(),
        low_water: RecvLowWater::default(),
        sweep,
    })
}
