//! Replies. After the 16-byte frame header (flags = `REPLY`, the request's id and
//! opcode) come
//!
//! ```text
//! offset size field
//!     16    4 status        CUresult (0: success)
//!     20    2 cause_opcode  opcode of the request whose failure `status` reports, when
//!                           that is an earlier pipelined request; 0 otherwise
//!     22    2 reserved      0
//!     24    8 cause_id      that request's id; 0 otherwise
//!     32    . body          on success: the opcode's result; on failure: detail_len: u32
//!                           and that many bytes of UTF-8 (the JIT log of a failed
//!                           module load, or why a handle or range was refused)
//! ```

use super::decoder::{Decoded, Message};
use super::error::{DecodeError, EncodeError, FieldError};
use super::frame::{self, HeaderStep, FLAG_REPLY, HEADER_LEN};
use super::wire::{Reader, Writer};
use super::{FunctionId, Limits, Opcode, ParamLayout, ReplyBody, Status};

/// The earlier pipelined request whose failure a reply reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cause {
    /// Its id.
    pub id: u64,
    /// Its opcode.
    pub opcode: Opcode,
}

/// A kernel handle and its parameter layout, so the shim can pack `kernelParams`
/// without knowing the kernel's signature.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionInfo {
    /// The kernel.
    pub function: FunctionId,
    /// Offset and size of each parameter, in order, without overlap, ending within
    /// `max_param_bytes`; `None` when the server does not know them (the shim then needs `extra` with `CU_LAUNCH_PARAM_BUFFER_POINTER`).
    pub params: Option<Vec<ParamLayout>>,
}

/// The server's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The request's id (0 only in the server's closing notice, opcode `Goodbye`).
    pub id: u64,
    /// The request's opcode.
    pub opcode: Opcode,
    /// The `CUresult` the shim returns to the program.
    pub status: Status,
    /// When `status` reports the failure of an earlier pipelined request: that request.
    pub cause: Option<Cause>,
    /// The result ([`ReplyBody::Detail`] on failure).
    pub body: ReplyBody,
}

impl Reply {
    /// A successful reply.
    pub fn ok(id: u64, opcode: Opcode, body: ReplyBody) -> Self {
        Reply {
            id,
            opcode,
            status: Status::SUCCESS,
            cause: None,
            body,
        }
    }

    /// The request failed itself with `status`.
    pub fn error(id: u64, opcode: Opcode, status: Status, detail: impl Into<String>) -> Self {
        Reply {
            id,
            opcode,
            status,
            cause: None,
            body: ReplyBody::Detail(detail.into()),
        }
    }

    /// The request reports the deferred failure `status` of the earlier request `cause`.
    pub fn deferred(
        id: u64,
        opcode: Opcode,
        status: Status,
        cause: Cause,
        detail: impl Into<String>,
    ) -> Self {
        Reply {
            id,
            opcode,
            status,
            cause: Some(cause),
            body: ReplyBody::Detail(detail.into()),
        }
    }

    /// The server's last frame before it closes a connection (after a protocol
    /// violation, or when it shuts down): request id 0, opcode `Goodbye`.
    pub fn closing_notice(status: Status, detail: impl Into<String>) -> Self {
        Reply::error(0, Opcode::Goodbye, status, detail)
    }

    /// Whether it is the server's closing notice.
    pub fn is_closing_notice(&self) -> bool {
        self.id == 0 && self.opcode == Opcode::Goodbye
    }

    /// The failure detail, if any.
    pub fn detail(&self) -> Option<&str> {
        match &self.body {
            ReplyBody::Detail(d) => Some(d),
            _ => None,
        }
    }

    /// Appends the frame to `out`; returns its length. On error `out` is unchanged.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let mismatch = || EncodeError::BodyMismatch {
            opcode: self.opcode.code(),
            body: self.body.name(),
        };
        if self.status.is_success() {
            if self.cause.is_some() || self.body.kind() != Some(self.opcode.reply_body()) {
                return Err(mismatch());
            }
        } else if self.body.kind().is_some() {
            return Err(mismatch());
        }
        let start = frame::begin(out, self.id, self.opcode, FLAG_REPLY);
        let mut w = Writer { out };
        w.u32(self.status.0);
        let (cop, cid) = match self.cause {
            Some(c) => (c.opcode.code(), c.id),
            None => (0, 0),
        };
        w.u16(cop);
        w.u16(0);
        w.u64(cid);
        if let Err(e) = self.body.encode(&mut w) {
            out.truncate(start);
            return Err(e);
        }
        frame::finish(out, start)
    }

    /// Appends the frame to `out`, except the bytes of a [`ReplyBody::Data`] body, which
    /// it returns: written right after what was appended, they complete the frame. A
    /// large device-to-host copy's data is then written from where it is rather than
    /// copied into `out` first. Other replies are appended whole (nothing is returned).
    /// On error `out` is unchanged.
    pub fn encode_head<'a>(&'a self, out: &mut Vec<u8>) -> Result<&'a [u8], EncodeError> {
        let data = match &self.body {
            ReplyBody::Data(data) if self.status.is_success() => data,
            _ => return self.encode(out).map(|_| &[][..]),
        };
        let head = Reply {
            body: ReplyBody::Data(Vec::new()),
            ..*self
        };
        let start = out.len();
        let len = head.encode(out)?;
        let too_long = EncodeError::TooLong {
            field: "length",
            len: (len + data.len()) as u64,
        };
        let (Ok(total), Ok(n)) = (u32::try_from(len + data.len()), u32::try_from(data.len()))
        else {
            out.truncate(start);
            return Err(too_long);
        };
        // The frame's length, and the data's `len: u32` (the last field appended).
        out[start..start + 4].copy_from_slice(&total.to_le_bytes());
        let at = out.len() - 4;
        out[at..].copy_from_slice(&n.to_le_bytes());
        Ok(data)
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::new();
        self.encode(&mut v)?;
        Ok(v)
    }
}

impl Message for Reply {
    fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded<Self>, DecodeError> {
        let h = match frame::read_header(buf, limits)? {
            HeaderStep::NeedMore(n) => return Ok(Decoded::NeedMore(n)),
            HeaderStep::Whole(h) => h,
        };
        let body = &buf[HEADER_LEN..h.length as usize];
        let parse = || -> Result<Reply, FieldError> {
            let opcode =
                Opcode::from_u16(h.opcode).ok_or(FieldError::UnknownOpcode { opcode: h.opcode })?;
            if h.flags != FLAG_REPLY {
                return Err(FieldError::BadFlags {
                    flags: h.flags,
                    bad: h.flags ^ FLAG_REPLY,
                });
            }
            if h.id == 0 && opcode != Opcode::Goodbye {
                return Err(FieldError::InvalidValue {
                    field: "id",
                    offset: 4,
                    value: 0,
                });
            }
            let mut r = Reader::new(body, HEADER_LEN);
            let status = Status(r.u32("status")?);
            let cop_at = r.offset();
            let cop = r.u16("cause_opcode")?;
            let res_at = r.offset();
            let reserved = r.u16("reserved")?;
            if reserved != 0 {
                return Err(FieldError::InvalidValue {
                    field: "reserved",
                    offset: res_at,
                    value: reserved.into(),
                });
            }
            let cid_at = r.offset();
            let cid = r.u64("cause_id")?;
            let cause = match (cop, cid) {
                (0, 0) => None,
                (0, id) => {
                    return Err(FieldError::InvalidValue {
                        field: "cause_id",
                        offset: cid_at,
                        value: id,
                    })
                }
                (op, id) => {
                    let invalid = FieldError::InvalidValue {
                        field: "cause_opcode",
                        offset: cop_at,
                        value: op.into(),
                    };
                    let opcode = Opcode::from_u16(op).ok_or(invalid.clone())?;
                    if status.is_success() {
                        return Err(invalid);
                    }
                    if id == 0 {
                        return Err(FieldError::InvalidValue {
                            field: "cause_id",
                            offset: cid_at,
                            value: 0,
                        });
                    }
                    Some(Cause { id, opcode })
                }
            };
            let body = if status.is_success() {
                ReplyBody::decode(opcode.reply_body(), &mut r, limits)?
            } else {
                ReplyBody::Detail(r.string("detail_len", u32::MAX)?)
            };
            r.finish()?;
            Ok(Reply {
                id: h.id,
                opcode,
                status,
                cause,
                body,
            })
        };
        match parse() {
            Ok(frame) => Ok(Decoded::Frame {
                frame,
                len: h.length as usize,
            }),
            Err(reason) => Err(h.reject(reason)),
        }
    }
}
