//! UTF-8 validation of text messages against the standard library's. The first byte puts an
//! ASCII run in front of the text (0-8 KiB, so that the text crosses the vector and block
//! boundaries of the ASCII check), the second says where the message splits into two pieces.
//! Checks: the whole-message check and the streaming one agree with `std::str::from_utf8`.
#![no_main]

use feedwire_core::testing::TextValidator;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [pad, split, text @ ..] = input else { return };
    let mut message = vec![b'a'; usize::from(*pad) * 32];
    message.extend_from_slice(text);
    let expect = std::str::from_utf8(&message).is_ok();
    assert_eq!(TextValidator::whole(&message), expect, "whole message");
    let split = message.len() * usize::from(*split) / 255;
    let mut stream = TextValidator::default();
    let streamed = stream.feed(&message[..split]) && stream.feed_last(&message[split..]);
    assert_eq!(streamed, expect, "in two pieces split at {split}");
});
