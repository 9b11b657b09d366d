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
use super::{
    ContextId, DevicePtr, EventId, FunctionId, Limits, ModuleId, Opcode, ParamLayout, Status,
    StreamId,
};

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

/// `param_count` meaning "layout unknown" in a [`FunctionInfo`].
const PARAMS_UNKNOWN: u32 = u32::MAX;

/// The body of a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// Nothing (most commands).
    Empty,
    /// Failure detail (every reply whose status is not `SUCCESS`): `detail_len: u32`,
    /// UTF-8.
    Detail(String),
    /// `Ping`'s echo and `MemcpyDtoH[Async]`'s data: `len: u32`, bytes (at most
    /// `max_inline`; empty when the data went to guest memory).
    Data(Vec<u8>),
    /// `DriverGetVersion`, `DeviceGetAttribute`: `i32`.
    Int(i32),
    /// `DeviceGetCount`: `u32`.
    Count(u32),
    /// `DeviceGet`: the device, `u32`.
    Device(u32),
    /// `DeviceGetName`, `DeviceGetPciBusId`: `len: u32`, UTF-8 (at most `max_name`).
    Text(String),
    /// `DeviceGetUuid`: 16 bytes.
    Uuid([u8; 16]),
    /// `DeviceTotalMem`: `u64` bytes.
    Size(u64),
    /// `DeviceComputeCapability`: `major: u32`, `minor: u32`.
    ComputeCapability {
        /// Major.
        major: u32,
        /// Minor.
        minor: u32,
    },
    /// `PrimaryCtxRetain`: `u64`.
    Context(ContextId),
    /// `ModuleLoadData`: `u64`.
    Module(ModuleId),
    /// `ModuleGetFunction`: `function: u64`, `param_count: u32` (`0xffffffff`: unknown),
    /// then `param_count` x (`offset: u32`, `size: u32`).
    Function(FunctionInfo),
    /// `MemAlloc`: `u64`.
    DevicePtr(DevicePtr),
    /// `MemGetInfo`: `free: u64`, `total: u64`.
    MemInfo {
        /// Free bytes (of the session's quota).
        free: u64,
        /// Total bytes (the session's quota, at most the device's).
        total: u64,
    },
    /// `StreamCreate`: `u64`.
    Stream(StreamId),
    /// `EventCreate`: `u64`.
    Event(EventId),
    /// `EventElapsedTime`: milliseconds, `f32` bits.
    ElapsedMs(f32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Empty,
    Data,
    Int,
    Count,
    Device,
    Text,
    Uuid,
    Size,
    Cc,
    Context,
    Module,
    Function,
    DevicePtr,
    MemInfo,
    Stream,
    Event,
    Elapsed,
}

/// The body a successful reply to `opcode` has.
fn kind_of(opcode: Opcode) -> Kind {
    use Opcode as O;
    match opcode {
        O::Ping | O::MemcpyDtoH | O::MemcpyDtoHAsync => Kind::Data,
        O::DriverGetVersion | O::DeviceGetAttribute => Kind::Int,
        O::DeviceGetCount => Kind::Count,
        O::DeviceGet => Kind::Device,
        O::DeviceGetName | O::DeviceGetPciBusId => Kind::Text,
        O::DeviceGetUuid => Kind::Uuid,
        O::DeviceTotalMem => Kind::Size,
        O::DeviceComputeCapability => Kind::Cc,
        O::PrimaryCtxRetain => Kind::Context,
        O::ModuleLoadData => Kind::Module,
        O::ModuleGetFunction => Kind::Function,
        O::MemAlloc => Kind::DevicePtr,
        O::MemGetInfo => Kind::MemInfo,
        O::StreamCreate => Kind::Stream,
        O::EventCreate => Kind::Event,
        O::EventElapsedTime => Kind::Elapsed,
        _ => Kind::Empty,
    }
}

impl ReplyBody {
    fn kind(&self) -> Option<Kind> {
        Some(match self {
            ReplyBody::Empty => Kind::Empty,
            ReplyBody::Detail(_) => return None,
            ReplyBody::Data(_) => Kind::Data,
            ReplyBody::Int(_) => Kind::Int,
            ReplyBody::Count(_) => Kind::Count,
            ReplyBody::Device(_) => Kind::Device,
            ReplyBody::Text(_) => Kind::Text,
            ReplyBody::Uuid(_) => Kind::Uuid,
            ReplyBody::Size(_) => Kind::Size,
            ReplyBody::ComputeCapability { .. } => Kind::Cc,
            ReplyBody::Context(_) => Kind::Context,
            ReplyBody::Module(_) => Kind::Module,
            ReplyBody::Function(_) => Kind::Function,
            ReplyBody::DevicePtr(_) => Kind::DevicePtr,
            ReplyBody::MemInfo { .. } => Kind::MemInfo,
            ReplyBody::Stream(_) => Kind::Stream,
            ReplyBody::Event(_) => Kind::Event,
            ReplyBody::ElapsedMs(_) => Kind::Elapsed,
        })
    }

    fn name(&self) -> &'static str {
        match self.kind() {
            None => "Detail",
            Some(k) => match k {
                Kind::Empty => "Empty",
                Kind::Data => "Data",
                Kind::Int => "Int",
                Kind::Count => "Count",
                Kind::Device => "Device",
                Kind::Text => "Text",
                Kind::Uuid => "Uuid",
                Kind::Size => "Size",
                Kind::Cc => "ComputeCapability",
                Kind::Context => "Context",
                Kind::Module => "Module",
                Kind::Function => "Function",
                Kind::DevicePtr => "DevicePtr",
                Kind::MemInfo => "MemInfo",
                Kind::Stream => "Stream",
                Kind::Event => "Event",
                Kind::Elapsed => "ElapsedMs",
            },
        }
    }
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
            if self.cause.is_some() || self.body.kind() != Some(kind_of(self.opcode)) {
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
        if let Err(e) = encode_body(&self.body, &mut w) {
            out.truncate(start);
            return Err(e);
        }
        frame::finish(out, start)
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::new();
        self.encode(&mut v)?;
        Ok(v)
    }
}

fn encode_body(body: &ReplyBody, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    match body {
        ReplyBody::Empty => {}
        ReplyBody::Detail(s) => w.blob("detail", s.as_bytes())?,
        ReplyBody::Data(d) => w.blob("data", d)?,
        ReplyBody::Int(v) => w.i32(*v),
        ReplyBody::Count(v) | ReplyBody::Device(v) => w.u32(*v),
        ReplyBody::Text(s) => w.blob("text", s.as_bytes())?,
        ReplyBody::Uuid(u) => w.bytes(u),
        ReplyBody::Size(v) => w.u64(*v),
        ReplyBody::ComputeCapability { major, minor } => {
            w.u32(*major);
            w.u32(*minor);
        }
        ReplyBody::Context(h) => w.u64(h.0),
        ReplyBody::Module(h) => w.u64(h.0),
        ReplyBody::Function(f) => {
            w.u64(f.function.0);
            match &f.params {
                None => w.u32(PARAMS_UNKNOWN),
                Some(p) => {
                    if p.len() >= PARAMS_UNKNOWN as usize {
                        return Err(EncodeError::TooLong {
                            field: "param_count",
                            len: p.len() as u64,
                        });
                    }
                    w.u32(p.len() as u32);
                    for s in p {
                        w.u32(s.offset);
                        w.u32(s.size);
                    }
                }
            }
        }
        ReplyBody::DevicePtr(a) => w.u64(a.0),
        ReplyBody::MemInfo { free, total } => {
            w.u64(*free);
            w.u64(*total);
        }
        ReplyBody::Stream(h) => w.u64(h.0),
        ReplyBody::Event(h) => w.u64(h.0),
        ReplyBody::ElapsedMs(ms) => w.u32(ms.to_bits()),
    }
    Ok(())
}

fn decode_body(kind: Kind, r: &mut Reader<'_>, limits: &Limits) -> Result<ReplyBody, FieldError> {
    Ok(match kind {
        Kind::Empty => ReplyBody::Empty,
        Kind::Data => ReplyBody::Data(r.blob("data_len", limits.max_inline)?),
        Kind::Int => ReplyBody::Int(r.i32("value")?),
        Kind::Count => ReplyBody::Count(r.u32("count")?),
        Kind::Device => ReplyBody::Device(r.u32("device")?),
        Kind::Text => ReplyBody::Text(r.string("text_len", limits.max_name)?),
        Kind::Uuid => ReplyBody::Uuid(r.uuid("uuid")?),
        Kind::Size => ReplyBody::Size(r.u64("bytes")?),
        Kind::Cc => ReplyBody::ComputeCapability {
            major: r.u32("major")?,
            minor: r.u32("minor")?,
        },
        Kind::Context => ReplyBody::Context(ContextId(r.u64("ctx")?)),
        Kind::Module => ReplyBody::Module(ModuleId(r.u64("module")?)),
        Kind::Function => {
            let function = FunctionId(r.u64("function")?);
            let at = r.offset();
            let count = r.u32("param_count")?;
            let params = if count == PARAMS_UNKNOWN {
                None
            } else {
                if count > limits.max_params {
                    return Err(FieldError::LimitExceeded {
                        field: "param_count",
                        offset: at,
                        value: count.into(),
                        max: limits.max_params.into(),
                    });
                }
                r.check_items("param_slots", count, 8)?;
                let mut v = Vec::with_capacity(count as usize);
                let mut end = 0u64;
                for _ in 0..count {
                    let at = r.offset();
                    let offset = r.u32("param_offset")?;
                    let size = r.u32("param_size")?;
                    // In order, and inside the most parameter bytes a launch may carry,
                    // so a client can lay out a buffer from them without a surprise.
                    if u64::from(offset) < end {
                        return Err(FieldError::Mismatch {
                            field: "param_offset",
                            offset: at,
                            found: offset.into(),
                            expected: end,
                        });
                    }
                    end = u64::from(offset) + u64::from(size);
                    if end > u64::from(limits.max_param_bytes) {
                        return Err(FieldError::LimitExceeded {
                            field: "param_size",
                            offset: at + 4,
                            value: end,
                            max: limits.max_param_bytes.into(),
                        });
                    }
                    v.push(ParamLayout { offset, size });
                }
                Some(v)
            };
            ReplyBody::Function(FunctionInfo { function, params })
        }
        Kind::DevicePtr => ReplyBody::DevicePtr(DevicePtr(r.u64("dptr")?)),
        Kind::MemInfo => ReplyBody::MemInfo {
            free: r.u64("free")?,
            total: r.u64("total")?,
        },
        Kind::Stream => ReplyBody::Stream(StreamId(r.u64("stream")?)),
        Kind::Event => ReplyBody::Event(EventId(r.u64("event")?)),
        Kind::Elapsed => ReplyBody::ElapsedMs(f32::from_bits(r.u32("ms")?)),
    })
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
                decode_body(kind_of(opcode), &mut r, limits)?
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
