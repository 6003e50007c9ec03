//! Where a stream connects: parsed from `ws://`, `wss://` (WebSocket) or `tcp://`, `tls://`
//! (CRLF lines) URLs with the `url` crate.

use crate::error::ConfigError;

/// The URL schemes feedwire speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// WebSocket over plain TCP.
    Ws,
    /// WebSocket over TLS.
    Wss,
    /// CRLF-delimited lines over plain TCP.
    Tcp,
    /// CRLF-delimited lines over TLS.
    Tls,
}

impl Scheme {
    /// Whether the transport must wrap the connection in TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Self::Wss | Self::Tls)
    }

    /// Whether the stream speaks WebSocket (else CRLF lines).
    pub fn is_websocket(self) -> bool {
        matches!(self, Self::Ws | Self::Wss)
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Self::Ws => Some(80),
            Self::Wss => Some(443),
            Self::Tcp | Self::Tls => None,
        }
    }
}

/// A parsed stream address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Protocol and whether TLS wraps it.
    pub scheme: Scheme,
    /// Host name or IP literal, without IPv6 brackets: what DNS, the socket and TLS SNI take.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Value of the HTTP `Host` header: host (IPv6 in brackets), plus `:port` when it is not
    /// the scheme's default.
    pub host_header: String,
    /// Path and query for the request line, e.g. `/stream?streams=btcusdt@aggTrade`.
    pub resource: String,
    /// Addresses to connect to, in this order, instead of resolving `host` (which still
    /// names the server to TLS and in the `Host` header); empty: resolve `host`. From
    /// [`StreamConfig::connect_to`](crate::StreamConfig::connect_to).
    pub connect_to: Vec<std::net::SocketAddr>,
}

impl Endpoint {
    /// Parses a `ws://`, `wss://`, `tcp://` or `tls://` URL.
    pub fn parse(input: &str) -> Result<Self, ConfigError> {
        let url = url::Url::parse(input).map_err(|e| ConfigError::InvalidUrl(e.to_string()))?;
        let scheme = match url.scheme() {
            "ws" => Scheme::Ws,
            "wss" => Scheme::Wss,
            "tcp" => Scheme::Tcp,
            "tls" => Scheme::Tls,
            other => return Err(ConfigError::UnsupportedScheme(other.to_owned())),
        };
        if url.fragment().is_some() {
            return Err(ConfigError::FragmentInUrl);
        }
        let bracketed = url.host_str().ok_or(ConfigError::MissingHost)?;
        if bracketed.is_empty() {
            return Err(ConfigError::MissingHost);
        }
        let host = bracketed
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url
            .port()
            .or(scheme.default_port())
            .ok_or_else(|| ConfigError::InvalidUrl(format!("{input}: a port is required")))?;
        let host_header = match url.port() {
            Some(p) if Some(p) != scheme.default_port() => format!("{bracketed}:{p}"),
            _ => bracketed.to_owned(),
        };
        let mut resource = url.path().to_owned();
        if resource.is_empty() {
            resource.push('/');
        }
        if let Some(q) = url.query() {
            resource.push('?');
            resource.push_str(q);
        }
        Ok(Self {
            scheme,
            host,
            port,
            host_header,
            resource,
            connect_to: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_urls() {
        let e = Endpoint::parse("wss://stream.binance.com:9443/stream?streams=btcusdt@aggTrade")
            .unwrap();
        assert_eq!(e.scheme, Scheme::Wss);
        assert_eq!((e.host.as_str(), e.port), ("stream.binance.com", 9443));
        assert_eq!(e.host_header, "stream.binance.com:9443");
        assert_eq!(e.resource, "/stream?streams=btcusdt@aggTrade");
        let e = Endpoint::parse("ws://127.0.0.1").unwrap();
        assert_eq!(
            (e.port, e.host_header.as_str(), e.resource.as_str()),
            (80, "127.0.0.1", "/")
        );
        let e = Endpoint::parse("wss://example.com:443/ws").unwrap();
        assert_eq!(e.host_header, "example.com");
        let tls = [Scheme::Ws, Scheme::Wss, Scheme::Tcp, Scheme::Tls].map(Scheme::is_tls);
        assert_eq!(tls, [false, true, false, true]);
    }

    #[test]
    fn ipv6_hosts_keep_brackets_only_in_host_header() {
        let e = Endpoint::parse("ws://[::1]:9001/x").unwrap();
        assert_eq!(e.host, "::1");
        assert_eq!(e.host_header, "[::1]:9001");
    }

    #[test]
    fn line_urls_need_a_port() {
        let e = Endpoint::parse("tls://stream-api.betfair.com:443").unwrap();
        assert_eq!((e.scheme, e.port), (Scheme::Tls, 443));
        assert!(matches!(
            Endpoint::parse("tcp://localhost"),
            Err(ConfigError::InvalidUrl(_))
        ));
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(matches!(
            Endpoint::parse("http://x/"),
            Err(ConfigError::UnsupportedScheme(_))
        ));
        assert_eq!(
            Endpoint::parse("ws://x/#frag"),
            Err(ConfigError::FragmentInUrl)
        );
        assert!(matches!(
            Endpoint::parse("not a url"),
            Err(ConfigError::InvalidUrl(_))
        ));
    }
}
