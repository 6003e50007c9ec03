//! TLS for the clients that take a stream they did not open: the peers and the limit get a
//! TCP connection wrapped in rustls (tokio-rustls on tokio, rustls's `StreamOwned` on
//! blocking sockets), with the target's configuration. feedwire's clients use their own TLS
//! layer with the same configuration.

use std::net::TcpStream;
use std::sync::Arc;

use feedwire_core::rustls::pki_types::ServerName;
use feedwire_core::rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::{err, Target};

fn server_name(target: &Target) -> Result<ServerName<'static>, String> {
    ServerName::try_from(target.host().to_owned()).map_err(|e| err("server name")(&e))
}

/// `sock` with a finished TLS handshake, for blocking clients.
pub(super) fn blocking(
    target: &Target,
    config: &Arc<ClientConfig>,
    mut sock: TcpStream,
) -> Result<StreamOwned<ClientConnection, TcpStream>, String> {
    let mut conn =
        ClientConnection::new(config.clone(), server_name(target)?).map_err(|e| err("tls")(&e))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| err("tls handshake")(&e))?;
    }
    Ok(StreamOwned::new(conn, sock))
}

/// `sock` with a finished TLS handshake, for tokio clients.
pub(super) async fn tokio(
    target: &Target,
    config: &Arc<ClientConfig>,
    sock: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    tokio_rustls::TlsConnector::from(config.clone())
        .connect(server_name(target)?, sock)
        .await
        .map_err(|e| err("tls handshake")(&e))
}
