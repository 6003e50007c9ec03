//! RFC 6455 §5 frames: header parsing with the receive-side checks, and client-side encoding.

mod encode;
mod header;

pub use encode::push_server_frame;
pub(crate) use encode::{encode_header, MAX_HEADER_LEN};
pub(crate) use header::{parse_header, FrameHeader, Opcode};
