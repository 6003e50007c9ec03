//! Arbitrary bytes into a line stream with arbitrary read splits, every other read through
//! `read_spare`. Checks: no panic; the lines (and any error) do not depend on the splits; no
//! line contains the CRLF delimiter.
#![no_main]

use bytes::BufMut;
use feedwire_core::{Delimiter, LineClient, LineEvent};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8], max_read_size: usize, splits: &[u8]) -> Vec<LineEvent> {
    let mut c = LineClient::new(Delimiter::CrLf, max_read_size, 4096);
    let mut events = Vec::new();
    let (mut fed, mut i) = (0, 0);
    while fed < data.len() {
        let want = splits
            .get(i % splits.len().max(1))
            .map_or(usize::MAX, |&s| usize::from(s) + 1);
        // Every other read through the room as uninitialised memory, as a `recv` into spare
        // capacity would write it: the same room, the same events.
        let n = if i % 2 == 1 {
            let mut room = c.read_spare();
            let n = room.remaining_mut().min(want).min(data.len() - fed);
            room.put_slice(&data[fed..fed + n]);
            n
        } else {
            let buf = c.read_buf();
            let n = buf.len().min(want).min(data.len() - fed);
            buf[..n].copy_from_slice(&data[fed..fed + n]);
            n
        };
        c.handle_read(n);
        fed += n;
        i += 1;
        events.extend(std::iter::from_fn(|| c.poll_event()));
    }
    c.handle_eof();
    events.extend(std::iter::from_fn(|| c.poll_event()));
    events
}

fuzz_target!(|input: &[u8]| {
    let [control, nsplits, rest @ ..] = input else {
        return;
    };
    let nsplits = usize::from(*nsplits % 8).min(rest.len());
    let (splits, data) = rest.split_at(nsplits);
    let reference = run(data, 64 * 1024, &[]);
    let split = run(data, 1 + usize::from(*control), splits);
    assert_eq!(reference, split, "lines depend on read splits");
    for e in &reference {
        if let LineEvent::Line(l) = e {
            assert!(
                !l.windows(2).any(|w| w == b"\r\n"),
                "delimiter inside a line"
            );
        }
    }
});
