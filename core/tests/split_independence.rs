//! Property: for any sequence of valid server frames and any split of the byte stream into
//! reads (1-byte reads included, `max_read_size` from 1 byte up), the events are identical,
//! and so are the bytes the client sends (pongs).

mod common;

use bytes::BufMut;
use common::*;
use feedwire_core::testing::{accept_response, server_frame};
use feedwire_core::{Event, WebSocketClient, WsConfig};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Item {
    /// A message (text if `text`) sent as `fragments` frames.
    Message {
        text: bool,
        len: usize,
        fragments: usize,
    },
    Ping(usize),
    Pong(usize),
}

fn item() -> impl Strategy<Value = Item> {
    let len = prop_oneof![
        4 => prop::sample::select(vec![0usize, 1, 125, 126, 127, 65535, 65536]),
        6 => 0usize..2000,
        1 => 0usize..70_000,
    ];
    prop_oneof![
        6 => (any::<bool>(), len, 1usize..4).prop_map(|(text, len, fragments)| Item::Message { text, len, fragments }),
        1 => (0usize..=125).prop_map(Item::Ping),
        1 => (0usize..=125).prop_map(Item::Pong),
    ]
}

/// Text payload of `len` bytes with multi-byte characters, so fragment and read boundaries
/// fall inside characters.
fn text_payload(len: usize) -> Vec<u8> {
    let mut s = String::with_capacity(len + 4);
    let alphabet = ['a', 'é', '€', '𝄞', '{', '"'];
    let mut i = 0;
    while s.len() < len {
        s.push(alphabet[i % alphabet.len()]);
        i += 1;
    }
    while s.len() > len {
        s.pop();
    }
    s.into_bytes()
}

fn encode(items: &[Item], close: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        match *item {
            Item::Message {
                text,
                len,
                fragments,
            } => {
                let payload = if text {
                    text_payload(len)
                } else {
                    (0..len).map(|i| i as u8).collect()
                };
                let step = payload.len().div_ceil(fragments).max(1);
                let pieces: Vec<&[u8]> = if payload.is_empty() {
                    vec![&[]]
                } else {
                    payload.chunks(step).collect()
                };
                for (i, piece) in pieces.iter().enumerate() {
                    let opcode = if i > 0 {
                        0
                    } else if text {
                        1
                    } else {
                        2
                    };
                    out.extend(server_frame(i + 1 == pieces.len(), opcode, piece));
                }
            }
            Item::Ping(n) => out.extend(server_frame(true, 9, &vec![b'p'; n])),
            Item::Pong(n) => out.extend(server_frame(true, 10, &vec![b'q'; n])),
        }
    }
    if close {
        out.extend(server_frame(true, 8, &close_payload(1000, "done")));
    }
    out
}

/// Runs a client over `stream`, reading `chunks[i % len]` bytes at a time (capped by what
/// `read_buf` offers); returns the events and everything the client sent. `spare`: every
/// other read goes through `read_spare` (the same room, uninitialised) instead.
fn run(
    stream: &[u8],
    max_read_size: usize,
    chunks: &[usize],
    spare: bool,
) -> (Vec<Event>, Vec<u8>) {
    let config = WsConfig {
        max_read_size,
        ..WsConfig::default()
    };
    let mut ws = WebSocketClient::new(URL, config, SEED).unwrap();
    let request = drain_tx(&mut ws);
    let mut input = accept_response(&request);
    input.extend_from_slice(stream);
    let (mut evs, mut sent) = (Vec::new(), Vec::new());
    let mut fed = 0;
    let mut i = 0;
    while fed < input.len() {
        let want = chunks[i % chunks.len()].min(input.len() - fed);
        let n = if spare && i % 2 == 0 {
            let mut room = ws.read_spare();
            let n = room.remaining_mut().min(want);
            room.put_slice(&input[fed..fed + n]);
            n
        } else {
            let buf = ws.read_buf();
            let n = buf.len().min(want);
            buf[..n].copy_from_slice(&input[fed..fed + n]);
            n
        };
        ws.handle_read(n);
        fed += n;
        i += 1;
        evs.extend(std::iter::from_fn(|| ws.poll_event()));
        sent.extend(drain_tx(&mut ws));
    }
    (evs, sent)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_split_yields_the_same_events(
        items in prop::collection::vec(item(), 1..12),
        close in any::<bool>(),
        max_read_size in prop_oneof![Just(1usize), 2usize..64, 64usize..70_000],
        chunks in prop::collection::vec(1usize..5000, 1..8),
    ) {
        let stream = encode(&items, close);
        let (reference, ref_sent) = run(&stream, 256 * 1024, &[usize::MAX], false);
        let (evs, sent) = run(&stream, max_read_size, &chunks, false);
        prop_assert_eq!(&evs, &reference);
        prop_assert_eq!(&sent, &ref_sent);
        let (spare_evs, spare_sent) = run(&stream, max_read_size, &chunks, true);
        prop_assert_eq!(&spare_evs, &reference);
        prop_assert_eq!(spare_sent, ref_sent);
        let messages = evs.iter().filter(|e| matches!(e, Event::Message(_))).count();
        let expected = items.iter().filter(|i| matches!(i, Item::Message { .. })).count();
        prop_assert_eq!(messages, expected);
        prop_assert!(!evs.iter().any(|e| matches!(e, Event::Failed(_))), "{:?}", evs.last());
    }

    #[test]
    fn one_byte_reads_yield_the_same_events(items in prop::collection::vec(item(), 1..6)) {
        let items: Vec<Item> = items.into_iter().map(|i| match i {
            Item::Message { text, len, fragments } => Item::Message { text, len: len.min(3000), fragments },
            other => other,
        }).collect();
        let stream = encode(&items, true);
        let (reference, ref_sent) = run(&stream, 256 * 1024, &[usize::MAX], false);
        let (evs, sent) = run(&stream, 1, &[1], true);
        prop_assert_eq!(evs, reference);
        prop_assert_eq!(sent, ref_sent);
    }
}
