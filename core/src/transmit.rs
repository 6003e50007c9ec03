//! Outgoing bytes, queued as chunks the transport writes in order (vectored if it likes).
//! Small frames are built header-and-payload in one chunk; a large owned payload is masked in
//! place and queued after its header without being copied.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::frame::{encode_header, Opcode, MAX_HEADER_LEN};
use crate::mask::{apply_mask, copy_masked};

/// Payloads up to this many bytes are copied next to their header: one chunk, one write.
const INLINE_PAYLOAD_MAX: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct TransmitQueue {
    chunks: VecDeque<Bytes>,
    /// Scratch space small frames are encoded into, then split off as chunks.
    scratch: BytesMut,
    /// Bytes queued, for back-pressure decisions by the transport.
    queued: usize,
}

impl TransmitQueue {
    pub(crate) fn push_raw(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.queued += bytes.len();
            self.chunks.push_back(bytes);
        }
    }

    /// Queues one masked frame whose payload is borrowed: header and masked copy in one chunk
    /// when small; a masked copy as its own chunk otherwise.
    pub(crate) fn push_frame(&mut self, fin: bool, opcode: Opcode, payload: &[u8], key: [u8; 4]) {
        let mut header = [0u8; MAX_HEADER_LEN];
        let hlen = encode_header(&mut header, fin, opcode, payload.len(), key);
        let inline = payload.len() <= INLINE_PAYLOAD_MAX;
        let total = hlen + if inline { payload.len() } else { 0 };
        self.scratch.reserve(total);
        self.scratch.extend_from_slice(&header[..hlen]);
        if inline {
            let start = self.scratch.len();
            self.scratch.resize(start + payload.len(), 0);
            copy_masked(&mut self.scratch[start..], payload, key);
            let chunk = self.scratch.split().freeze();
            self.push_raw(chunk);
        } else {
            let chunk = self.scratch.split().freeze();
            self.push_raw(chunk);
            let mut body = BytesMut::zeroed(payload.len());
            copy_masked(&mut body, payload, key);
            self.push_raw(body.freeze());
        }
    }

    /// Queues one masked frame over `payload`, which the caller gives up: masked in place,
    /// no copy.
    pub(crate) fn push_frame_owned(
        &mut self,
        fin: bool,
        opcode: Opcode,
        mut payload: BytesMut,
        key: [u8; 4],
    ) {
        if payload.len() <= INLINE_PAYLOAD_MAX {
            return self.push_frame(fin, opcode, &payload, key);
        }
        let mut header = [0u8; MAX_HEADER_LEN];
        let hlen = encode_header(&mut header, fin, opcode, payload.len(), key);
        self.push_raw(Bytes::copy_from_slice(&header[..hlen]));
        apply_mask(&mut payload, key, 0);
        self.push_raw(payload.freeze());
    }

    /// Queues `line` and its delimiter as one chunk.
    pub(crate) fn push_line(&mut self, line: &[u8], delimiter: &[u8]) {
        self.scratch.reserve(line.len() + delimiter.len());
        self.scratch.extend_from_slice(line);
        self.scratch.extend_from_slice(delimiter);
        let chunk = self.scratch.split().freeze();
        self.push_raw(chunk);
    }

    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        let chunk = self.chunks.pop_front()?;
        self.queued -= chunk.len();
        Some(chunk)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued
    }
}
