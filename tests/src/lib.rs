//! Cross-crate test support for feedwire: drivers that move bytes between real sockets and
//! the sans-IO core, the adapter facade, and the loopback scenarios every adapter passes.

pub mod adapter;
pub mod blocking;
pub mod scenarios;
