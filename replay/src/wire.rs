//! The server side of the wire: the upgrade response, unmasked server frames, masked client
//! frames, and CRLF lines.

use feedwire_core::{accept_key, apply_mask};

/// Appends one unmasked server frame (FIN set).
pub(crate) fn push_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    feedwire_core::push_server_frame(out, true, opcode, payload);
}

/// A parsed upgrade request.
#[derive(Debug)]
pub(crate) struct Upgrade {
    pub(crate) path: String,
    pub(crate) key: String,
    /// Bytes of the head, CRLFCRLF included.
    pub(crate) head_len: usize,
}

/// Parses an upgrade request head; `Ok(None)` while incomplete.
pub(crate) fn parse_upgrade(buf: &[u8]) -> Result<Option<Upgrade>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err("malformed request head"),
    };
    let key = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-key"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .ok_or("no Sec-WebSocket-Key")?
        .trim()
        .to_owned();
    Ok(Some(Upgrade {
        path: req.path.unwrap_or("/").to_owned(),
        key,
        head_len,
    }))
}

pub(crate) fn switching_protocols(key: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key.as_bytes())
    )
    .into_bytes()
}

/// A refused upgrade with Binance's bodies, and a `Retry-After` (seconds) if given.
pub(crate) fn refusal(status: u16, retry_after_s: Option<u32>) -> Vec<u8> {
    let (reason, body) = match status {
        429 => (
            "Too Many Requests",
            "{\"code\":-1003,\"msg\":\"Too many requests.\"}",
        ),
        503 => (
            "Service Unavailable",
            "{\"code\":-1001,\"msg\":\"Service unavailable.\"}",
        ),
        418 => (
            "I'm a teapot",
            "{\"code\":-1003,\"msg\":\"Way too many requests; IP banned.\"}",
        ),
        _ => ("Refused", "{}"),
    };
    let retry = retry_after_s.map_or(String::new(), |s| format!("Retry-After: {s}\r\n"));
    format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{retry}Content-Length: {}\r\n\r\n{body}", body.len())
        .into_bytes()
}

/// A complete client frame, unmasked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientFrame {
    pub(crate) opcode: u8,
    pub(crate) payload: Vec<u8>,
}

/// Takes every complete masked client frame from the front of `buf`. Fragmented client
/// messages are not used by our clients' control traffic; each frame is reported alone.
pub(crate) fn take_client_frames(buf: &mut Vec<u8>) -> Result<Vec<ClientFrame>, &'static str> {
    let mut frames = Vec::new();
    let mut pos = 0;
    loop {
        let b = &buf[pos..];
        if b.len() < 2 {
            break;
        }
        if b[1] & 0x80 == 0 {
            return Err("unmasked client frame");
        }
        let (len, mut at) = match b[1] & 0x7F {
            126 if b.len() >= 4 => (usize::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() >= 10 => (
                u64::from_be_bytes(b[2..10].try_into().expect("8 bytes")) as usize,
                10,
            ),
            126 | 127 => break,
            n => (usize::from(n), 2),
        };
        if len > 1 << 20 {
            return Err("client frame too large");
        }
        if b.len() < at + 4 + len {
            break;
        }
        let key: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
        at += 4;
        let mut payload = b[at..at + len].to_vec();
        apply_mask(&mut payload, key, 0);
        frames.push(ClientFrame {
            opcode: b[0] & 0x0F,
            payload,
        });
        pos += at + len;
    }
    buf.drain(..pos);
    Ok(frames)
}

/// Takes every complete CRLF line from the front of `buf`.
pub(crate) fn take_lines(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', buf) {
        let end = if nl > start && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        lines.push(buf[start..end].to_vec());
        start = nl + 1;
    }
    buf.drain(..start);
    lines
}

/// The string value of top-level `"key":"…"` or the raw token of `"key":…` in a small JSON
/// control message (our clients' requests are flat objects).
pub(crate) fn json_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = json.find(&pat)? + pat.len();
    let rest = json[at..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|end| &s[..end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The strings of the array value of `key` (`"params":["a@b","c@d"]`), as a client sends
/// stream names: no escapes. Empty when the key or the array is missing.
pub(crate) fn json_strings<'a>(json: &'a str, key: &str) -> Vec<&'a str> {
    let pat = format!("\"{key}\":");
    let Some(at) = json.find(&pat).map(|at| at + pat.len()) else {
        return Vec::new();
    };
    let Some(rest) = json[at..].trim_start().strip_prefix('[') else {
        return Vec::new();
    };
    let Some(end) = rest.find(']') else {
        return Vec::new();
    };
    rest[..end]
        .split(',')
        .filter_map(|s| s.trim().strip_prefix('"')?.strip_suffix('"'))
        .collect()
}

/// The streams a combined-stream path names (`/stream?streams=a@b/c@d`), in order.
pub(crate) fn path_streams(path: &str) -> Vec<&str> {
    path.split_once("streams=")
        .map(|(_, list)| list.split('&').next().unwrap_or(""))
        .map(|list| list.split('/').filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_control_messages() {
        let m = r#"{"method":"SUBSCRIBE","params":["a@b"],"id":7}"#;
        assert_eq!(json_field(m, "method"), Some("SUBSCRIBE"));
        assert_eq!(json_field(m, "id"), Some("7"));
        let u = r#"{"id":"e2a8-uuid","method":"time"}"#;
        assert_eq!(json_field(u, "id"), Some("e2a8-uuid"));
        let s = r#"{"method":"SUBSCRIBE","params":["a@b", "c@d"],"id":8}"#;
        assert_eq!(json_strings(s, "params"), vec!["a@b", "c@d"]);
        assert!(json_strings(r#"{"method":"LIST_SUBSCRIPTIONS","id":9}"#, "params").is_empty());
        assert!(json_strings(r#"{"params":[],"id":9}"#, "params").is_empty());
        assert_eq!(
            path_streams("/stream?streams=btcusdt@aggTrade/ethusdt@depth20&x=1"),
            vec!["btcusdt@aggTrade", "ethusdt@depth20"]
        );
        assert!(path_streams("/ws").is_empty());
    }

    #[test]
    fn lines_split_on_crlf() {
        let mut buf = b"a\r\nb\r\npartial".to_vec();
        assert_eq!(take_lines(&mut buf), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(buf, b"partial");
    }
}
