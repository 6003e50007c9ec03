//! Interop against an independent implementation: a tokio-tungstenite server on 127.0.0.1
//! echoes to the feedwire core driven by blocking `std::net` sockets.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use feedwire_core::{CloseInitiator, Event, MessageKind, WsConfig};
use feedwire_tests::blocking::BlockingClient;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;

const TIMEOUT: Duration = Duration::from_secs(10);

/// How the server saw a connection end: `Ok` when the stream ended after a complete close
/// handshake.
type ServerReport = Result<(), String>;

/// Starts the echo server. Commands in text messages: `FRAG:<payload>` echoes the payload
/// as three fragments; `CLOSE-ME` makes the server start the close handshake; `PING-ME`
/// sends a ping and answers `got pong` once the pong arrives.
fn start_server() -> (SocketAddr, mpsc::Receiver<ServerReport>) {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (report_tx, report_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                let report_tx = report_tx.clone();
                tokio::spawn(async move {
                    let _ = report_tx.send(serve(stream).await);
                });
            }
        });
    });
    (addr_rx.recv().unwrap(), report_rx)
}

async fn serve(stream: tokio::net::TcpStream) -> ServerReport {
    let config = WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let mut ws = tokio_tungstenite::accept_async_with_config(stream, Some(config))
        .await
        .map_err(|e| e.to_string())?;
    let mut saw_close = false;
    while let Some(msg) = ws.next().await {
        match msg.map_err(|e| e.to_string())? {
            Message::Text(t) if t.as_str().starts_with("FRAG:") => {
                let payload = Bytes::copy_from_slice(&t.as_bytes()[5..]);
                let third = payload.len() / 3;
                let parts = [
                    payload.slice(..third),
                    payload.slice(third..2 * third),
                    payload.slice(2 * third..),
                ];
                for (i, part) in parts.into_iter().enumerate() {
                    let opcode = if i == 0 {
                        OpCode::Data(Data::Text)
                    } else {
                        OpCode::Data(Data::Continue)
                    };
                    ws.feed(Message::Frame(Frame::message(part, opcode, i == 2)))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                ws.flush().await.map_err(|e| e.to_string())?;
            }
            Message::Text(t) if t.as_str() == "CLOSE-ME" => {
                let frame = CloseFrame {
                    code: CloseCode::Normal,
                    reason: "server bye".into(),
                };
                ws.close(Some(frame)).await.map_err(|e| e.to_string())?;
            }
            Message::Text(t) if t.as_str() == "PING-ME" => ws
                .send(Message::Ping("hb".into()))
                .await
                .map_err(|e| e.to_string())?,
            Message::Pong(p) if p == "hb" => ws
                .send(Message::text("got pong"))
                .await
                .map_err(|e| e.to_string())?,
            m @ (Message::Text(_) | Message::Binary(_)) => {
                ws.send(m).await.map_err(|e| e.to_string())?
            }
            Message::Close(_) => saw_close = true,
            _ => {}
        }
    }
    if saw_close {
        Ok(())
    } else {
        Err("stream ended without a close frame".into())
    }
}

fn connect(addr: SocketAddr, config: WsConfig) -> BlockingClient {
    BlockingClient::connect(&format!("ws://{addr}/echo"), config, TIMEOUT)
        .expect("handshake with tungstenite")
}

fn next_message(client: &mut BlockingClient) -> (MessageKind, Bytes) {
    loop {
        match client.next_event().unwrap() {
            Some(Event::Message(m)) => return (m.kind, m.payload),
            Some(Event::Ping(_) | Event::Pong(_)) => {}
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

fn text_of(len: usize) -> String {
    "aé€𝄞"
        .chars()
        .cycle()
        .scan(0, |n, c| {
            *n += c.len_utf8();
            (*n <= len).then_some(c)
        })
        .collect()
}

#[test]
fn echoes_text_and_binary_from_0_bytes_to_1_mib() {
    let (addr, _reports) = start_server();
    let mut client = connect(addr, WsConfig::default());
    for len in [0usize, 1, 125, 126, 65535, 65536, 300_000, 1 << 20] {
        let text = text_of(len);
        client.send_text(&text).unwrap();
        assert_eq!(
            next_message(&mut client),
            (MessageKind::Text, Bytes::from(text)),
            "text {len}"
        );
        let binary: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
        client.send_binary(&binary).unwrap();
        assert_eq!(
            next_message(&mut client),
            (MessageKind::Binary, Bytes::from(binary)),
            "binary {len}"
        );
    }
}

#[test]
fn our_fragmented_messages_are_reassembled_by_the_server() {
    let (addr, _reports) = start_server();
    let mut client = connect(
        addr,
        WsConfig {
            fragment_size: Some(1000),
            ..WsConfig::default()
        },
    );
    let text = text_of(100_000);
    client.send_text(&text).unwrap();
    assert_eq!(
        next_message(&mut client),
        (MessageKind::Text, Bytes::from(text))
    );
}

#[test]
fn server_fragmented_messages_are_reassembled_by_us() {
    let (addr, _reports) = start_server();
    let mut client = connect(
        addr,
        WsConfig {
            max_read_size: 4096,
            ..WsConfig::default()
        },
    );
    for len in [3usize, 1000, 200_000] {
        let text = text_of(len);
        client.send_text(&format!("FRAG:{text}")).unwrap();
        assert_eq!(
            next_message(&mut client),
            (MessageKind::Text, Bytes::from(text)),
            "len {len}"
        );
    }
}

#[test]
fn server_ping_is_answered_automatically() {
    let (addr, _reports) = start_server();
    let mut client = connect(addr, WsConfig::default());
    client.send_text("PING-ME").unwrap();
    assert_eq!(client.next_event().unwrap(), Some(Event::Ping("hb".into())));
    assert_eq!(
        next_message(&mut client),
        (MessageKind::Text, Bytes::from("got pong"))
    );
}

#[test]
fn close_handshake_started_by_us_completes_on_both_sides() {
    let (addr, reports) = start_server();
    let mut client = connect(addr, WsConfig::default());
    client.close(1000, "client bye").unwrap();
    assert!(matches!(
        client.next_event().unwrap(),
        Some(Event::CloseStarted {
            by: CloseInitiator::Local,
            ..
        })
    ));
    match client.next_event().unwrap() {
        Some(Event::Closed {
            by: CloseInitiator::Local,
            frame,
        }) => assert_eq!(frame.code, 1000),
        other => panic!("{other:?}"),
    }
    assert_eq!(client.next_event().unwrap(), None);
    assert_eq!(reports.recv_timeout(TIMEOUT).unwrap(), Ok(()));
}

#[test]
fn close_handshake_started_by_the_server_completes_on_both_sides() {
    let (addr, reports) = start_server();
    let mut client = connect(addr, WsConfig::default());
    client.send_text("CLOSE-ME").unwrap();
    assert!(matches!(
        client.next_event().unwrap(),
        Some(Event::CloseStarted {
            by: CloseInitiator::Remote,
            ..
        })
    ));
    match client.next_event().unwrap() {
        Some(Event::Closed {
            by: CloseInitiator::Remote,
            frame,
        }) => {
            assert_eq!((frame.code, &frame.reason[..]), (1000, &b"server bye"[..]));
        }
        other => panic!("{other:?}"),
    }
    assert!(client.error().is_none());
    assert_eq!(reports.recv_timeout(TIMEOUT).unwrap(), Ok(()));
}
