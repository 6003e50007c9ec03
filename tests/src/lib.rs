//! Cross-crate test support for feedwire: drivers that move bytes between real sockets and
//! the sans-IO core, the adapter facade, and the loopback scenarios every adapter passes.

pub mod adapter;
pub mod blocking;
pub mod checks;
pub mod loop_reentry;
pub mod peer;
pub mod scenarios;
pub mod scratch;
pub mod stops_itself;

/// The README's Rust examples (core, tokio adapter, mio loop) compile as doctests here, where
/// every crate is in scope, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
