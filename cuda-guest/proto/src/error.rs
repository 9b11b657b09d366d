//! Errors of decoding and encoding. Each says which field was bad and at which byte
//! offset of its frame (offset 0 is the first byte of the frame's `length` field).

use super::frame::HEADER_LEN;

/// Why a frame's contents were refused. The frame's boundaries were intact, so the
/// stream of frames can go on after it (see [`DecodeError::Rejected`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// The opcode is not one of [`Opcode`](super::Opcode).
    #[error("unknown opcode {opcode:#06x} at offset 12")]
    UnknownOpcode {
        /// The opcode found.
        opcode: u16,
    },
    /// Flag bits that are reserved, or that do not belong in this direction, are set.
    #[error("flags {flags:#06x} at offset 14: bits {bad:#06x} are not allowed here")]
    BadFlags {
        /// The flags found.
        flags: u16,
        /// The offending bits.
        bad: u16,
    },
    /// `NO_REPLY` on an opcode whose reply the client cannot do without.
    #[error("flags at offset 14: opcode {opcode:#06x} cannot be sent with NO_REPLY (it is not a pipelined command)")]
    NoReplyNotAllowed {
        /// The opcode.
        opcode: u16,
    },
    /// The frame ends inside a field.
    #[error("field `{field}` at offset {offset} needs {need} bytes, the frame has {have} left")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Its offset in the frame.
        offset: usize,
        /// Bytes the field needs.
        need: u64,
        /// Bytes left in the frame.
        have: usize,
    },
    /// A length or count is above the limit announced in the handshake.
    #[error("field `{field}` at offset {offset} is {value}, above the limit {max}")]
    LimitExceeded {
        /// The field.
        field: &'static str,
        /// Its offset in the frame.
        offset: usize,
        /// The value found.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A value that is not one the field can take (an enum tag, a zero request id, a
    /// zero-length scatter-gather entry, a non-zero reserved field).
    #[error("field `{field}` at offset {offset} has the invalid value {value:#x}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// Its offset in the frame.
        offset: usize,
        /// The value found.
        value: u64,
    },
    /// Two fields that must agree do not (a copy's length against its scatter-gather
    /// list, a kernel parameter against the parameter bytes).
    #[error("field `{field}` at offset {offset} is {found}, expected {expected}")]
    Mismatch {
        /// The field.
        field: &'static str,
        /// Its offset in the frame.
        offset: usize,
        /// What was found.
        found: u64,
        /// What the other fields require.
        expected: u64,
    },
    /// A string that is not UTF-8.
    #[error("field `{field}` at offset {offset} is not UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
        /// Its offset in the frame.
        offset: usize,
    },
    /// Bytes after the last field of the payload.
    #[error("{count} unexpected bytes at offset {offset} after the payload")]
    TrailingBytes {
        /// Where they start.
        offset: usize,
        /// How many.
        count: usize,
    },
}

/// Why the bytes at the front of a stream are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The `length` field is below the header's size: the stream cannot be resynchronised,
    /// so the connection must be closed.
    #[error("frame length {length} at offset 0 is below the {min}-byte header")]
    FrameTooShort {
        /// The length found.
        length: u32,
        /// The smallest valid length.
        min: u32,
    },
    /// The `length` field is above the handshake's `max_frame`: the connection must be
    /// closed (nothing of the frame was buffered).
    #[error("frame length {length} at offset 0 is above the limit {max}")]
    FrameTooLarge {
        /// The length found.
        length: u32,
        /// The limit.
        max: u32,
    },
    /// A whole frame whose contents are bad. It has been consumed (the
    /// [`Decoder`](super::Decoder) skipped it), so the connection can answer `id` with an
    /// error and go on.
    #[error("frame {id} (opcode {opcode:#06x}, {frame_len} bytes) refused: {reason}")]
    Rejected {
        /// Its request id.
        id: u64,
        /// Its opcode, as found.
        opcode: u16,
        /// Its flags, as found.
        flags: u16,
        /// Its whole length: how many bytes to skip.
        frame_len: u32,
        /// What is wrong.
        #[source]
        reason: FieldError,
    },
}

impl DecodeError {
    /// Whether the stream of frames is lost (the connection must be closed) rather than
    /// one frame refused.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, DecodeError::Rejected { .. })
    }

    /// For a frame refused for its payload (its header was right): the frame to answer
    /// with `CUDA_ERROR_INVALID_VALUE` (or, when `no_reply` is set, whose error to defer
    /// like any pipelined failure) before going on. `None` for the fatal errors and for
    /// frames refused for their header (unknown opcode, bad flags, `NO_REPLY` where not
    /// allowed, id 0): those are protocol violations, after which the server sends its
    /// closing notice and closes.
    pub fn answerable(&self) -> Option<Refused> {
        let DecodeError::Rejected {
            id,
            opcode,
            flags,
            reason,
            ..
        } = self
        else {
            return None;
        };
        let header = matches!(
            reason,
            FieldError::UnknownOpcode { .. }
                | FieldError::BadFlags { .. }
                | FieldError::NoReplyNotAllowed { .. }
                | FieldError::InvalidValue { field: "id", .. }
        );
        if header {
            return None;
        }
        Some(Refused {
            id: *id,
            opcode: super::Opcode::from_u16(*opcode)?,
            no_reply: flags & super::FLAG_NO_REPLY != 0,
        })
    }
}

/// A frame refused for its payload, which the session answers and survives (see
/// [`DecodeError::answerable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Its request id.
    pub id: u64,
    /// Its opcode.
    pub opcode: super::Opcode,
    /// Whether it was sent with `NO_REPLY` (then its error is deferred, not answered).
    pub no_reply: bool,
}

/// Why a message cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A length does not fit its field (strings and data are at most `u32::MAX` bytes,
    /// a frame too).
    #[error("field `{field}` is {len} bytes, more than its length field can hold")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: u64,
    },
    /// `NO_REPLY` on a request that is not pipelined.
    #[error("opcode {opcode:#06x} cannot be sent with NO_REPLY")]
    NoReplyNotAllowed {
        /// The opcode.
        opcode: u16,
    },
    /// A reply body that is not the one of its opcode.
    #[error("a {body} body is not the reply of opcode {opcode:#06x}")]
    BodyMismatch {
        /// The opcode.
        opcode: u16,
        /// The body's kind.
        body: &'static str,
    },
    /// Request id 0 is reserved for the server's notices.
    #[error("request id 0 is reserved")]
    ZeroRequestId,
    /// Kernel parameters whose slots do not lie, in order, inside their bytes.
    #[error("kernel parameter {index} (offset {offset}, size {size}) is not inside the {blob_len} parameter bytes after the previous one")]
    BadParamSlot {
        /// The parameter's index.
        index: usize,
        /// Its offset.
        offset: u32,
        /// Its size.
        size: u32,
        /// The length of the parameter bytes.
        blob_len: usize,
    },
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The first bytes are not the expected magic: not a vmgpu peer.
    #[error("bad magic {found:02x?} at offset 0, expected {expected:02x?}")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
        /// The expected magic.
        expected: [u8; 4],
    },
    /// The peer speaks another major version.
    #[error("protocol version {theirs_major}.{theirs_minor} is not compatible with {ours_major}.{ours_minor}")]
    Incompatible {
        /// Our major version.
        ours_major: u16,
        /// Our minor version.
        ours_minor: u16,
        /// The peer's major version.
        theirs_major: u16,
        /// The peer's minor version.
        theirs_minor: u16,
    },
    /// The server refused the session (its hello carries a non-zero status).
    #[error("the server refused the session: {status}")]
    Refused {
        /// The `CUresult` it gave.
        status: super::Status,
    },
    /// Limits that contradict each other or are below the protocol's minimum.
    #[error("limit `{field}` at offset {offset} is {value}: {why}")]
    BadLimits {
        /// The limit.
        field: &'static str,
        /// Its offset in the hello.
        offset: usize,
        /// Its value.
        value: u32,
        /// What it contradicts.
        why: &'static str,
    },
    /// A reserved field is not zero.
    #[error("reserved field at offset {offset} is {value:#x}, not 0")]
    Reserved {
        /// Its offset in the hello.
        offset: usize,
        /// Its value.
        value: u64,
    },
}

// A frame is at least a header; used in messages above.
const _: () = assert!(HEADER_LEN == 16);
