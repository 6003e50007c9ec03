//! TLS interop: the core's `TlsSession` (rustls's unbuffered client, with feedwire's own
//! record handling around it) against an independent server, OpenSSL's `openssl s_server`,
//! carrying CRLF lines into a `LineClient` on a blocking loopback socket. What a rustls server
//! never sends here: OpenSSL's record sizes and flight layout, TLS 1.3 session tickets as
//! OpenSSL sends them, a server KeyUpdate (and one that asks the client to update too), TLS
//! 1.2, and small records (`-max_send_frag`). Every line sent must arrive, once, in order,
//! and the end (s_server closes the socket without close_notify) must be reported as the
//! truncation it is, after the last complete line.
//!
//! Needs the `openssl` command (Debian's `openssl` package); without it the tests say so and
//! pass. The test CA and server certificate are made at test time.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use feedwire_core::{
    tls_config_with_roots, Delimiter, LineClient, LineEvent, TlsError, TlsSession,
};
use feedwire_replay::TestPki;
use feedwire_tests::peer::{free_loopback_port, PeerProcess};
use feedwire_tests::scratch::ScratchDir;

/// Whether `openssl` runs here; says so when it does not.
fn openssl_available() -> bool {
    let ran = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ran {
        eprintln!("openssl not found: OpenSSL interop skipped");
    }
    ran
}

/// `openssl s_server` for one connection: what is written to its standard input goes to the
/// client (a line of `k` or `K` alone is a command: a KeyUpdate, the second asking the client
/// to update too); closing its input makes it close the connection and exit. Killed on drop.
struct OpensslServer {
    process: PeerProcess,
    port: u16,
}

impl OpensslServer {
    fn start(dir: &Path, pki: &TestPki, args: &[&str]) -> Self {
        std::fs::write(dir.join("cert.pem"), &pki.server_cert_pem).unwrap();
        std::fs::write(dir.join("key.pem"), &pki.server_key_pem).unwrap();
        let port = free_loopback_port();
        let mut command = Command::new("openssl");
        command
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
            .args([
                "-cert", "cert.pem", "-key", "key.pem", "-naccept", "1", "-msg",
            ])
            .args(args);
        let process = PeerProcess::spawn(command, dir, "s_server.log");
        // Probing the port would use up its one connection: wait for it to say it listens.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !process.log_text().contains("ACCEPT") {
            assert!(
                Instant::now() < deadline,
                "s_server did not listen within 30 s: {}",
                process.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { process, port }
    }

    fn log_text(&self) -> String {
        self.process.log_text()
    }
}

/// What the server's input gets, in order.
enum Step {
    /// Lines of data, each ended by CRLF.
    Lines(Vec<String>),
    /// A command line on its own (`"k\n"`, `"K\n"`), written at once with pauses around it
    /// so that s_server reads it alone (a command must start one read of its input, and is
    /// followed by its newline in the same read).
    Command(&'static str),
}

/// What the client writes first.
const GREETING: &[u8] = b"{\"op\":\"authentication\",\"id\":1}\r\n";

/// What the client writes when `run` is asked to reply (s_server prints what it receives).
const REPLY: &[u8] = b"{\"op\":\"heartbeat\",\"id\":7}\r\n";

/// `count` lines of Betfair-like JSON starting at `first`, of varied lengths (60 B to ~2 KB).
fn lines(first: usize, count: usize) -> Vec<String> {
    (first..first + count)
        .map(|i| {
            let pad = "x".repeat((i * 37) % 2000);
            format!(
                r#"{{"op":"mcm","id":{i},"clk":"AAA{i:08x}","pt":1700000000000,"pad":"{pad}"}}"#
            )
        })
        .collect()
}

/// Runs `steps` through s_server (with `args`) into a TLS line client, which writes
/// [`REPLY`] once it has received `reply_after` lines; returns the lines the client received
/// and s_server's log. s_server ends a connection by closing its socket without
/// close_notify: the client must report that truncation, and only after every line whose
/// CRLF arrived; and s_server must have received the client's greeting.
fn run(
    name: &str,
    args: &[&str],
    steps: Vec<Step>,
    reply_after: Option<usize>,
) -> (Vec<String>, String) {
    let pki = TestPki::generate().unwrap();
    let dir = ScratchDir::new(&format!("openssl-{name}"));
    let mut server = OpensslServer::start(dir.path(), &pki, args);
    let mut input = server.process.take_input().unwrap();
    let feeder = std::thread::spawn(move || {
        for step in steps {
            match step {
                Step::Lines(lines) => {
                    for line in lines {
                        input.write_all(line.as_bytes()).unwrap();
                        input.write_all(b"\r\n").unwrap();
                    }
                    input.flush().unwrap();
                }
                Step::Command(command) => {
                    std::thread::sleep(Duration::from_millis(300));
                    input.write_all(command.as_bytes()).unwrap();
                    input.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        }
        // Dropping the input ends the connection: s_server closes the socket (it sends no
        // close_notify first) at once, whatever the client sent that it has not read — which
        // would make that close a reset, losing what the client had not read yet. A pause
        // first lets it read the client's writes.
        std::thread::sleep(Duration::from_millis(500));
    });

    let mut sock = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let config = tls_config_with_roots(pki.root_store());
    // By name: the certificate is verified for `localhost`, and the name goes out as SNI.
    let mut tls = TlsSession::new(config, "localhost").unwrap();
    // A client speaks first, as a Betfair client authenticates (the session sends it once
    // the handshake is done). s_server needs it too: when it reads its input before the
    // handshake, the handshake consumes the socket's readiness and s_server then blocks in
    // a read of the socket until the client sends something.
    tls.write_plaintext(GREETING);
    let mut client = LineClient::new(Delimiter::CrLf, 64 * 1024, 1 << 20);
    let mut received = Vec::new();
    let mut ended = false;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ended {
        assert!(Instant::now() < deadline, "{name}: no end within 120 s");
        while let Some(bytes) = tls.poll_transmit() {
            sock.write_all(&bytes).unwrap();
        }
        let n = match sock.read(tls.read_buf()) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("{name}: read failed: {e}\n{tls:?}\n{}", server.log_text()),
        };
        if n == 0 {
            // Truncation, as s_server ends: reported as such, after every complete line.
            let end = tls.handle_eof(&mut client);
            assert!(
                matches!(end, Err(TlsError::UnexpectedEof)),
                "{name}: {end:?}\n{}",
                server.log_text()
            );
            client.handle_eof();
        } else {
            tls.handle_read(n, &mut client)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{}", server.log_text()));
        }
        while let Some(event) = client.poll_event() {
            match event {
                LineEvent::Line(line) => {
                    received.push(String::from_utf8(line.to_vec()).unwrap());
                    if reply_after == Some(received.len()) {
                        tls.write_plaintext(REPLY);
                    }
                }
                LineEvent::Ended => ended = true,
                other => panic!("{name}: {other:?}\n{}", server.log_text()),
            }
        }
    }
    feeder.join().unwrap();
    assert!(
        !tls.is_closed_by_peer(),
        "{name}: s_server sends no close_notify"
    );
    server.process.wait();
    let log = server.log_text();
    let greeting = std::str::from_utf8(GREETING).unwrap().trim_end();
    assert!(
        log.contains(greeting),
        "{name}: the greeting did not arrive: {log}"
    );
    (received, log)
}

/// Every line sent arrived, once, in order (the first difference shown, shortened).
fn assert_same_lines(received: &[String], sent: &[String]) {
    let short = |line: &str| line.chars().take(120).collect::<String>();
    if let Some(i) = (0..sent.len().min(received.len())).find(|&i| received[i] != sent[i]) {
        panic!(
            "line {i} differs: got {:?}, sent {:?}",
            short(&received[i]),
            short(&sent[i])
        );
    }
    assert_eq!(received.len(), sent.len(), "lines received, lines sent");
}

/// The protocol version of the ServerHello s_server sent (`>>> TLS 1.3, Handshake [...],
/// ServerHello` in its message trace).
fn server_hello_version(log: &str) -> Option<&str> {
    log.lines()
        .find(|l| l.starts_with(">>> ") && l.ends_with("ServerHello"))
        .and_then(|l| l[4..].split(',').next())
}

#[test]
fn tls13_lines_across_server_key_updates() {
    if !openssl_available() {
        return;
    }
    let (a, b, c) = (lines(0, 400), lines(400, 400), lines(800, 400));
    let sent: Vec<String> = [a.clone(), b.clone(), c.clone()].concat();
    let steps = vec![
        Step::Lines(a),
        Step::Command("k\n"),
        Step::Lines(b),
        Step::Command("K\n"),
        Step::Lines(c),
    ];
    // The client answers after the first line behind the second KeyUpdate.
    let (received, log) = run("keyupdate", &["-tls1_3"], steps, Some(801));
    assert_same_lines(&received, &sent);
    assert_eq!(server_hello_version(&log), Some("TLS 1.3"), "{log}");
    // The server updated its keys twice (`>>>`: what it sent); asked to by the second, the
    // client updated its own before its next application data (RFC 8446 §4.6.3): the
    // server received one KeyUpdate (`<<<`), then the reply, which it prints.
    let key_updates = |dir: &str| {
        log.lines()
            .filter(|l| l.starts_with(dir) && l.ends_with("KeyUpdate"))
            .count()
    };
    assert_eq!(key_updates(">>>"), 2, "{log}");
    assert_eq!(key_updates("<<<"), 1, "{log}");
    let reply = std::str::from_utf8(REPLY).unwrap().trim_end();
    let client_update = log.find("<<< TLS 1.3, Handshake [length 0005], KeyUpdate");
    assert!(
        client_update.is_some_and(|at| log[at..].contains(reply)),
        "the reply after the client's KeyUpdate: {log}"
    );
}

#[test]
fn tls12_lines() {
    if !openssl_available() {
        return;
    }
    let sent = lines(0, 1500);
    let (received, log) = run("tls12", &["-tls1_2"], vec![Step::Lines(sent.clone())], None);
    assert_same_lines(&received, &sent);
    assert_eq!(server_hello_version(&log), Some("TLS 1.2"), "{log}");
}

#[test]
fn tls13_lines_in_small_records() {
    if !openssl_available() {
        return;
    }
    // 512-byte records: most lines span several, many records hold the end of one line and
    // the start of the next.
    let sent = lines(0, 1000);
    let (received, log) = run(
        "small",
        &["-tls1_3", "-max_send_frag", "512"],
        vec![Step::Lines(sent.clone())],
        None,
    );
    assert_same_lines(&received, &sent);
    assert_eq!(server_hello_version(&log), Some("TLS 1.3"), "{log}");
    // 512 bytes of plaintext, the content type and the 16-byte tag.
    let largest = largest_record_sent(&log);
    assert!(
        (1..=512 + 1 + 16).contains(&largest),
        "largest record {largest} B"
    );
}

/// Length (bytes after the header) of the largest application-data record s_server sent:
/// from its message trace, where each `>>> … RecordHeader` line is followed by the header's
/// bytes in hex (`17 03 03 02 11`: type 0x17, length 0x0211).
fn largest_record_sent(log: &str) -> usize {
    let mut lines = log.lines();
    let mut largest = 0;
    while let Some(line) = lines.next() {
        if !(line.starts_with(">>> ") && line.contains("RecordHeader")) {
            continue;
        }
        let header: Vec<u8> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|b| u8::from_str_radix(b, 16).ok())
            .collect();
        if let [0x17, _, _, high, low] = header[..] {
            largest = largest.max(usize::from(u16::from_be_bytes([high, low])));
        }
    }
    largest
}
