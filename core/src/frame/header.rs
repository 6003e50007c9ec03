//! Frame header parsing (RFC 6455 §5.2) with the checks that need only the header, in a fixed
//! order: RSV bits, opcode, fragmented control, control length, mask bit, 64-bit length.

use crate::error::ProtocolError;

/// Frame opcodes that are not reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    pub(crate) fn is_control(self) -> bool {
        matches!(self, Self::Close | Self::Ping | Self::Pong)
    }

    pub(crate) fn bits(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    fn from_bits(bits: u8) -> Result<Self, ProtocolError> {
        Ok(match bits {
            0x0 => Self::Continuation,
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            other => return Err(ProtocolError::ReservedOpcode(other)),
        })
    }
}

/// A parsed, checked server frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) fin: bool,
    pub(crate) opcode: Opcode,
    /// Bytes of header: 2, 4 or 10 (server frames carry no mask key).
    pub(crate) header_len: usize,
    /// Payload bytes. INVARIANT: `<= max_frame_size` (checked here), so it fits `usize`.
    pub(crate) payload_len: usize,
}

impl FrameHeader {
    /// Header plus payload, bytes.
    pub(crate) fn frame_len(&self) -> usize {
        self.header_len + self.payload_len
    }
}

/// Parses the header at the start of `buf`. `Ok(None)` means more bytes are needed.
pub(crate) fn parse_header(
    buf: &[u8],
    max_frame_size: usize,
) -> Result<Option<FrameHeader>, ProtocolError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    let rsv = (b0 >> 4) & 0b111;
    if rsv != 0 {
        return Err(ProtocolError::ReservedBits(rsv));
    }
    let fin = b0 & 0x80 != 0;
    let opcode = Opcode::from_bits(b0 & 0x0F)?;
    let len7 = b1 & 0x7F;
    if opcode.is_control() {
        if !fin {
            return Err(ProtocolError::FragmentedControlFrame);
        }
        if len7 > 125 {
            // Report the declared length, so wait for its bytes: the error must not depend
            // on where a read boundary fell.
            return match declared_len(buf, len7) {
                Some(declared) => Err(ProtocolError::ControlFrameTooLong(declared)),
                None => Ok(None),
            };
        }
    }
    if b1 & 0x80 != 0 {
        return Err(ProtocolError::MaskedFrame);
    }
    let (header_len, len) = match len7 {
        126 => match buf.get(2..4) {
            Some(b) => (4, u64::from(u16::from_be_bytes([b[0], b[1]]))),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let len = u64::from_be_bytes(b.try_into().expect("slice of 8 bytes"));
                if len >> 63 != 0 {
                    return Err(ProtocolError::LengthTopBitSet);
                }
                (10, len)
            }
            None => return Ok(None),
        },
        n => (2, u64::from(n)),
    };
    if len > max_frame_size as u64 {
        return Err(ProtocolError::FrameTooLarge {
            len,
            max: max_frame_size,
        });
    }
    Ok(Some(FrameHeader {
        fin,
        opcode,
        header_len,
        payload_len: len as usize,
    }))
}

/// The extended length, if its bytes are present; for error reports only.
fn declared_len(buf: &[u8], len7: u8) -> Option<u64> {
    match len7 {
        126 => buf
            .get(2..4)
            .map(|b| u64::from(u16::from_be_bytes([b[0], b[1]]))),
        _ => buf
            .get(2..10)
            .map(|b| u64::from_be_bytes(b.try_into().expect("slice of 8 bytes"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn section_5_2_lengths_7_16_64_bit() {
        assert_eq!(
            parse_header(&[0x81, 5], MAX),
            Ok(Some(FrameHeader {
                fin: true,
                opcode: Opcode::Text,
                header_len: 2,
                payload_len: 5
            }))
        );
        assert_eq!(
            parse_header(&[0x82, 126, 0x01, 0x00], MAX)
                .unwrap()
                .unwrap()
                .payload_len,
            256
        );
        let h = parse_header(&[0x02, 127, 0, 0, 0, 0, 0, 1, 0, 0], MAX)
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.fin, h.opcode, h.header_len, h.payload_len),
            (false, Opcode::Binary, 10, 65536)
        );
    }

    #[test]
    fn section_5_2_partial_headers_need_more() {
        assert_eq!(parse_header(&[], MAX), Ok(None));
        assert_eq!(parse_header(&[0x81], MAX), Ok(None));
        assert_eq!(parse_header(&[0x81, 126, 1], MAX), Ok(None));
        assert_eq!(
            parse_header(&[0x81, 127, 0, 0, 0, 0, 0, 0, 1], MAX),
            Ok(None)
        );
    }

    #[test]
    fn section_5_2_rsv_opcode_and_top_bit() {
        assert_eq!(
            parse_header(&[0xC1, 0], MAX),
            Err(ProtocolError::ReservedBits(0b100))
        );
        assert_eq!(
            parse_header(&[0x91, 0], MAX),
            Err(ProtocolError::ReservedBits(0b001))
        );
        for op in [3u8, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            assert_eq!(
                parse_header(&[0x80 | op, 0], MAX),
                Err(ProtocolError::ReservedOpcode(op))
            );
        }
        assert_eq!(
            parse_header(&[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1], MAX),
            Err(ProtocolError::LengthTopBitSet)
        );
    }

    #[test]
    fn section_5_1_masked_server_frame() {
        assert_eq!(
            parse_header(&[0x81, 0x85, 1, 2, 3, 4], MAX),
            Err(ProtocolError::MaskedFrame)
        );
    }

    #[test]
    fn section_5_5_control_frames() {
        assert_eq!(
            parse_header(&[0x09, 0], MAX),
            Err(ProtocolError::FragmentedControlFrame)
        );
        assert_eq!(
            parse_header(&[0x89, 126, 0, 126], MAX),
            Err(ProtocolError::ControlFrameTooLong(126))
        );
        assert!(parse_header(&[0x89, 125], MAX).unwrap().is_some());
    }

    #[test]
    fn frame_over_the_limit_is_1009() {
        let e = parse_header(&[0x82, 126, 0x10, 0x00], 4095).unwrap_err();
        assert_eq!(
            e,
            ProtocolError::FrameTooLarge {
                len: 4096,
                max: 4095
            }
        );
        assert_eq!(e.close_code(), 1009);
        // The limit itself is allowed: `max_frame_size` is the largest frame accepted.
        let at_limit = parse_header(&[0x82, 126, 0x10, 0x00], 4096)
            .unwrap()
            .unwrap();
        assert_eq!(at_limit.payload_len, 4096);
    }
}
