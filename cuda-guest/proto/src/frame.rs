//! The frame header. (The opcodes come from the command table, `commands.rs`.)
//!
//! ```text
//! offset size field
//!      0    4 length   whole frame in bytes, header included (16..=max_frame)
//!      4    8 id       request id (non-zero; a reply repeats its request's id)
//!     12    2 opcode   see Opcode
//!     14    2 flags    bit 0 NO_REPLY (requests), bit 15 REPLY (replies), others 0
//! ```

use super::error::{DecodeError, FieldError};
use super::{Limits, Opcode};

/// Bytes of the frame header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a reply's header: the frame header, then `status: u32`,
/// `cause_opcode: u16`, `reserved: u16`, `cause_id: u64`.
pub const REPLY_HEADER_LEN: usize = 32;
/// Request flag: the client does not wait for a reply, and the server sends none; a
/// failure is reported at the next synchronising call (see [`SyncScope`](super::SyncScope)).
/// Only for opcodes with [`Opcode::pipelined`].
pub const FLAG_NO_REPLY: u16 = 1 << 0;
/// Set on every reply (server to client) and on nothing else.
pub const FLAG_REPLY: u16 = 1 << 15;

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) length: u32,
    pub(crate) id: u64,
    pub(crate) opcode: u16,
    pub(crate) flags: u16,
}

/// Result of looking at the front of a buffer for a frame header.
pub(crate) enum HeaderStep {
    NeedMore(usize),
    /// A header whose whole frame is in the buffer.
    Whole(Header),
}

/// Reads the header at the front of `buf`, checking the length against the limits as
/// soon as its four bytes are there (before anything of the frame is kept).
pub(crate) fn read_header(buf: &[u8], limits: &Limits) -> Result<HeaderStep, DecodeError> {
    if buf.len() < 4 {
        return Ok(HeaderStep::NeedMore(HEADER_LEN - buf.len()));
    }
    let length = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if (length as usize) < HEADER_LEN {
        return Err(DecodeError::FrameTooShort {
            length,
            min: HEADER_LEN as u32,
        });
    }
    if length > limits.max_frame {
        return Err(DecodeError::FrameTooLarge {
            length,
            max: limits.max_frame,
        });
    }
    if buf.len() < length as usize {
        return Ok(HeaderStep::NeedMore(length as usize - buf.len()));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&buf[4..12]);
    Ok(HeaderStep::Whole(Header {
        length,
        id: u64::from_le_bytes(id),
        opcode: u16::from_le_bytes([buf[12], buf[13]]),
        flags: u16::from_le_bytes([buf[14], buf[15]]),
    }))
}

impl Header {
    /// The error for a frame whose contents are bad.
    pub(crate) fn reject(&self, reason: FieldError) -> DecodeError {
        DecodeError::Rejected {
            id: self.id,
            opcode: self.opcode,
            flags: self.flags,
            frame_len: self.length,
            reason,
        }
    }
}

/// Starts a frame in `out`: the header with a placeholder length. Returns where it starts.
pub(crate) fn begin(out: &mut Vec<u8>, id: u64, opcode: Opcode, flags: u16) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&opcode.code().to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    start
}

/// Writes the length of the frame that starts at `start`; on failure removes the frame.
pub(crate) fn finish(out: &mut Vec<u8>, start: usize) -> Result<usize, super::EncodeError> {
    let len = out.len() - start;
    match u32::try_from(len) {
        Ok(l) => {
            out[start..start + 4].copy_from_slice(&l.to_le_bytes());
            Ok(len)
        }
        Err(_) => {
            out.truncate(start);
            Err(super::EncodeError::TooLong {
                field: "length",
                len: len as u64,
            })
        }
    }
}
