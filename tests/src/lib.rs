//! Cross-crate test support for feedwire: drivers that move bytes between real sockets and
//! the sans-IO core, shared by the interop and loopback tests.

pub mod blocking;
