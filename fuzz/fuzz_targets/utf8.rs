//! UTF-8 validation of text messages against the standard library's. The first byte puts an
//! ASCII run in front of the text (0-8 KiB, so that the text crosses the vector and block
//! boundaries of the ASCII check), the second says where the message splits into two pieces,
//! the third where in memory it starts: 0-63 bytes into a buffer, so that the ASCII walk's
//! lead to the first vector boundary takes every length (an allocation alone starts on a
//! 16-byte boundary: 4 of AVX-512's 64 leads).
//! Checks: the whole-message check (per message, and in a fast lane compiled for the width)
//! and the streaming one agree with `std::str::from_utf8`, in each vector width this CPU
//! runs (AVX-512, AVX2, SSE2 with simdutf8), not only its widest.
#![no_main]

use feedwire_core::testing::TextValidator;
use feedwire_core::{limit_vector_width, VectorWidth};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [pad, split, shift, text @ ..] = input else {
        return;
    };
    let shift = usize::from(*shift % 64);
    let mut buffer = vec![b'a'; shift + usize::from(*pad) * 32];
    buffer.extend_from_slice(text);
    let message = &buffer[shift..];
    let expect = std::str::from_utf8(message).is_ok();
    let split = message.len() * usize::from(*split) / 255;
    for cap in [
        VectorWidth::Bits512,
        VectorWidth::Bits256,
        VectorWidth::Bits128,
    ] {
        let width = limit_vector_width(cap);
        assert_eq!(
            TextValidator::whole(message),
            expect,
            "whole message, {width:?}"
        );
        assert_eq!(
            TextValidator::whole_in_lane(message),
            expect,
            "in a lane, {width:?}"
        );
        let mut stream = TextValidator::default();
        let streamed = stream.feed(&message[..split]) && stream.feed_last(&message[split..]);
        assert_eq!(
            streamed, expect,
            "in two pieces split at {split}, {width:?}"
        );
    }
});
