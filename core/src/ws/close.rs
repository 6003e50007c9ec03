//! Close frame payloads (RFC 6455 §5.5.1, §7.4).

use crate::error::{close_code, ProtocolError};

/// Checks a received Close payload; returns its code (1005 for an empty payload).
pub(crate) fn parse_close_payload(payload: &[u8]) -> Result<u16, ProtocolError> {
    match payload {
        [] => Ok(close_code::NO_STATUS),
        [_] => Err(ProtocolError::CloseFrameOneByte),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !close_code::is_sendable(code) {
                return Err(ProtocolError::InvalidCloseCode(code));
            }
            if simdutf8::basic::from_utf8(reason).is_err() {
                return Err(ProtocolError::InvalidCloseReason);
            }
            Ok(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_5_5_1_close_payloads() {
        assert_eq!(parse_close_payload(b""), Ok(1005));
        assert_eq!(
            parse_close_payload(b"\x03"),
            Err(ProtocolError::CloseFrameOneByte)
        );
        assert_eq!(parse_close_payload(b"\x03\xe8bye"), Ok(1000));
        assert_eq!(
            parse_close_payload(b"\x03\xe8\xff"),
            Err(ProtocolError::InvalidCloseReason)
        );
    }

    #[test]
    fn section_7_4_codes() {
        for ok in [
            1000u16, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999,
            4000, 4999,
        ] {
            assert_eq!(parse_close_payload(&ok.to_be_bytes()), Ok(ok), "{ok}");
        }
        for bad in [
            0u16, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            let e = parse_close_payload(&bad.to_be_bytes()).unwrap_err();
            assert_eq!(e, ProtocolError::InvalidCloseCode(bad));
            assert_eq!(e.close_code(), 1002);
        }
    }
}
