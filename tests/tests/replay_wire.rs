//! The replay server's side of the wire, byte by byte from a raw socket: upgrade heads
//! gathered across reads up to 16 KiB; client frames parsed whatever their length encoding
//! and however their headers are split across reads, up to 1 MiB; unmasked client frames
//! refused; Close echoed once; upgrades refused with Binance's real responses; the faults'
//! bytes; Betfair request lines read whatever their line ends, subscriptions answered with
//! their ids.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use feedwire_core::apply_mask;
use feedwire_replay::{Fault, ReplayConfig, ReplayServer, Scenario};

const TIMEOUT: Duration = Duration::from_secs(20);

/// A bare `/ws` endpoint that sends nothing but its answers (no messages, held open).
fn answering_server() -> ReplayServer {
    ReplayServer::start(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
    .unwrap()
}

fn connect(srv: &ReplayServer) -> TcpStream {
    let sock = TcpStream::connect(srv.addr()).unwrap();
    sock.set_read_timeout(Some(TIMEOUT)).unwrap();
    sock.set_nodelay(true).unwrap();
    sock
}

/// Sends an upgrade request for `path`; returns the response's head as text, and the bytes
/// read after it.
fn upgrade(sock: &mut TcpStream, path: &str) -> (String, Vec<u8>) {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    sock.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed during the upgrade");
        response.extend_from_slice(&buf[..n]);
    };
    let after = response.split_off(end);
    (String::from_utf8(response).unwrap(), after)
}

/// A server for `config`, a connection upgraded on its streaming path (messages start at
/// once), and the bytes read past the response head.
fn streaming(config: ReplayConfig) -> (ReplayServer, TcpStream, Vec<u8>) {
    let srv = ReplayServer::start(config).unwrap();
    let mut sock = connect(&srv);
    let url = srv.url();
    let (_, bytes) = upgrade(&mut sock, &url[url.find("/stream").unwrap()..]);
    (srv, sock, bytes)
}

/// A firehose of 100 small messages with `fault`, as [`streaming`].
fn faulty(fault: Fault) -> (ReplayServer, TcpStream, Vec<u8>) {
    streaming(ReplayConfig {
        count: Some(100),
        fault: Some(fault),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    })
}

/// A masked client frame (FIN set), its length in the shortest encoding.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let key = [0x37, 0xfa, 0x21, 0x3d];
    out.extend_from_slice(&key);
    let mut masked = payload.to_vec();
    apply_mask(&mut masked, key, 0);
    out.extend_from_slice(&masked);
    out
}

/// Writes `frame` in two pieces, the first `split` bytes alone, so the server reads its
/// header incomplete.
fn write_split(sock: &mut TcpStream, frame: &[u8], split: usize) {
    sock.write_all(&frame[..split]).unwrap();
    sock.flush().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    sock.write_all(&frame[split..]).unwrap();
}

/// Reads server frames until a text frame ending with `"id":{id}}`; returns its text.
fn answer(sock: &mut TcpStream, id: u32, buf: &mut Vec<u8>) -> String {
    let end = format!("\"id\":{id}}}");
    loop {
        while let Some((opcode, payload, used)) = server_frame(buf) {
            buf.drain(..used);
            let text = String::from_utf8(payload).unwrap();
            if opcode == 1 && text.ends_with(&end) {
                return text;
            }
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the answer to {id}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The first complete unmasked frame in `buf`: opcode, payload, bytes used.
fn server_frame(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let (&b0, &b1) = (buf.first()?, buf.get(1)?);
    assert_eq!(b1 & 0x80, 0, "a server frame is not masked");
    let (len, at) = match b1 & 0x7F {
        126 => (
            usize::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
            4,
        ),
        127 => (
            usize::try_from(u64::from_be_bytes(buf.get(2..10)?.try_into().unwrap())).unwrap(),
            10,
        ),
        n => (usize::from(n), 2),
    };
    let payload = buf.get(at..at + len)?.to_vec();
    Some((b0 & 0x0F, payload, at + len))
}

/// What the server still sends before it ends the connection (within the read timeout:
/// a connection it keeps fails the test).
fn rest_until_ended(sock: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    let end = sock.read_to_end(&mut rest).map_err(|e| e.kind());
    assert!(
        matches!(end, Ok(_) | Err(ErrorKind::ConnectionReset)),
        "the server kept the connection: {end:?}"
    );
    rest
}

/// The server ends the connection (within the read timeout) without answering request `id`.
fn assert_ended_unanswered(sock: &mut TcpStream, id: u32) {
    let rest = rest_until_ended(sock);
    assert!(
        !String::from_utf8_lossy(&rest).contains(&format!("\"id\":{id}")),
        "answered request {id}"
    );
}

fn subscribe(streams: &[String], id: u32) -> Vec<u8> {
    let params: Vec<String> = streams.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "{{\"method\":\"SUBSCRIBE\",\"params\":[{}],\"id\":{id}}}",
        params.join(",")
    )
    .into_bytes()
}

#[test]
fn client_frames_of_every_length_encoding_are_parsed_however_split() {
    let srv = answering_server();
    let mut sock = connect(&srv);
    assert!(upgrade(&mut sock, "/ws").0.starts_with("HTTP/1.1 101 "));
    let names = |from: usize, n: usize| -> Vec<String> {
        (from..from + n)
            .map(|i| format!("s{i:05}usdt@aggTrade"))
            .collect()
    };
    // 7-bit, 16-bit (300 bytes) and 64-bit (over 64 KiB) lengths; the longer two written
    // with their headers cut short: after the 2 bytes of the 16-bit length's 4, and after 5
    // of the 64-bit length's 10.
    let (short, medium, long) = (names(0, 1), names(1, 12), names(13, 3_500));
    let mut buf = Vec::new();
    sock.write_all(&client_frame(1, &subscribe(&short, 1)))
        .unwrap();
    assert_eq!(answer(&mut sock, 1, &mut buf), r#"{"result":null,"id":1}"#);
    let frame = client_frame(1, &subscribe(&medium, 2));
    assert_eq!(frame[1] & 0x7F, 126);
    write_split(&mut sock, &frame, 2);
    assert_eq!(answer(&mut sock, 2, &mut buf), r#"{"result":null,"id":2}"#);
    let frame = client_frame(1, &subscribe(&long, 3));
    assert_eq!(frame[1] & 0x7F, 127);
    write_split(&mut sock, &frame, 5);
    assert_eq!(answer(&mut sock, 3, &mut buf), r#"{"result":null,"id":3}"#);
    // An empty control frame (a Pong) is a whole frame too.
    sock.write_all(&client_frame(10, b"")).unwrap();
    sock.write_all(&client_frame(
        1,
        br#"{"method":"LIST_SUBSCRIPTIONS","id":4}"#,
    ))
    .unwrap();
    let listed = answer(&mut sock, 4, &mut buf);
    let all: Vec<String> = [short, medium, long].concat();
    let quoted: Vec<String> = all.iter().map(|s| format!("\"{s}\"")).collect();
    assert_eq!(
        listed,
        format!("{{\"result\":[{}],\"id\":4}}", quoted.join(","))
    );
}

#[test]
fn an_unmasked_client_frame_ends_the_connection() {
    let srv = answering_server();
    let mut sock = connect(&srv);
    upgrade(&mut sock, "/ws");
    let mut frame = client_frame(1, br#"{"method":"LIST_SUBSCRIPTIONS","id":1}"#);
    // Unmasked: the mask bit cleared and the key taken out (the payload is sent as is).
    frame[1] &= 0x7F;
    frame.drain(2..6);
    apply_mask(&mut frame[2..], [0x37, 0xfa, 0x21, 0x3d], 0);
    sock.write_all(&frame).unwrap();
    assert_ended_unanswered(&mut sock, 1);
}

/// Refusals as Binance sends them: the status line, its JSON body with the right length,
/// and `Retry-After` when the fault gives one; then the connection ends.
#[test]
fn refused_upgrades_carry_binances_status_and_body() {
    for (fault, status, body, retry) in [
        (
            Fault::RefuseUpgrade(429),
            "429 Too Many Requests",
            r#"{"code":-1003,"msg":"Too many requests."}"#,
            None,
        ),
        (
            Fault::RefuseUpgrade(503),
            "503 Service Unavailable",
            r#"{"code":-1001,"msg":"Service unavailable."}"#,
            None,
        ),
        (
            Fault::RefuseUpgradeFor {
                status: 418,
                retry_after_s: 120,
            },
            "418 I'm a teapot",
            r#"{"code":-1003,"msg":"Way too many requests; IP banned."}"#,
            Some(120),
        ),
    ] {
        let srv = ReplayServer::start(ReplayConfig {
            fault: Some(fault),
            ..ReplayConfig::new(Scenario::SmallAggTrade)
        })
        .unwrap();
        let mut sock = connect(&srv);
        let (head, mut body_bytes) = upgrade(&mut sock, "/ws");
        sock.read_to_end(&mut body_bytes).unwrap();
        let got_body = String::from_utf8(body_bytes).unwrap();
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}\r\n")),
            "{head}"
        );
        assert_eq!(got_body, body);
        assert!(
            head.contains(&format!("\r\nContent-Length: {}", body.len())),
            "{head}"
        );
        assert!(
            head.contains("\r\nContent-Type: application/json"),
            "{head}"
        );
        let retry_after = head
            .lines()
            .find_map(|l| l.strip_prefix("Retry-After: "))
            .map(|s| s.parse::<u32>().unwrap());
        assert_eq!(retry_after, retry, "{head}");
    }
}

/// An upgrade request for `/ws` exactly `len` bytes long, its end included: a padding
/// header makes up the length.
fn padded_upgrade(len: usize) -> Vec<u8> {
    let start = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                 Sec-WebSocket-Version: 13\r\nX-Pad: ";
    let mut head = start.as_bytes().to_vec();
    head.resize(len - 4, b'x');
    head.extend_from_slice(b"\r\n\r\n");
    head
}

/// The server reads an upgrade request in pieces, whatever they are, up to 16 KiB: a head
/// written in two parts is answered, one of exactly 16 KiB too; one whose first 16 KiB hold
/// no end ends the connection, even when its end comes later.
#[test]
fn upgrade_heads_are_gathered_across_reads_up_to_16_kib() {
    const LIMIT: usize = 16 * 1024;
    let srv = answering_server();
    let switched = |sock: &mut TcpStream| {
        let mut head = [0u8; 12];
        sock.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 101");
    };
    let mut sock = connect(&srv);
    write_split(&mut sock, &padded_upgrade(300), 40);
    switched(&mut sock);
    let mut sock = connect(&srv);
    sock.write_all(&padded_upgrade(LIMIT)).unwrap();
    switched(&mut sock);
    // The server's 4 KiB reads end exactly at 16 KiB, before the head's end.
    let mut sock = connect(&srv);
    write_split(&mut sock, &padded_upgrade(LIMIT + 1), LIMIT);
    let rest = rest_until_ended(&mut sock);
    assert!(
        rest.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&rest)
    );
}

/// A `LIST_SUBSCRIPTIONS` request `id`, padded to exactly `len` bytes.
fn padded_request(id: u32, len: usize) -> Vec<u8> {
    let head = format!("{{\"method\":\"LIST_SUBSCRIPTIONS\",\"id\":{id},\"pad\":\"");
    let mut text = head.into_bytes();
    text.resize(len - 2, b'x');
    text.extend_from_slice(b"\"}");
    text
}

#[test]
fn client_frames_up_to_1_mib_are_taken_larger_end_the_connection() {
    let srv = answering_server();
    let mut sock = connect(&srv);
    upgrade(&mut sock, "/ws");
    let mut buf = Vec::new();
    sock.write_all(&client_frame(1, &padded_request(1, 1 << 20)))
        .unwrap();
    assert_eq!(answer(&mut sock, 1, &mut buf), r#"{"result":[],"id":1}"#);
    // The server ends the connection at the header, with most of the frame unread: the
    // write may meet the reset (CI did).
    let written = sock
        .write_all(&client_frame(1, &padded_request(2, (1 << 20) + 1)))
        .map_err(|e| e.kind());
    assert!(
        matches!(
            written,
            Ok(()) | Err(ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
        ),
        "{written:?}"
    );
    assert_ended_unanswered(&mut sock, 2);
}

/// Betfair requests are lines: CRLF or a bare LF ends one, and a blank line is nothing.
#[test]
fn betfair_request_lines_end_at_crlf_or_lf_and_blank_ones_are_skipped() {
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(0),
        hold_open: true,
        ..ReplayConfig::new(Scenario::BetfairMcm)
    })
    .unwrap();
    let mut sock = connect(&srv);
    let mut received = Vec::new();
    let mut line_with = |sock: &mut TcpStream, text: &str| loop {
        if let Some(at) = received.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = received.drain(..=at).collect();
            let line = String::from_utf8(line).unwrap();
            if line.contains(text) {
                return line;
            }
            continue;
        }
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before a line with {text}");
        received.extend_from_slice(&chunk[..n]);
    };
    assert!(line_with(&mut sock, "\"op\":\"connection\"").ends_with("}\r\n"));
    sock.write_all(b"\n\r\n{\"op\":\"heartbeat\",\"id\":5}\r\n{\"op\":\"heartbeat\",\"id\":6}\n")
        .unwrap();
    for id in [5, 6] {
        let status = line_with(&mut sock, &format!("\"id\":{id},"));
        assert!(status.contains("\"statusCode\":\"SUCCESS\""), "{status}");
    }
}

/// `CloseMidFrame`: the complete messages, then the first half of the next frame, then the
/// end of the connection.
#[test]
fn close_mid_frame_sends_half_of_the_next_frame() {
    let (srv, mut sock, mut bytes) = faulty(Fault::CloseMidFrame { after: 5 });
    sock.read_to_end(&mut bytes).unwrap();
    for i in 0..5 {
        let (opcode, payload, used) = server_frame(&bytes).expect("a complete frame");
        assert_eq!(
            (opcode, &payload[..]),
            (1, &srv.payload(i)[..]),
            "message {i}"
        );
        bytes.drain(..used);
    }
    let next = feedwire_core::testing::server_frame(true, 1, srv.payload(5));
    assert_eq!(bytes, next[..next.len() / 2], "half of message 5's frame");
}

/// Every line up to the connection's end, CRLF stripped.
fn lines_until_end(sock: &mut TcpStream) -> Vec<String> {
    let mut bytes = Vec::new();
    sock.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    text.split_terminator("\r\n").map(str::to_owned).collect()
}

/// The order on the wire, against the scenario's payloads computed here: a WebSocket
/// connection cycles through them from the first; a Betfair one sends its image (the first)
/// once and then cycles through the rest. (The client tests compare with
/// `ReplayServer::payload`, which shares the server's indexing.)
#[test]
fn connections_cycle_through_the_payloads_in_order() {
    let payloads = Scenario::MultiplexMix.payloads(3);
    let count = payloads.len() + 10;
    let (_srv, mut sock, mut bytes) = streaming(ReplayConfig {
        count: Some(count),
        seed: 3,
        ..ReplayConfig::new(Scenario::MultiplexMix)
    });
    // The server's Close follows the last message; it then waits for ours.
    for i in 0..count {
        let (opcode, payload, used) = loop {
            if let Some(frame) = server_frame(&bytes) {
                break frame;
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = sock.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before message {i}");
            bytes.extend_from_slice(&chunk[..n]);
        };
        assert_eq!(opcode, 1);
        assert!(payload == payloads[i % payloads.len()], "message {i}");
        bytes.drain(..used);
    }

    let lines = Scenario::BetfairMcm.payloads(3);
    let srv = ReplayServer::start(ReplayConfig {
        count: Some(lines.len() + 10),
        seed: 3,
        ..ReplayConfig::new(Scenario::BetfairMcm)
    })
    .unwrap();
    let mut sock = connect(&srv);
    sock.write_all(
        b"{\"op\":\"authentication\",\"id\":1,\"appKey\":\"k\",\"session\":\"s\"}\r\n\
          {\"op\":\"marketSubscription\",\"id\":2,\"marketFilter\":{}}\r\n",
    )
    .unwrap();
    let got: Vec<String> = lines_until_end(&mut sock)
        .into_iter()
        .filter(|l| l.starts_with("{\"op\":\"mcm\""))
        .collect();
    assert_eq!(got.len(), lines.len() + 10);
    for (i, line) in got.iter().enumerate() {
        let want = if i == 0 {
            0
        } else {
            1 + (i - 1) % (lines.len() - 1)
        };
        assert!(line.as_bytes() == lines[want], "line {i}");
    }
}

/// `GoSilent`: exactly the messages before the fault point, then nothing (the connection
/// left open).
#[test]
fn go_silent_sends_exactly_the_messages_before_it() {
    let (srv, mut sock, mut bytes) = faulty(Fault::GoSilent { after: 5 });
    // Whatever comes within half a second; the silence then is the fault's.
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut chunk = [0u8; 64 * 1024];
    let end = loop {
        match sock.read(&mut chunk) {
            Ok(0) => break Ok(0),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) => break Err(e.kind()),
        }
    };
    assert!(
        matches!(end, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
        "left open: {end:?}"
    );
    for i in 0..5 {
        let (_, payload, used) = server_frame(&bytes).expect("a complete frame");
        assert!(payload == srv.payload(i)[..], "message {i}");
        bytes.drain(..used);
    }
    assert!(
        bytes.is_empty(),
        "{} bytes after the fault point",
        bytes.len()
    );
}

/// Server frames, from `bytes` and then the socket, up to and including the first Close.
fn frames_until_close(sock: &mut TcpStream, bytes: &mut Vec<u8>) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    loop {
        while let Some((opcode, payload, used)) = server_frame(bytes) {
            bytes.drain(..used);
            frames.push((opcode, payload));
            if opcode == 8 {
                return frames;
            }
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "closed without a Close frame");
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// `ServerShutdown`: Binance's notice after the given message, then the stream goes on to
/// its end — the notice warns, it does not stop the feed.
#[test]
fn server_shutdown_notices_then_streams_on() {
    let (srv, mut sock, mut bytes) = streaming(ReplayConfig {
        count: Some(30),
        fault: Some(Fault::ServerShutdown { after: 10 }),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let frames = frames_until_close(&mut sock, &mut bytes);
    assert_eq!(frames.len(), 32, "30 messages, the notice, the Close");
    for (i, (opcode, payload)) in frames[..31].iter().enumerate() {
        assert_eq!(*opcode, 1);
        match i {
            10 => {
                let text = std::str::from_utf8(payload).unwrap();
                assert!(
                    text.starts_with("{\"e\":\"serverShutdown\",\"E\":"),
                    "{text}"
                );
            }
            _ => {
                let n = if i < 10 { i } else { i - 1 };
                assert!(payload[..] == srv.payload(n)[..], "message {n}");
            }
        }
    }
    assert_eq!(frames[31], (8, 1000u16.to_be_bytes().to_vec()));
}

/// A Close from the client is answered with a Close of its code and the connection ends;
/// after the server's own Close, the client's answer gets none back.
#[test]
fn client_closes_are_echoed_once() {
    let srv = answering_server();
    let mut sock = connect(&srv);
    upgrade(&mut sock, "/ws");
    sock.write_all(&client_frame(8, &1001u16.to_be_bytes()))
        .unwrap();
    let mut bytes = Vec::new();
    let frames = frames_until_close(&mut sock, &mut bytes);
    assert_eq!(frames, [(8, 1001u16.to_be_bytes().to_vec())]);
    sock.read_to_end(&mut bytes).unwrap();
    assert!(bytes.is_empty(), "{} bytes after the Close", bytes.len());

    let (_srv, mut sock, mut bytes) = streaming(ReplayConfig {
        count: Some(100),
        ..ReplayConfig::new(Scenario::SmallAggTrade)
    });
    let frames = frames_until_close(&mut sock, &mut bytes);
    assert_eq!(frames.len(), 101, "100 messages and the server's Close");
    sock.write_all(&client_frame(8, &1000u16.to_be_bytes()))
        .unwrap();
    sock.read_to_end(&mut bytes).unwrap();
    assert!(bytes.is_empty(), "a second Close: {bytes:?}");
}

/// A Betfair market subscription is answered with its own id in every change message; one
/// that resumes (`initialClk` given) opens with what changed since, a `RESUB_DELTA`, not an
/// image — whatever its id, the one the scenario was made with included.
#[test]
fn betfair_subscriptions_get_their_id_and_resumptions_a_delta() {
    for (id, resumes) in [(2, false), (2, true), (7, false), (7, true)] {
        let srv = ReplayServer::start(ReplayConfig {
            count: Some(3),
            ..ReplayConfig::new(Scenario::BetfairMcm)
        })
        .unwrap();
        let mut sock = connect(&srv);
        let from = if resumes {
            ",\"initialClk\":\"AAAA\",\"clk\":\"AAAB\""
        } else {
            ""
        };
        let request = format!(
            "{{\"op\":\"authentication\",\"id\":1,\"appKey\":\"k\",\"session\":\"s\"}}\r\n\
             {{\"op\":\"marketSubscription\",\"id\":{id}{from},\"marketFilter\":{{}}}}\r\n"
        );
        sock.write_all(request.as_bytes()).unwrap();
        let changes: Vec<String> = lines_until_end(&mut sock)
            .into_iter()
            .filter(|l| l.starts_with("{\"op\":\"mcm\""))
            .collect();
        assert_eq!(changes.len(), 3, "id {id}");
        for line in &changes {
            assert!(
                line.starts_with(&format!("{{\"op\":\"mcm\",\"id\":{id},")),
                "{line}"
            );
        }
        let kind = if resumes { "RESUB_DELTA" } else { "SUB_IMAGE" };
        assert!(
            changes[0].contains(&format!("\"ct\":\"{kind}\"")),
            "id {id}: {}",
            changes[0]
        );
    }
}
