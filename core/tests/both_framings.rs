//! WebSocket messages and CRLF lines feed the same router: the same bytes route the same way
//! whichever framing carried them.

mod common;

use std::time::Instant;

use common::*;
use feedwire_core::testing::server_frame;
use feedwire_core::{
    Delimiter, Event, LineClient, LineEvent, Routed, Router, RouterConfig, WsConfig,
};

#[test]
fn websocket_and_lines_route_identically() {
    let messages: [&[u8]; 4] = [
        br#"{"op":"connection","connectionId":"abc"}"#,
        br#"{"op":"status","id":1,"statusCode":"SUCCESS"}"#,
        br#"{"op":"mcm","id":1,"clk":"AA","pt":1,"mc":[]}"#,
        br#"{"op":"mcm","id":1,"ct":"HEARTBEAT","clk":"AB","pt":2}"#,
    ];
    let route_all = |payloads: Vec<bytes::Bytes>| {
        let mut router = Router::new(RouterConfig::betfair(), SEED);
        let (id, _) = router.register("auth", Instant::now()).unwrap();
        assert_eq!(id, feedwire_core::RequestId::Int(1));
        payloads
            .into_iter()
            .map(|p| router.route(p))
            .collect::<Vec<_>>()
    };

    let mut ws = open_client(WsConfig::default());
    let stream: Vec<u8> = messages
        .iter()
        .flat_map(|m| server_frame(true, 1, m))
        .collect();
    ws.handle_input(&stream);
    let ws_payloads = events(&mut ws)
        .into_iter()
        .map(|e| match e {
            Event::Message(m) => m.payload,
            other => panic!("{other:?}"),
        })
        .collect();

    let mut lines = LineClient::new(Delimiter::CrLf, 4096, 1 << 20);
    let stream: Vec<u8> = messages
        .iter()
        .flat_map(|m| [*m, b"\r\n"].concat())
        .collect();
    lines.handle_input(&stream);
    let line_payloads = std::iter::from_fn(|| lines.poll_event())
        .map(|e| match e {
            LineEvent::Line(l) => l,
            other => panic!("{other:?}"),
        })
        .collect();

    let via_ws = route_all(ws_payloads);
    let via_lines = route_all(line_payloads);
    assert_eq!(via_ws, via_lines);
    assert!(matches!(
        via_ws[0],
        Routed::Unsolicited {
            id: None,
            is_error: false,
            ..
        }
    ));
    assert!(matches!(
        via_ws[1],
        Routed::Answer {
            tag: "auth",
            is_error: false,
            ..
        }
    ));
    assert!(matches!(
        via_ws[2],
        Routed::Data {
            heartbeat: false,
            ..
        }
    ));
    assert!(matches!(
        via_ws[3],
        Routed::Data {
            heartbeat: true,
            ..
        }
    ));
}
