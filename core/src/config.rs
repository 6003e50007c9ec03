//! Limits and policy for the WebSocket engine, with safe defaults.

use std::time::Duration;

use crate::error::ConfigError;

/// Configuration of a [`crate::WebSocketClient`]. Every limit has a safe default; all sizes
/// are bytes.
///
/// Build it with struct update syntax: `WsConfig { max_read_size: 64 * 1024, ..WsConfig::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsConfig {
    /// Most bytes handed to the transport per read (default 256 KiB). Reads start at 1 KiB;
    /// one that comes back full raises the next to this size at once when the transport
    /// reads into uninitialised room (`read_spare`, as both adapters do; only the bytes a
    /// read writes are memory touched), or doubles it when it reads into bytes (`read_buf`,
    /// each new one zeroed first). Reads that stay small shrink it again (the engine's
    /// `review_read_size`, once a period: the stream's `release_read_memory`). So a quiet
    /// connection never holds a full-size buffer, one that had a burst does not keep it, and
    /// one that keeps up reads what has just arrived. For a stream behind its
    /// feed, larger reads cost less per read (each has its system call and its TCP window
    /// update) but more per byte once a read no longer fits a core's L2 together with the
    /// kernel's copy of it: then the bytes are decoded from L3. 256 KiB keeps both inside a
    /// 1 MiB L2 (measured against 1 MiB reads on 9 KB messages: about 10% less CPU per
    /// message; on small WebSocket messages level; on CRLF lines of 0.2 KB 2-7% more, the
    /// extra reads' window updates). Larger frames are reassembled across reads. A stream
    /// at full-size reads holds a block of twice this. At most 1 GiB.
    pub max_read_size: usize,
    /// Largest accepted frame payload (default 16 MiB); larger fails with 1009.
    pub max_frame_size: usize,
    /// Largest accepted message, all fragments together (default 16 MiB); larger fails
    /// with 1009.
    pub max_message_size: usize,
    /// Largest accepted handshake response head, and largest body kept from a refused
    /// upgrade (default 16 KiB).
    pub max_handshake_size: usize,
    /// How long to wait for the peer's Close after sending ours (default 5 s).
    pub close_timeout: Duration,
    /// Split outgoing messages into frames of at most this many payload bytes
    /// (default: never split).
    pub fragment_size: Option<usize>,
    /// Subprotocols offered in `Sec-WebSocket-Protocol`, in order of preference.
    pub subprotocols: Vec<String>,
    /// Extra request headers, e.g. an API key. Names must be HTTP tokens; values must not
    /// contain CR, LF or NUL.
    pub extra_headers: Vec<(String, String)>,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            max_read_size: 256 * 1024,
            max_frame_size: 16 * 1024 * 1024,
            max_message_size: 16 * 1024 * 1024,
            max_handshake_size: 16 * 1024,
            close_timeout: Duration::from_secs(5),
            fragment_size: None,
            subprotocols: Vec::new(),
            extra_headers: Vec::new(),
        }
    }
}

/// Largest `max_read_size`, bytes: the read buffer is a block of twice the read size, and
/// reads past a few MiB gain nothing (`bench/ANALYSIS.md`: 256 KiB beats 1 MiB).
pub(crate) const MAX_READ_SIZE: usize = 1 << 30;

impl WsConfig {
    /// Checks limits and header syntax; called by the engine's constructor.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let limits = [
            ("max_read_size", self.max_read_size),
            ("max_frame_size", self.max_frame_size),
            ("max_message_size", self.max_message_size),
            ("max_handshake_size", self.max_handshake_size),
            ("fragment_size", self.fragment_size.unwrap_or(1)),
        ];
        if let Some((name, _)) = limits.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::ZeroLimit(name));
        }
        if self.max_read_size > MAX_READ_SIZE {
            return Err(ConfigError::LimitTooLarge {
                name: "max_read_size",
                max: MAX_READ_SIZE,
            });
        }
        for (name, value) in &self.extra_headers {
            let bad_value = value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0));
            if !is_token(name) || bad_value {
                return Err(ConfigError::InvalidHeader(name.clone()));
            }
        }
        if let Some(p) = self.subprotocols.iter().find(|p| !is_token(p)) {
            return Err(ConfigError::InvalidSubprotocol(p.clone()));
        }
        Ok(())
    }
}

/// RFC 9110 §5.6.2 token.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
