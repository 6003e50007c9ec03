//! Which address a transport tries, and for how long, when a host has several. A host that
//! resolves to more than one address may have one that never answers (an IPv6 route that
//! drops packets, a dead load balancer): waiting on it for the whole connect timeout and
//! then trying it first again on every retry means never connecting, though another
//! address works. So the families alternate (RFC 8305 §4: a broken family costs one
//! attempt, not one per address of it), and every address but the last gets
//! [`ADDRESS_FALLBACK`] to complete its TCP connect before the next is tried; the last
//! has what is left of the stream's connect timeout. Both adapters follow this.

use std::net::SocketAddr;
use std::time::Duration;

/// How long a TCP connect to one of several addresses may take before the next address is
/// tried: long enough for one lost SYN to be sent again (Linux resends after 1 s) and
/// answered.
pub const ADDRESS_FALLBACK: Duration = Duration::from_secs(2);

/// Resolved addresses in the order to try them: the first address's family first, then
/// the families alternating (RFC 8305 §4), each family keeping the resolver's order.
pub fn connect_order(resolved: impl IntoIterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    let resolved: Vec<SocketAddr> = resolved.into_iter().collect();
    let Some(first) = resolved.first() else {
        return resolved;
    };
    let first_v6 = first.is_ipv6();
    let (mut lead, mut other): (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
    for a in &resolved {
        if a.is_ipv6() == first_v6 {
            lead.push(*a);
        } else {
            other.push(*a);
        }
    }
    let mut ordered = Vec::with_capacity(resolved.len());
    let (mut lead, mut other) = (lead.into_iter(), other.into_iter());
    loop {
        match (lead.next(), other.next()) {
            (None, None) => return ordered,
            (a, b) => ordered.extend(a.into_iter().chain(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn families_alternate_from_the_first_each_in_resolver_order() {
        let resolved = addrs(&[
            "[2001:db8::1]:443",
            "[2001:db8::2]:443",
            "[2001:db8::3]:443",
            "192.0.2.1:443",
            "192.0.2.2:443",
        ]);
        assert_eq!(
            connect_order(resolved),
            addrs(&[
                "[2001:db8::1]:443",
                "192.0.2.1:443",
                "[2001:db8::2]:443",
                "192.0.2.2:443",
                "[2001:db8::3]:443",
            ])
        );
        let resolved = addrs(&["192.0.2.1:443", "[2001:db8::1]:443", "192.0.2.2:443"]);
        assert_eq!(
            connect_order(resolved),
            addrs(&["192.0.2.1:443", "[2001:db8::1]:443", "192.0.2.2:443"])
        );
    }

    #[test]
    fn one_family_and_none_keep_their_order() {
        let resolved = addrs(&["192.0.2.2:443", "192.0.2.1:443"]);
        assert_eq!(connect_order(resolved.clone()), resolved);
        assert_eq!(connect_order(Vec::new()), Vec::new());
    }
}
