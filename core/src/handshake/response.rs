//! Parsing and checking the server's handshake response head (RFC 6455 §4.1, steps 1-6 of
//! the client's validation), with httparse: no allocation until the head is accepted.

use std::time::Duration;

use bytes::Bytes;

use crate::error::HandshakeError;

/// Most response headers accepted; more is a malformed (or hostile) response.
const MAX_HEADERS: usize = 64;

/// A complete response head.
#[derive(Debug)]
pub(crate) enum ParsedResponse {
    /// 101 with every check passed.
    Accepted {
        /// Bytes of the head, including the final CRLFCRLF.
        head_len: usize,
        headers: Vec<(String, Bytes)>,
        subprotocol: Option<String>,
    },
    /// Any other status: the caller collects the body, then fails.
    Refused {
        head_len: usize,
        status: u16,
        reason: String,
        /// `Content-Length`, when given.
        content_length: Option<usize>,
        /// `Retry-After` in seconds, when given in that form.
        retry_after: Option<Duration>,
    },
}

/// Parses `buf` as a response head. `Ok(None)`: incomplete, read more (the caller enforces
/// the size cap).
pub(crate) fn parse_response(
    buf: &[u8],
    expected_accept: &str,
    offered_subprotocols: &[String],
) -> Result<Option<ParsedResponse>, HandshakeError> {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut storage);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HandshakeError::Malformed("more than 64 headers"))
        }
        Err(_) => return Err(HandshakeError::Malformed("not an HTTP/1.1 response head")),
    };
    let status = resp.code.expect("complete response has a status");
    if status != 101 {
        let content_length = header(resp.headers, "content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse().ok());
        // Only the delta-seconds form: the HTTP-date form needs a wall clock, which the
        // core does not read (Binance sends seconds).
        let retry_after = header(resp.headers, "retry-after")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        return Ok(Some(ParsedResponse::Refused {
            head_len,
            status,
            reason: resp.reason.unwrap_or("").to_owned(),
            content_length,
            retry_after,
        }));
    }
    if resp.version != Some(1) {
        return Err(HandshakeError::Malformed("101 response must be HTTP/1.1"));
    }
    if !has_token(resp.headers, "upgrade", "websocket") {
        return Err(HandshakeError::MissingUpgrade);
    }
    if !has_token(resp.headers, "connection", "upgrade") {
        return Err(HandshakeError::MissingConnectionUpgrade);
    }
    match header(resp.headers, "sec-websocket-accept") {
        Some(v) if v.trim_ascii() == expected_accept.as_bytes() => {}
        _ => return Err(HandshakeError::AcceptMismatch),
    }
    if let Some(ext) = header(resp.headers, "sec-websocket-extensions") {
        if !ext.trim_ascii().is_empty() {
            return Err(HandshakeError::UnexpectedExtension(lossy(ext)));
        }
    }
    let subprotocol = match header(resp.headers, "sec-websocket-protocol") {
        None => None,
        Some(p) => {
            let p = lossy(p.trim_ascii());
            if !offered_subprotocols.contains(&p) {
                return Err(HandshakeError::UnexpectedSubprotocol(p));
            }
            Some(p)
        }
    };
    let headers = resp
        .headers
        .iter()
        .map(|h| (h.name.to_owned(), Bytes::copy_from_slice(h.value)))
        .collect();
    Ok(Some(ParsedResponse::Accepted {
        head_len,
        headers,
        subprotocol,
    }))
}

fn header<'a>(headers: &[httparse::Header<'a>], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// Whether any header `name` holds `token` in its comma-separated list (case-insensitive).
fn has_token(headers: &[httparse::Header<'_>], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(name))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

fn lossy(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

    fn parse(head: &str) -> Result<Option<ParsedResponse>, HandshakeError> {
        parse_response(head.as_bytes(), ACCEPT, &["json".to_owned()])
    }

    fn ok_head(extra: &str) -> String {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: keep-alive, \
             UPGRADE\r\nSec-WebSocket-Accept: {ACCEPT}\r\n{extra}\r\n"
        )
    }

    #[test]
    fn accepts_case_insensitive_tokens() {
        let head = ok_head("");
        match parse(&head).unwrap().unwrap() {
            ParsedResponse::Accepted {
                head_len,
                subprotocol,
                headers,
            } => {
                assert_eq!(head_len, head.len());
                assert_eq!(subprotocol, None);
                assert_eq!(headers.len(), 3);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partial_head_needs_more() {
        let head = ok_head("");
        for cut in 0..head.len() {
            assert!(parse(&head[..cut]).unwrap().is_none(), "cut {cut}");
        }
    }

    #[test]
    fn checks_upgrade_connection_accept() {
        let no_upgrade = format!(
            "HTTP/1.1 101 OK\r\nConnection: upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        );
        assert_eq!(
            parse(&no_upgrade).unwrap_err(),
            HandshakeError::MissingUpgrade
        );
        let no_conn = format!(
            "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
        );
        assert_eq!(
            parse(&no_conn).unwrap_err(),
            HandshakeError::MissingConnectionUpgrade
        );
        let bad_accept = "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Accept: xyz=\r\n\r\n";
        assert_eq!(
            parse(bad_accept).unwrap_err(),
            HandshakeError::AcceptMismatch
        );
    }

    #[test]
    fn rejects_unoffered_extension_and_subprotocol() {
        let ext = ok_head("Sec-WebSocket-Extensions: permessage-deflate\r\n");
        assert!(matches!(
            parse(&ext).unwrap_err(),
            HandshakeError::UnexpectedExtension(_)
        ));
        let proto = ok_head("Sec-WebSocket-Protocol: xml\r\n");
        assert!(matches!(
            parse(&proto).unwrap_err(),
            HandshakeError::UnexpectedSubprotocol(_)
        ));
        let offered = ok_head("Sec-WebSocket-Protocol: json\r\n");
        assert!(matches!(
            parse(&offered).unwrap().unwrap(),
            ParsedResponse::Accepted { subprotocol: Some(p), .. } if p == "json"
        ));
    }

    #[test]
    fn non_101_is_refused_with_status_and_length() {
        let head = "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 12\r\n\r\n";
        match parse(head).unwrap().unwrap() {
            ParsedResponse::Refused {
                status,
                reason,
                content_length,
                head_len,
                retry_after,
            } => {
                assert_eq!(
                    (status, reason.as_str(), content_length),
                    (429, "Too Many Requests", Some(12))
                );
                assert_eq!(head_len, head.len());
                assert_eq!(retry_after, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_only_in_seconds() {
        let retry = |value: &str| {
            let head = format!("HTTP/1.1 429 Too Many Requests\r\nRetry-After:{value}\r\n\r\n");
            match parse(&head).unwrap().unwrap() {
                ParsedResponse::Refused { retry_after, .. } => retry_after,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(retry(" 120 "), Some(std::time::Duration::from_secs(120)));
        assert_eq!(retry("0"), Some(std::time::Duration::ZERO));
        // The HTTP-date form needs a wall clock; junk is no value.
        assert_eq!(retry(" Wed, 21 Oct 2026 07:28:00 GMT"), None);
        assert_eq!(retry(" -5"), None);
        assert_eq!(retry(" 99999999999999999999999"), None);
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse("SSH-2.0-OpenSSH\r\n\r\n"),
            Err(HandshakeError::Malformed(_))
        ));
    }
}
