//! Arbitrary server bytes into a fresh client TLS session (after its ClientHello) with
//! arbitrary read splits. Checks: no panic; every read is offered at least 64 KiB (a read of
//! 0 bytes would look like end of stream), however long rustls waits for a record or joins
//! a handshake message; the outcome (error, or still handshaking) does not depend on the
//! splits.
#![no_main]

use feedwire_core::rustls::RootCertStore;
use feedwire_core::{tls_config_with_roots, HandshakeOnly, TlsSession};
use libfuzzer_sys::fuzz_target;

/// The smallest read a session must offer, bytes.
const MIN_READ: usize = 64 * 1024;

fn run(data: &[u8], splits: &[u8]) -> (Option<String>, bool) {
    let config = tls_config_with_roots(RootCertStore::empty());
    let mut tls = TlsSession::new(config, "localhost").expect("a valid name");
    while tls.poll_transmit().is_some() {}
    let (mut fed, mut i) = (0, 0);
    while fed < data.len() {
        let want = splits
            .get(i % splits.len().max(1))
            .map_or(usize::MAX, |&s| usize::from(s) * 64 + 1);
        let buf = tls.read_buf();
        assert!(buf.len() >= MIN_READ, "a read offered {} bytes", buf.len());
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
