//! Arbitrary server bytes into a fresh client TLS session (after its ClientHello) with
//! arbitrary read splits, and the ciphertext buffer released (as a quiet stream's is) before
//! some reads. Checks: no panic; every read is offered at least a page (a read of 0 bytes
//! would look like end of stream), however long rustls waits for a record or joins a
//! handshake message, and 64 KiB once four reads filled their offers since the start or the
//! last release; the outcome (error, or still handshaking) does not depend on
//! the splits or the releases.
#![no_main]

use feedwire_core::rustls::RootCertStore;
use feedwire_core::{tls_config_with_roots, HandshakeOnly, TlsSession};
use libfuzzer_sys::fuzz_target;

/// The smallest read a session offers once its reads have ramped up, bytes.
const FULL_READ: usize = 64 * 1024;

/// The smallest read a session offers at its start and after a release, bytes.
const FIRST_READ: usize = 4 * 1024;

fn run(data: &[u8], splits: &[u8]) -> (Option<String>, bool) {
    let config = tls_config_with_roots(RootCertStore::empty());
    let mut tls = TlsSession::new(config, "localhost").expect("a valid name");
    while tls.poll_transmit().is_some() {}
    let (mut fed, mut i) = (0, 0);
    // Reads since the start or the last release that filled their offers (up to four).
    let mut filled = 0;
    while fed < data.len() {
        let split = splits.get(i % splits.len().max(1));
        // The top bit of a split: release first (kept if a partial record waits).
        if split.is_some_and(|&s| s & 0x80 != 0) && tls.release_read_buffer() {
            filled = 0;
        }
        let want = split.map_or(usize::MAX, |&s| usize::from(s & 0x7f) * 128 + 1);
        let buf = tls.read_buf();
        let least = if filled >= 4 { FULL_READ } else { FIRST_READ };
        assert!(buf.len() >= least, "a read offered {} bytes", buf.len());
        let n = buf.len().min(want).min(data.len() - fed);
        if n == buf.len() && filled < 4 {
            filled += 1;
        }
        buf[..n].copy_from_slice(&data[fed..fed + n]);
        fed += n;
        i += 1;
        if let Err(e) = tls.handle_read(n, &mut HandshakeOnly) {
            return (Some(e.to_string()), tls.is_handshaking());
        }
        while tls.poll_transmit().is_some() {}
    }
    (None, tls.is_handshaking())
}

fuzz_target!(|input: &[u8]| {
    let [nsplits, rest @ ..] = input else {
        return;
    };
    let nsplits = usize::from(*nsplits % 8).min(rest.len());
    let (splits, data) = rest.split_at(nsplits);
    let reference = run(data, &[]);
    let split = run(data, splits);
    assert_eq!(reference, split, "the outcome depends on read splits");
});
