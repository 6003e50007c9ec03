//! Peer WebSocket clients on tokio, each on a current-thread runtime with TCP_NODELAY, in the
//! configuration their documentation leads to, text validated as each does by default. Over
//! TLS each takes a tokio-rustls stream (every one of them accepts a stream it did not open).

use std::future::Future;
use std::pin::Pin;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::{err, runtime, Extra, Target, STALL};
use crate::recorder::Recorder;

/// Runs `body` on a fresh current-thread runtime, bounded by [`STALL`].
fn on_runtime<F>(body: F) -> Result<(Recorder, Extra), String>
where
    F: Future<Output = Result<Recorder, String>>,
{
    let rt = runtime()?;
    rt.block_on(async {
        let rec = tokio::time::timeout(STALL, body)
            .await
            .map_err(|_| "stalled".to_owned())??;
        Ok((rec, Extra::default()))
    })
}

async fn tcp(target: &Target) -> Result<TcpStream, String> {
    let s = TcpStream::connect(&target.addr)
        .await
        .map_err(|e| err("connect")(&e))?;
    s.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
    Ok(s)
}

/// A stream a peer can run on: plain TCP or TLS over it.
trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> PeerStream for S {}

/// Runs `$body` (an async block using `$stream`) on a TCP connection to the target, wrapped in
/// TLS when the target asks for it: one body, two stream types.
macro_rules! on_stream {
    ($target:expr, |$stream:ident| $body:expr) => {{
        let tcp = tcp($target).await?;
        match $target.tls.as_ref() {
            Some(config) => {
                let $stream = super::tls::tokio($target, config, tcp).await?;
                $body.await
            }
            None => {
                let $stream = tcp;
                $body.await
            }
        }
    }};
}

pub(super) fn tungstenite(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    on_runtime(async move {
        if target.tls.is_none() {
            // The documented entry point: connect_async does TCP (and TLS) itself.
            let (ws, _) = tokio_tungstenite::connect_async_with_config(&target.url, None, true)
                .await
                .map_err(|e| err("connect")(&e))?;
            return tungstenite_on(ws, rec).await;
        }
        on_stream!(target, |stream| async {
            let (ws, _) = tokio_tungstenite::client_async_with_config(&target.url, stream, None)
                .await
                .map_err(|e| err("connect")(&e))?;
            tungstenite_on(ws, rec).await
        })
    })
}

async fn tungstenite_on<S: PeerStream>(
    mut ws: tokio_tungstenite::WebSocketStream<S>,
    mut rec: Recorder,
) -> Result<Recorder, String> {
    use tokio_tungstenite::tungstenite::Message;
    while let Some(msg) = ws.next().await {
        let done = match msg.map_err(|e| err("read")(&e))? {
            Message::Text(t) => rec.on_message(t.len(), t.as_bytes()),
            Message::Binary(b) => rec.on_message(b.len(), &b),
            _ => false,
        };
        if done {
            return Ok(rec);
        }
    }
    Err("closed early".to_owned())
}

/// hyper's upgrade needs an executor for the connection task.
struct Spawn;

impl hyper::rt::Executor<Pin<Box<dyn Future<Output = ()> + Send>>> for Spawn {
    fn execute(&self, fut: Pin<Box<dyn Future<Output = ()> + Send>>) {
        tokio::task::spawn(fut);
    }
}

pub(super) fn fastwebsockets(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    on_runtime(async move { on_stream!(target, |stream| fastwebsockets_on(target, stream, rec)) })
}

async fn fastwebsockets_on<S: PeerStream>(
    target: &Target,
    stream: S,
    mut rec: Recorder,
) -> Result<Recorder, String> {
    use fastwebsockets::{FragmentCollector, OpCode};
    let request = hyper::Request::builder()
        .method("GET")
        .uri(&target.path)
        .header("Host", &target.addr)
        .header("Upgrade", "websocket")
        .header("Connection", "upgrade")
        .header(
            "Sec-WebSocket-Key",
            fastwebsockets::handshake::generate_key(),
        )
        .header("Sec-WebSocket-Version", "13")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| err("request")(&e))?;
    let (ws, _) = fastwebsockets::handshake::client(&Spawn, request, stream)
        .await
        .map_err(|e| err("handshake")(&e))?;
    // The collector reassembles fragments and validates text as UTF-8.
    let mut ws = FragmentCollector::new(ws);
    loop {
        let frame = ws.read_frame().await.map_err(|e| err("read")(&e))?;
        let done = match frame.opcode {
            OpCode::Text | OpCode::Binary => rec.on_message(frame.payload.len(), &frame.payload),
            OpCode::Close => return Err("closed early".to_owned()),
            _ => false,
        };
        if done {
            return Ok(rec);
        }
    }
}

pub(super) fn tokio_websockets(
    target: &Target,
    rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    on_runtime(async move { on_stream!(target, |stream| tokio_websockets_on(target, stream, rec)) })
}

async fn tokio_websockets_on<S: PeerStream>(
    target: &Target,
    stream: S,
    mut rec: Recorder,
) -> Result<Recorder, String> {
    let (mut ws, _) = tokio_websockets::ClientBuilder::new()
        .uri(&target.url)
        .map_err(|e| err("uri")(&e))?
        .connect_on(stream)
        .await
        .map_err(|e| err("connect")(&e))?;
    while let Some(msg) = ws.next().await {
        let msg = msg.map_err(|e| err("read")(&e))?;
        let done = if let Some(text) = msg.as_text() {
            rec.on_message(text.len(), text.as_bytes())
        } else if msg.is_binary() {
            let p = msg.as_payload();
            rec.on_message(p.len(), p)
        } else {
            false
        };
        if done {
            return Ok(rec);
        }
    }
    Err("closed early".to_owned())
}

pub(super) fn nexus_async_net(
    target: &Target,
    mut rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    use nexus_async_net::maybe_tls::MaybeTls;
    use nexus_async_net::ws::WsStreamBuilder;
    use nexus_async_net::Message;
    on_runtime(async move {
        // `MaybeTls` is the transport with nexus's direct-read fast path.
        let tcp = tcp(target).await?;
        let stream = match target.tls.as_ref() {
            Some(config) => MaybeTls::Tls(Box::new(super::tls::tokio(target, config, tcp).await?)),
            None => MaybeTls::Plain(tcp),
        };
        let (mut reader, _writer, mut stream) = WsStreamBuilder::new()
            .connect_with(stream, &target.url)
            .await
            .map_err(|e| err("connect")(&e))?;
        loop {
            let msg = reader
                .recv(&mut stream)
                .await
                .map_err(|e| err("read")(&e))?
                .ok_or("closed early")?;
            let done = match msg {
                Message::Text(t) => rec.on_message(t.len(), t.as_bytes()),
                Message::Binary(b) => rec.on_message(b.len(), b),
                Message::Close(_) => return Err("closed early".to_owned()),
                _ => false,
            };
            if done {
                return Ok(rec);
            }
        }
    })
}

pub(super) fn sockudo_ws(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    on_runtime(async move { on_stream!(target, |stream| sockudo_ws_on(target, stream, rec)) })
}

async fn sockudo_ws_on<S: PeerStream>(
    target: &Target,
    stream: S,
    mut rec: Recorder,
) -> Result<Recorder, String> {
    use sockudo_ws::client::WebSocketClient;
    use sockudo_ws::{Config, Http1, Message};
    let (mut ws, _) = WebSocketClient::<Http1>::new(Config::default())
        .connect(stream, &target.addr, &target.path, None)
        .await
        .map_err(|e| err("connect")(&e))?;
    while let Some(msg) = ws.next().await {
        let done = match msg.map_err(|e| err("read")(&e))? {
            Message::Text(t) | Message::Binary(t) => rec.on_message(t.len(), &t),
            Message::Close(_) => return Err("closed early".to_owned()),
            _ => false,
        };
        if done {
            return Ok(rec);
        }
    }
    Err("closed early".to_owned())
}
