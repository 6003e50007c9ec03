//! CRLF-delimited lines (Betfair Exchange Stream API style: one JSON object per line), sans-IO.

mod client;
mod framer;
mod newlines;

pub use client::{LineClient, LineEvent};
pub use framer::{Delimiter, LineFramer};
