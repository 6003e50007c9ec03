//! The autobahn_client example's protocol, against a mock fuzzingserver (tokio-tungstenite):
//! case count, every case echoed, a case the client fails does not end the run, reports
//! updated last.

#[allow(dead_code, reason = "shared with the example")]
#[path = "../../core/examples/autobahn/mod.rs"]
mod autobahn;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

/// What the mock saw: request paths in order, and per case whether the echo was right.
type Log = Arc<Mutex<Vec<String>>>;

async fn mock_fuzzingserver(listener: tokio::net::TcpListener, log: Log) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let path = Arc::new(Mutex::new(String::new()));
        let seen = path.clone();
        #[allow(
            clippy::result_large_err,
            reason = "the signature tungstenite's callback requires"
        )]
        let callback = move |req: &Request, resp: Response| {
            *seen.lock().unwrap() = req.uri().to_string();
            Ok(resp)
        };
        let mut ws = tokio_tungstenite::accept_hdr_async(stream, callback)
            .await
            .unwrap();
        let path = path.lock().unwrap().clone();
        log.lock().unwrap().push(path.clone());
        let normal = Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        });
        if path.starts_with("/getCaseCount") {
            ws.send(Message::text("3")).await.unwrap();
            ws.close(normal).await.unwrap();
        } else if path.starts_with("/runCase?case=2&") {
            // Invalid UTF-8: the client must fail this case with 1007 and carry on.
            let bad = Frame::message(
                Bytes::from_static(b"\xce\xba\xff"),
                OpCode::Data(Data::Text),
                true,
            );
            ws.send(Message::Frame(bad)).await.unwrap();
        } else if path.starts_with("/runCase") {
            let sent = vec![
                Message::text("hello"),
                Message::binary(vec![1u8, 2, 3]),
                Message::text("é".repeat(40_000)),
            ];
            for m in &sent {
                ws.send(m.clone()).await.unwrap();
            }
            let mut echoed = Vec::new();
            while echoed.len() < sent.len() {
                match ws.next().await {
                    Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => echoed.push(m),
                    Some(Ok(_)) => {}
                    other => panic!("echo missing: {other:?}"),
                }
            }
            log.lock()
                .unwrap()
                .push(format!("echo ok: {}", echoed == sent));
            ws.close(normal).await.unwrap();
        } else {
            ws.close(normal).await.unwrap();
        }
        // Drain until the client's Close (or the error) ends the stream; record close codes.
        while let Some(msg) = ws.next().await {
            if let Ok(Message::Close(Some(frame))) = msg {
                log.lock()
                    .unwrap()
                    .push(format!("client close {}", u16::from(frame.code)));
            }
        }
    }
}

#[test]
fn runs_every_case_and_survives_a_failed_one() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    rt.spawn(mock_fuzzingserver(listener, log.clone()));

    let mut lines = Vec::new();
    autobahn::run_suite(&url, "feedwire-test", 256 * 1024, |l| lines.push(l)).unwrap();

    let log = log.lock().unwrap().clone();
    let paths: Vec<&String> = log.iter().filter(|l| l.starts_with('/')).collect();
    assert_eq!(
        paths,
        [
            "/getCaseCount",
            "/runCase?case=1&agent=feedwire-test",
            "/runCase?case=2&agent=feedwire-test",
            "/runCase?case=3&agent=feedwire-test",
            "/updateReports?agent=feedwire-test",
        ]
    );
    assert_eq!(
        log.iter().filter(|l| *l == "echo ok: true").count(),
        2,
        "{log:?}"
    );
    assert!(log.contains(&"client close 1007".to_owned()), "{log:?}");
    assert!(lines[2].contains("1007"), "{lines:?}");
    assert_eq!(
        lines.last().unwrap(),
        "reports updated for agent feedwire-test"
    );
}
