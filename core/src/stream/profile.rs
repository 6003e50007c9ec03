//! Protocol messages of each profile, built as JSON around the request id (which is only
//! known when the message is actually sent, after pacing).

use super::clocks::Clocks;
use super::config::BetfairAuth;
use crate::route::{head_str, RequestId};

/// An outgoing control message: `before` + id as a JSON token + `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub(crate) before: String,
    pub(crate) after: String,
}

impl Template {
    pub(crate) fn render(&self, id: &RequestId) -> String {
        let mut out = String::with_capacity(self.before.len() + self.after.len() + 40);
        out.push_str(&self.before);
        id.write_json(&mut out);
        out.push_str(&self.after);
        out
    }
}

/// Whether `s` can go inside a JSON string literal as is.
pub(crate) fn is_plain_json_string(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Whether Betfair credentials can go into the `authentication` op as they are.
pub(crate) fn is_usable_auth(auth: &BetfairAuth) -> bool {
    is_plain_json_string(&auth.app_key) && is_plain_json_string(&auth.session)
}

/// The Binance streams a URL subscribes by itself: `/stream?streams=a/b/c` (combined) or
/// `/ws/<stream>` (raw; a name with an `@` — a user-data listen key has none and cannot be
/// unsubscribed). Percent-escapes are decoded; a name that cannot go into a request as is
/// (quotes, control characters) is left out. `resource` is the URL's path and query.
pub(crate) fn binance_url_streams(resource: &str) -> Vec<String> {
    let (path, query) = resource.split_once('?').unwrap_or((resource, ""));
    let names: Vec<String> = if path.ends_with("/stream") {
        url::form_urlencoded::parse(query.as_bytes())
            .filter(|(key, _)| key == "streams")
            .flat_map(|(_, value)| value.split('/').map(str::to_owned).collect::<Vec<String>>())
            .collect()
    } else if let Some(raw) = path.strip_prefix("/ws/").filter(|n| n.contains('@')) {
        url::form_urlencoded::parse(format!("s={raw}").as_bytes())
            .map(|(_, value)| value.into_owned())
            .collect()
    } else {
        Vec::new()
    };
    names
        .into_iter()
        .filter(|n| is_plain_json_string(n))
        .collect()
}

fn quoted_list(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(item);
        out.push('"');
    }
    out.push(']');
    out
}

/// Binance stream endpoint: `{"method":"SUBSCRIBE","params":[…],"id":N}` (and
/// UNSUBSCRIBE). Stream names were checked with [`is_plain_json_string`].
pub(crate) fn binance_method(method: &str, streams: &[String]) -> Template {
    let params = if streams.is_empty() {
        String::new()
    } else {
        format!(",\"params\":{}", quoted_list(streams))
    };
    Template {
        before: format!("{{\"method\":\"{method}\"{params},\"id\":"),
        after: "}".to_owned(),
    }
}

/// Binance WebSocket API: `{"id":"<uuid>","method":"…","params":…}`; `params` is JSON the
/// caller supplies.
pub(crate) fn binance_api_request(method: &str, params_json: Option<&str>) -> Template {
    let params = params_json
        .map(|p| format!(",\"params\":{p}"))
        .unwrap_or_default();
    Template {
        before: "{\"id\":".to_owned(),
        after: format!(",\"method\":\"{method}\"{params}}}"),
    }
}

/// Betfair `authentication`.
pub(crate) fn betfair_authentication(auth: &BetfairAuth) -> Template {
    Template {
        before: "{\"op\":\"authentication\",\"id\":".to_owned(),
        after: format!(
            ",\"appKey\":\"{}\",\"session\":\"{}\"}}",
            auth.app_key, auth.session
        ),
    }
}

/// Betfair `heartbeat`.
pub(crate) fn betfair_heartbeat() -> Template {
    Template {
        before: "{\"op\":\"heartbeat\",\"id\":".to_owned(),
        after: "}".to_owned(),
    }
}

/// A Betfair market or order subscription. Its JSON may be pretty-printed: line breaks go
/// out as spaces (the stream is one JSON object per line; JSON allows none inside strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BetfairSubscription {
    /// The filter object as JSON: `marketFilter` (markets) or `orderFilter` (orders).
    pub filter_json: String,
    /// `marketDataFilter` JSON (markets only).
    pub data_filter_json: Option<String>,
    /// `heartbeatMs`: the server sends a heartbeat after this much silence.
    pub heartbeat_ms: Option<u64>,
    /// `conflateMs`.
    pub conflate_ms: Option<u64>,
}

impl BetfairSubscription {
    /// The same subscription with the line breaks of its JSON made spaces: sent as they were,
    /// they split the request into lines Betfair cannot parse, and a subscription set before
    /// the login (or resent after a reconnect) failed without a word.
    pub(crate) fn on_one_line(mut self) -> Self {
        let one_line = |json: &mut String| {
            if json.contains(['\r', '\n']) {
                *json = json.replace(['\r', '\n'], " ");
            }
        };
        one_line(&mut self.filter_json);
        if let Some(json) = self.data_filter_json.as_mut() {
            one_line(json);
        }
        self
    }
}

/// Betfair `marketSubscription` / `orderSubscription`, resuming from `clocks` if known.
pub(crate) fn betfair_subscription(
    op: &str,
    filter_key: &str,
    sub: &BetfairSubscription,
    clocks: &Clocks,
) -> Template {
    let mut after = String::new();
    if let Some(ms) = sub.heartbeat_ms {
        after.push_str(&format!(",\"heartbeatMs\":{ms}"));
    }
    if let Some(ms) = sub.conflate_ms {
        after.push_str(&format!(",\"conflateMs\":{ms}"));
    }
    after.push_str(&format!(",\"{filter_key}\":{}", sub.filter_json));
    if let Some(f) = &sub.data_filter_json {
        after.push_str(&format!(",\"marketDataFilter\":{f}"));
    }
    for (key, value) in [("initialClk", clocks.initial_clk()), ("clk", clocks.clk())] {
        if !value.is_empty() {
            after.push_str(&format!(
                ",\"{key}\":\"{}\"",
                String::from_utf8_lossy(value)
            ));
        }
    }
    after.push('}');
    Template {
        before: format!("{{\"op\":\"{op}\",\"id\":"),
        after,
    }
}

/// What a Betfair `FAILURE` status asks of the stream, by its `errorCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BetfairRefusal {
    /// The server cannot serve the request now — the account's connection limit (an old
    /// connection the server has not seen go yet), connection throttling, a timeout, its own
    /// failure: connect again after the backoff, keeping subscriptions and positions.
    ForNow,
    /// The server does not know the position a subscription resumed from: subscribe again
    /// from a new image. Resent as it was, it would be refused on every reconnect.
    UnknownPosition,
    /// Anything else — credentials, the request itself, a code this client does not know:
    /// as configured (`crash_on_error_response`; a refused login always crashes).
    Final,
}

/// How to take the Betfair status `payload` that refused a request.
pub(crate) fn betfair_refusal(payload: &[u8]) -> BetfairRefusal {
    match head_str(payload, b"errorCode") {
        Some(
            b"MAX_CONNECTION_LIMIT_EXCEEDED"
            | b"TOO_MANY_REQUESTS"
            | b"TIMEOUT"
            | b"UNEXPECTED_ERROR"
            | b"CONNECTION_FAILED",
        ) => BetfairRefusal::ForNow,
        Some(b"INVALID_CLOCK") => BetfairRefusal::UnknownPosition,
        _ => BetfairRefusal::Final,
    }
}

#[cfg(test)]
mod tests {
    use super::binance_url_streams;

    #[test]
    fn streams_named_by_binance_urls() {
        assert_eq!(
            binance_url_streams("/stream?streams=btcusdt@aggTrade/ethusdt@depth20@100ms"),
            ["btcusdt@aggTrade", "ethusdt@depth20@100ms"]
        );
        assert_eq!(
            binance_url_streams("/stream?timeUnit=MICROSECOND&streams=btcusdt%40trade"),
            ["btcusdt@trade"]
        );
        assert_eq!(
            binance_url_streams("/ws/btcusdt@kline_1m"),
            ["btcusdt@kline_1m"]
        );
        assert_eq!(binance_url_streams("/ws/!ticker@arr"), ["!ticker@arr"]);
        // A bare endpoint, a listen key, a name that cannot go into a request.
        assert!(binance_url_streams("/ws").is_empty());
        assert!(binance_url_streams("/stream").is_empty());
        assert!(binance_url_streams("/ws/pqia91ma19a5s61cv6a81va65sdf19v8a65a1").is_empty());
        assert!(binance_url_streams("/stream?streams=a%22b@x").is_empty());
    }
}
