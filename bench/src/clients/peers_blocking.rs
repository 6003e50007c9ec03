//! nexus-web: the blocking WebSocket client over nexus-net 1.0 (zero-copy messages borrowed
//! from its read buffer, simdutf8). Over TLS it runs on rustls's blocking stream
//! (`connect_with` takes any `Read + Write`).

use super::{err, Extra, Target, STALL};
use crate::recorder::Recorder;

pub(super) fn nexus_web(target: &Target, rec: Recorder) -> Result<(Recorder, Extra), String> {
    let tcp = std::net::TcpStream::connect(&target.addr).map_err(|e| err("connect")(&e))?;
    tcp.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
    tcp.set_read_timeout(Some(STALL))
        .map_err(|e| err("timeout")(&e))?;
    match target.tls.as_ref() {
        Some(config) => nexus_web_on(super::tls::blocking(target, config, tcp)?, target, rec),
        None => nexus_web_on(tcp, target, rec),
    }
}

fn nexus_web_on(
    stream: impl std::io::Read + std::io::Write,
    target: &Target,
    mut rec: Recorder,
) -> Result<(Recorder, Extra), String> {
    use nexus_web::ws::{Client, Message};
    let mut ws = Client::builder()
        .connect_with(stream, &target.url)
        .map_err(|e| err("handshake")(&e))?;
    loop {
        let done = match ws.recv().map_err(|e| err("read")(&e))? {
            Some(Message::Text(t)) => rec.on_message(t.len(), t.as_bytes()),
            Some(Message::Binary(b)) => rec.on_message(b.len(), b),
            Some(Message::Close(_)) | None => return Err("closed early".to_owned()),
            Some(_) => false,
        };
        if done {
            return Ok((rec, Extra::default()));
        }
    }
}
