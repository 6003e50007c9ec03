//! The fast lane of frame decoding: the frame nearly every market-data message arrives in —
//! final, unmasked, text or binary, complete in the buffer, within the limits — recognised
//! from its first two or four bytes. Anything else (control frames, fragments, reserved bits,
//! 64-bit lengths, incomplete frames, limit violations) is left to the general decoder, which
//! therefore alone decides every error and its close code.

use crate::ws::MessageKind;

/// A simple data frame at the start of `buf`: its kind, its header length and its payload
/// length (bytes). `None` when the frame is anything the general decoder must see.
/// `max_payload` is the smaller of the frame and message size limits (bytes).
#[inline]
pub(crate) fn simple_data_frame(
    buf: &[u8],
    max_payload: usize,
) -> Option<(MessageKind, usize, usize)> {
    let [b0, b1, ..] = *buf else {
        return None;
    };
    let kind = match b0 {
        0x81 => MessageKind::Text,
        0x82 => MessageKind::Binary,
        _ => return None,
    };
    let (header_len, len) = match b1 {
        0..=125 => (2, usize::from(b1)),
        126 => match buf.get(2..4) {
            Some(&[hi, lo]) => (4, usize::from(u16::from_be_bytes([hi, lo]))),
            _ => return None,
        },
        // 64-bit lengths are for large frames, where a header's cost does not matter; a set
        // top bit means masked, which a server must not do.
        _ => return None,
    };
    (len <= max_payload && buf.len() - header_len >= len).then_some((kind, header_len, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::server_frame;

    #[test]
    fn recognises_only_complete_final_unmasked_data_frames() {
        let text = server_frame(true, 1, b"hello");
        assert_eq!(
            simple_data_frame(&text, 100),
            Some((MessageKind::Text, 2, 5))
        );
        let binary = server_frame(true, 2, &[0; 300]);
        assert_eq!(
            simple_data_frame(&binary, 1000),
            Some((MessageKind::Binary, 4, 300))
        );
        assert_eq!(simple_data_frame(&binary, 299), None, "over the limit");
        assert_eq!(simple_data_frame(&binary[..303], 1000), None, "incomplete");
        assert_eq!(simple_data_frame(&binary[..3], 1000), None);
        assert_eq!(simple_data_frame(&[], 1000), None);
        for (fin, opcode) in [
            (false, 1),
            (true, 0),
            (true, 8),
            (true, 9),
            (true, 10),
            (true, 3),
        ] {
            let f = server_frame(fin, opcode, b"x");
            assert_eq!(simple_data_frame(&f, 100), None, "{fin} {opcode}");
        }
        let mut rsv = text.clone();
        rsv[0] |= 0x40;
        assert_eq!(simple_data_frame(&rsv, 100), None);
        let mut masked = text.clone();
        masked[1] |= 0x80;
        assert_eq!(simple_data_frame(&masked, 100), None);
        let long = server_frame(true, 1, &vec![b'a'; 70_000]);
        assert_eq!(simple_data_frame(&long, 100_000), None, "64-bit length");
    }
}
