//! Reconnect delays: exponential, capped, with jitter from the injected random source.

use std::time::Duration;

use super::config::ReconnectPolicy;
use crate::deadline::CENTURY;

/// Delay before attempt `attempt` (1-based): `initial × 2^(attempt-1)`, capped at `max`,
/// minus a random fraction `jitter × r` of it, where `r` is uniform in [0, 1) from `random`.
pub(crate) fn reconnect_delay(policy: &ReconnectPolicy, attempt: u32, random: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(30);
    let base = policy
        .initial_delay
        .saturating_mul(1u32 << exp)
        .min(policy.max_delay)
        // (`mul_f64` below panics on a product past `Duration::MAX`.)
        .min(CENTURY);
    let r = f64::from(random) / (f64::from(u32::MAX) + 1.0);
    // NaN would reach `mul_f64`, which panics on it: no jitter instead.
    let jitter = if policy.jitter.is_nan() {
        0.0
    } else {
        policy.jitter.clamp(0.0, 1.0)
    };
    let cut = jitter * r;
    base.mul_f64(1.0 - cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps_and_jitter_only_shortens() {
        let p = ReconnectPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            jitter: 0.5,
            ..ReconnectPolicy::default()
        };
        assert_eq!(reconnect_delay(&p, 1, 0), Duration::from_millis(100));
        assert_eq!(reconnect_delay(&p, 2, 0), Duration::from_millis(200));
        assert_eq!(reconnect_delay(&p, 4, 0), Duration::from_millis(800));
        assert_eq!(reconnect_delay(&p, 5, 0), Duration::from_secs(1));
        assert_eq!(reconnect_delay(&p, 100, 0), Duration::from_secs(1));
        let odd = |jitter| ReconnectPolicy {
            jitter,
            ..p.clone()
        };
        assert_eq!(
            reconnect_delay(&odd(f64::NAN), 1, u32::MAX),
            p.initial_delay
        );
        assert_eq!(reconnect_delay(&odd(-1.0), 1, u32::MAX), p.initial_delay);
        assert!(reconnect_delay(&odd(f64::INFINITY), 1, u32::MAX) < Duration::from_millis(1));
        let long = ReconnectPolicy {
            initial_delay: Duration::MAX,
            max_delay: Duration::MAX,
            ..p.clone()
        };
        assert_eq!(reconnect_delay(&long, 40, 0), CENTURY);
        assert!(reconnect_delay(&long, 40, u32::MAX) >= CENTURY / 2);
        // The random fraction stays below 1: even full jitter at the largest draw leaves
        // part of the delay (2^-32 of it; a century's is most of a second).
        let full = ReconnectPolicy {
            jitter: 1.0,
            ..long.clone()
        };
        assert!(reconnect_delay(&full, 40, u32::MAX) > Duration::from_millis(500));
        let jittered = reconnect_delay(&p, 5, u32::MAX);
        assert!(
            jittered >= Duration::from_millis(500) && jittered < Duration::from_secs(1),
            "{jittered:?}"
        );
    }
}
