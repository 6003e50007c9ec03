//! The opening handshake, client side (RFC 6455 §4.1): the upgrade request and the checks on
//! the server's response.

mod request;
mod response;

pub(crate) use request::build_request;
pub(crate) use response::{parse_response, ParsedResponse};

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// RFC 6455 §1.3: the GUID appended to the key before hashing.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a given `Sec-WebSocket-Key`: base64(SHA-1(key + GUID)).
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(ACCEPT_GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// `Sec-WebSocket-Key`: 16 random bytes, base64.
pub(crate) fn encode_key(nonce: &[u8; 16]) -> String {
    base64::engine::general_purpose::STANDARD.encode(nonce)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc_6455_section_1_3_example() {
        assert_eq!(
            super::accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
