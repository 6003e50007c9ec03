//! Arbitrary server bytes into a fresh client TLS session (after its ClientHello) with
//! arbitrary read splits, and the ciphertext buffer released (as a quiet stream's is) before
//! some reads. Checks: no panic; every read is offered at least 64 KiB, or 4 KiB once the
//! buffer was released (a read of 0 bytes would look like end of stream), however long rustls
//! waits for a record or joins a handshake message; the outcome (error, or still
//! handshaking) does not depend on the splits or the releases.
#![no_main]

use feedwire_core::rustls::RootCertStore;
use feedwire_core::{tls_config_with_roots, HandshakeOnly, TlsSession};
use libfuzzer_sys::fuzz_target;

/// The smallest read a session must offer, bytes.
const MIN_READ: usize = 64 * 1024;

/// The smallest read a session must offer after a release, bytes.
const MIN_READ_AFTER_RELEASE: usize = 4 * 1024;

fn run(data: &[u8], splits: &[u8]) -> (Option<String>, bool) {
    let config = tls_config_with_roots(RootCertStore::empty());
    let mut tls = TlsSession::new(config, "localhost").expect("a valid name");
    while tls.poll_transmit().is_some() {}
    let (mut fed, mut i) = (0, 0);
    let mut min_read = MIN_READ;
    while fed < data.len() {
        let split = splits.get(i % splits.len().max(1));
        // The top bit of a split: release first (kept if a partial record waits).
        if split.is_some_and(|&s| s & 0x80 != 0) && tls.release_read_buffer() {
            min_read = MIN_READ_AFTER_RELEASE;
        }
        let want = split.map_or(usize::MAX, |&s| usize::from(s & 0x7f) * 128 + 1);
        let buf = tls.read_buf();
        assert!(buf.len() >= min_read, "a read offered {} bytes", buf.len());
        let n = buf.len().min(want).min(data.len() - fed);
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
