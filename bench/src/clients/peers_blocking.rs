//! nexus-web: the blocking WebSocket client over nexus-net 1.0 (zero-copy messages borrowed
//! from its read buffer, simdutf8).

use super::{err, Extra, Target, STALL};
use crate::recorder::Recorder;

pub(super) fn nexus_web(target: &Target, mut rec: Recorder) -> Result<(Recorder, Extra), String> {
    use nexus_web::ws::{Client, Message};
    let tcp = std::net::TcpStream::connect(&target.addr).map_err(|e| err("connect")(&e))?;
    tcp.set_nodelay(true).map_err(|e| err("nodelay")(&e))?;
    tcp.set_read_timeout(Some(STALL))
        .map_err(|e| err("timeout")(&e))?;
    let mut ws = Client::builder()
        .connect_with(tcp, &target.url)
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
