//! The Pong the engine owes when it stopped queueing them: only the latest Ping's. RFC 6455
//! §5.5.3 lets an endpoint that has not yet sent the Pongs for earlier Pings answer only the
//! most recent one. Once the transport has left a few KiB unsent (its peer is not reading),
//! the engine keeps that one answer here, inline, and frames it when the transport next asks
//! for bytes ([`WebSocketClient::poll_transmit`](super::WebSocketClient::poll_transmit)): a
//! peer that floods Pings while not reading our Pongs costs 125 bytes, not a Pong per Ping.

/// Largest control-frame payload, bytes (RFC 6455 §5.5).
const MAX: usize = 125;

/// At most one Pong payload, the latest Ping's.
#[derive(Debug, Clone)]
pub(super) struct OwedPong {
    payload: [u8; MAX],
    /// `None` when nothing is owed.
    len: Option<u8>,
}

impl Default for OwedPong {
    fn default() -> Self {
        Self {
            payload: [0; MAX],
            len: None,
        }
    }
}

impl OwedPong {
    /// Owes the Pong for a Ping carrying `payload`, in place of any still owed. The decoder
    /// refuses control payloads over 125 bytes; a longer one here is cut to 125.
    pub(super) fn owe(&mut self, payload: &[u8]) {
        let len = payload.len().min(MAX);
        self.payload[..len].copy_from_slice(&payload[..len]);
        self.len = Some(len as u8);
    }

    /// Whether a Pong is owed.
    #[inline]
    pub(super) fn is_owed(&self) -> bool {
        self.len.is_some()
    }

    /// The payload owed, if any; afterwards nothing is owed.
    pub(super) fn take(&mut self) -> Option<&[u8]> {
        let len = usize::from(self.len.take()?);
        Some(&self.payload[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::OwedPong;

    #[test]
    fn only_the_latest_ping_is_owed_and_only_once() {
        let mut owed = OwedPong::default();
        assert_eq!(owed.take(), None);
        owed.owe(b"first, longer payload");
        owed.owe(b"second");
        assert_eq!(owed.take(), Some(&b"second"[..]));
        assert_eq!(owed.take(), None);
        owed.owe(b"");
        assert_eq!(
            owed.take(),
            Some(&b""[..]),
            "an empty Ping is still answered"
        );
    }
}
