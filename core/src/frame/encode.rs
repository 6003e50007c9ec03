//! Client frame headers (RFC 6455 §5.2): always masked (§5.3), minimal length encoding.

use super::Opcode;

/// Largest client frame header: 2 + 8 (64-bit length) + 4 (mask key).
pub(crate) const MAX_HEADER_LEN: usize = 14;

/// Writes a masked frame header into `out`; returns the header length in bytes.
pub(crate) fn encode_header(
    out: &mut [u8; MAX_HEADER_LEN],
    fin: bool,
    opcode: Opcode,
    payload_len: usize,
    key: [u8; 4],
) -> usize {
    out[0] = (u8::from(fin) << 7) | opcode.bits();
    let key_at = if payload_len <= 125 {
        out[1] = 0x80 | payload_len as u8;
        2
    } else if payload_len <= usize::from(u16::MAX) {
        out[1] = 0x80 | 126;
        out[2..4].copy_from_slice(&(payload_len as u16).to_be_bytes());
        4
    } else {
        out[1] = 0x80 | 127;
        out[2..10].copy_from_slice(&(payload_len as u64).to_be_bytes());
        10
    };
    out[key_at..key_at + 4].copy_from_slice(&key);
    key_at + 4
}

/// Appends an unmasked frame as a server sends it (RFC 6455 §5.2), with raw `opcode` bits
/// (reserved ones included, so tests can send them). For servers and test peers; clients
/// always mask.
pub fn push_server_frame(out: &mut Vec<u8>, fin: bool, opcode: u8, payload: &[u8]) {
    out.push((u8::from(fin) << 7) | (opcode & 0x0F));
    match payload.len() {
        n @ 0..=125 => out.push(n as u8),
        n @ 126..=65535 => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_length_encodings() {
        let mut h = [0; MAX_HEADER_LEN];
        let key = [1, 2, 3, 4];
        assert_eq!(encode_header(&mut h, true, Opcode::Text, 125, key), 6);
        assert_eq!(&h[..6], &[0x81, 0x80 | 125, 1, 2, 3, 4]);
        assert_eq!(encode_header(&mut h, false, Opcode::Binary, 126, key), 8);
        assert_eq!(&h[..8], &[0x02, 0x80 | 126, 0, 126, 1, 2, 3, 4]);
        assert_eq!(encode_header(&mut h, true, Opcode::Ping, 65535, key), 8);
        assert_eq!(&h[..4], &[0x89, 0x80 | 126, 0xFF, 0xFF]);
        assert_eq!(encode_header(&mut h, true, Opcode::Close, 65536, key), 14);
        assert_eq!(&h[..10], &[0x88, 0x80 | 127, 0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&h[10..14], &key);
    }
}
