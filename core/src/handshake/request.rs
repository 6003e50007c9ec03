//! The HTTP/1.1 upgrade request (RFC 6455 §4.1).

use crate::config::WsConfig;
use crate::endpoint::Endpoint;

/// The request head for `endpoint`, with the base64 `key`. Headers were validated by
/// [`WsConfig::validate`], so nothing here can inject CR/LF.
pub(crate) fn build_request(endpoint: &Endpoint, key: &str, config: &WsConfig) -> Vec<u8> {
    let mut r = String::with_capacity(256);
    r.push_str("GET ");
    r.push_str(&endpoint.resource);
    r.push_str(" HTTP/1.1\r\nHost: ");
    r.push_str(&endpoint.host_header);
    r.push_str("\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ");
    r.push_str(key);
    r.push_str("\r\nSec-WebSocket-Version: 13\r\n");
    if !config.subprotocols.is_empty() {
        r.push_str("Sec-WebSocket-Protocol: ");
        r.push_str(&config.subprotocols.join(", "));
        r.push_str("\r\n");
    }
    for (name, value) in &config.extra_headers {
        r.push_str(name);
        r.push_str(": ");
        r.push_str(value.trim());
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_head() {
        let endpoint = Endpoint::parse("ws://example.com:8080/stream?streams=a@b").unwrap();
        let config = WsConfig {
            subprotocols: vec!["json".into(), "v2".into()],
            extra_headers: vec![("X-MBX-APIKEY".into(), "k3y".into())],
            ..WsConfig::default()
        };
        let req = build_request(&endpoint, "dGhlIHNhbXBsZSBub25jZQ==", &config);
        assert_eq!(
            String::from_utf8(req).unwrap(),
            "GET /stream?streams=a@b HTTP/1.1\r\nHost: example.com:8080\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: json, v2\r\n\
             X-MBX-APIKEY: k3y\r\n\r\n"
        );
    }
}
