//! Requests: the frame that carries one, and the compound types of request fields
//! (memset widths, copy sources and destinations, kernel parameters). The [`Request`]
//! enum itself, its payload codec and its pipelining rules come from the command table,
//! `commands.rs`.

use super::decoder::{Decoded, Message};
use super::error::{DecodeError, EncodeError, FieldError};
use super::frame::{self, HeaderStep, FLAG_NO_REPLY, FLAG_REPLY, HEADER_LEN};
use super::wire::{Reader, Writer};
use super::{DevicePtr, EventId, Limits, Opcode, ParamLayout, Request, StreamId};

/// Element width of a memset (`cuMemsetD8`, `D16`, `D32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemsetWidth {
    /// 8-bit elements: `value` is taken modulo 2^8.
    W8 = 1,
    /// 16-bit elements (2-byte aligned destination).
    W16 = 2,
    /// 32-bit elements (4-byte aligned destination).
    W32 = 4,
}

impl MemsetWidth {
    /// Bytes per element.
    pub const fn bytes(self) -> u64 {
        self as u64
    }
    pub(crate) fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(MemsetWidth::W8),
            2 => Some(MemsetWidth::W16),
            4 => Some(MemsetWidth::W32),
            _ => None,
        }
    }
}

/// One piece of guest memory: `len` bytes at guest-physical address `gpa`. The server
/// resolves it through the VMM's guest memory map (`vm-memory`); an address outside the
/// guest's memory is an error of the copy, not of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SgEntry {
    /// Guest-physical address.
    pub gpa: u64,
    /// Length in bytes (non-zero; `gpa + len` does not overflow).
    pub len: u64,
}

/// Where a host-to-device copy's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostSource {
    /// In the frame (at most `max_inline` bytes).
    Inline(Vec<u8>),
    /// In guest memory, gathered from these pieces in order (needs
    /// [`Features::SCATTER_GATHER`](super::Features::SCATTER_GATHER)).
    Guest(Vec<SgEntry>),
}

/// Where a device-to-host copy's bytes go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostDest {
    /// In the reply's body (at most `max_inline` bytes).
    Inline,
    /// Into guest memory, scattered over these pieces in order (needs
    /// [`Features::SCATTER_GATHER`](super::Features::SCATTER_GATHER)); the reply's data
    /// is then empty.
    Guest(Vec<SgEntry>),
}

/// A launch's kernel parameters: their bytes packed in one buffer, and where each one
/// lies. Slots are in parameter order, each inside the bytes and after the previous one.
/// Device pointers among them are plain 8-byte values: they are addresses of the
/// session's own device address space and are not translated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KernelParams {
    /// One slot per parameter, in order.
    pub slots: Vec<ParamLayout>,
    /// The packed bytes.
    pub bytes: Vec<u8>,
}

impl KernelParams {
    /// Packs `args` one after the other, each aligned to the largest power of two (at most
    /// 16) that divides its size, the way CUDA lays out a parameter list of scalars,
    /// pointers and vector types. When the kernel's layout is known (from
    /// [`FunctionInfo`](super::FunctionInfo)) use [`KernelParams::with_layout`] instead.
    pub fn pack(args: &[&[u8]]) -> Self {
        let mut slots = Vec::with_capacity(args.len());
        let mut bytes = Vec::new();
        for a in args {
            let align = if a.is_empty() {
                1
            } else {
                (1usize << a.len().trailing_zeros()).min(16)
            };
            let offset = bytes.len().div_ceil(align) * align;
            bytes.resize(offset, 0);
            bytes.extend_from_slice(a);
            slots.push(ParamLayout {
                offset: offset as u32,
                size: a.len() as u32,
            });
        }
        KernelParams { slots, bytes }
    }

    /// Places `args[i]` at `layout[i]`; `None` when the counts or a size differ, or a
    /// slot is not after the previous one.
    pub fn with_layout(layout: &[ParamLayout], args: &[&[u8]]) -> Option<Self> {
        if layout.len() != args.len() {
            return None;
        }
        let mut end = 0u64;
        for (s, a) in layout.iter().zip(args) {
            if s.size as usize != a.len() || u64::from(s.offset) < end {
                return None;
            }
            end = u64::from(s.offset) + u64::from(s.size);
        }
        let mut bytes = vec![0u8; usize::try_from(end).ok()?];
        for (s, a) in layout.iter().zip(args) {
            bytes[s.offset as usize..s.offset as usize + a.len()].copy_from_slice(a);
        }
        Some(KernelParams {
            slots: layout.to_vec(),
            bytes,
        })
    }

    /// Parameter bytes whose layout the client does not know (a launch with `extra` and
    /// `CU_LAUNCH_PARAM_BUFFER_POINTER`): no slots; the server splits the bytes by the
    /// kernel's own parameter list.
    pub fn opaque(bytes: Vec<u8>) -> Self {
        KernelParams {
            slots: Vec::new(),
            bytes,
        }
    }

    /// Whether the layout is left to the server ([`KernelParams::opaque`]).
    pub fn is_opaque(&self) -> bool {
        self.slots.is_empty() && !self.bytes.is_empty()
    }

    /// Each parameter's bytes, in order (what a backend's launch takes). Slots outside the
    /// bytes (only possible in a value built by hand) give empty slices.
    pub fn args(&self) -> Vec<&[u8]> {
        self.slots
            .iter()
            .map(|s| {
                let start = s.offset as usize;
                self.bytes
                    .get(start..start.saturating_add(s.size as usize))
                    .unwrap_or(&[])
            })
            .collect()
    }

    /// Checks that the slots lie, in order and without overlap, inside the bytes.
    pub(crate) fn check(&self) -> Result<(), EncodeError> {
        let mut end = 0u64;
        for (index, s) in self.slots.iter().enumerate() {
            let stop = u64::from(s.offset) + u64::from(s.size);
            if u64::from(s.offset) < end || stop > self.bytes.len() as u64 {
                return Err(EncodeError::BadParamSlot {
                    index,
                    offset: s.offset,
                    size: s.size,
                    blob_len: self.bytes.len(),
                });
            }
            end = stop;
        }
        Ok(())
    }
}

/// What a request waits for before it is answered, and so which deferred errors its
/// reply reports (see `docs/protocol.md`, "Pipelining and deferred errors").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncScope {
    /// Not synchronising: reports only its own result (and a sticky error).
    None,
    /// The work of this stream (and of the legacy default stream before it).
    Stream(StreamId),
    /// The work before the event's last record, on the stream it was recorded on.
    Event(EventId),
    /// Every stream of the current context.
    Context,
}

/// A request with its id and whether the client waits for the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFrame {
    /// Request id: non-zero, chosen by the client, increasing within the session; the reply
    /// and any deferred error of this request name it.
    pub id: u64,
    /// Sent with `NO_REPLY`: no reply, a failure is deferred (only for
    /// [`Opcode::pipelined`] opcodes).
    pub no_reply: bool,
    /// The command.
    pub request: Request,
}

impl RequestFrame {
    /// A request that will be answered.
    pub fn new(id: u64, request: Request) -> Self {
        RequestFrame {
            id,
            no_reply: false,
            request,
        }
    }

    /// A pipelined request: sent with `NO_REPLY`.
    pub fn pipelined(id: u64, request: Request) -> Self {
        RequestFrame {
            id,
            no_reply: true,
            request,
        }
    }

    /// Appends the frame to `out`; returns its length. On error `out` is unchanged.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let opcode = self.request.opcode();
        if self.id == 0 {
            return Err(EncodeError::ZeroRequestId);
        }
        if self.no_reply && !opcode.pipelined() {
            return Err(EncodeError::NoReplyNotAllowed {
                opcode: opcode.code(),
            });
        }
        let flags = if self.no_reply { FLAG_NO_REPLY } else { 0 };
        let start = frame::begin(out, self.id, opcode, flags);
        if let Err(e) = self.request.encode_payload(&mut Writer { out }) {
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

    /// Appends everything of an inline `MemcpyHtoD[Async]` frame but its `len` data bytes,
    /// so that a transport can send the caller's buffer after it without copying it
    /// (e.g. with `write_vectored`); returns the whole frame's length. The bytes equal
    /// those of [`RequestFrame::encode`] for the same copy.
    pub fn encode_inline_htod_head(
        id: u64,
        no_reply: bool,
        dst: DevicePtr,
        stream: Option<StreamId>,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, EncodeError> {
        let opcode = match stream {
            Some(_) => Opcode::MemcpyHtoDAsync,
            None => Opcode::MemcpyHtoD,
        };
        if id == 0 {
            return Err(EncodeError::ZeroRequestId);
        }
        if no_reply && !opcode.pipelined() {
            return Err(EncodeError::NoReplyNotAllowed {
                opcode: opcode.code(),
            });
        }
        let head = HEADER_LEN + if stream.is_some() { 8 } else { 0 } + 24;
        let total = u32::try_from(head as u64 + len as u64).map_err(|_| EncodeError::TooLong {
            field: "data",
            len: len as u64,
        })?;
        let start = frame::begin(out, id, opcode, if no_reply { FLAG_NO_REPLY } else { 0 });
        out[start..start + 4].copy_from_slice(&total.to_le_bytes());
        let mut w = Writer { out };
        if let Some(s) = stream {
            w.u64(s.0);
        }
        w.u64(dst.0);
        w.u64(len as u64);
        w.u32(0);
        w.u32(len as u32);
        Ok(total as usize)
    }
}

/// A request decoded without copying its bulk data: `frame`'s inline data (of
/// `MemcpyHtoD[Async]` with [`HostSource::Inline`], or `Ping`) is left empty and `data`
/// points at it in the buffer the frame was decoded from. `data` is empty for the other
/// requests. The borrow ends before the next frame is read, so an asynchronous copy must
/// be done, or its bytes staged (e.g. into pinned memory), before then.
#[derive(Debug, Clone, PartialEq)]
pub struct LentRequest<'a> {
    /// The request, its inline data empty.
    pub frame: RequestFrame,
    /// The inline data.
    pub data: &'a [u8],
}

impl RequestFrame {
    /// Like [`Message::decode`], but the inline data stays in `buf` (no copy; see
    /// [`LentRequest`]): for a server that moves large host-to-device copies straight from
    /// its receive buffer to the device.
    pub fn decode_lent<'a>(
        buf: &'a [u8],
        limits: &Limits,
    ) -> Result<Decoded<LentRequest<'a>>, DecodeError> {
        Ok(match decode_request(buf, limits, true)? {
            Decoded::NeedMore(n) => Decoded::NeedMore(n),
            Decoded::Frame {
                frame: (frame, lent),
                len,
            } => Decoded::Frame {
                frame: LentRequest {
                    frame,
                    data: match lent {
                        Some((at, n)) => &buf[HEADER_LEN + at..HEADER_LEN + at + n],
                        None => &[],
                    },
                },
                len,
            },
        })
    }
}

pub(crate) type WithLent = (RequestFrame, Option<(usize, usize)>);

pub(crate) fn decode_request(
    buf: &[u8],
    limits: &Limits,
    lend: bool,
) -> Result<Decoded<WithLent>, DecodeError> {
    let h = match frame::read_header(buf, limits)? {
        HeaderStep::NeedMore(n) => return Ok(Decoded::NeedMore(n)),
        HeaderStep::Whole(h) => h,
    };
    let body = &buf[HEADER_LEN..h.length as usize];
    let parse = || -> Result<WithLent, FieldError> {
        if h.id == 0 {
            return Err(FieldError::InvalidValue {
                field: "id",
                offset: 4,
                value: 0,
            });
        }
        let opcode =
            Opcode::from_u16(h.opcode).ok_or(FieldError::UnknownOpcode { opcode: h.opcode })?;
        let bad = h.flags & !FLAG_NO_REPLY;
        if bad != 0 {
            return Err(FieldError::BadFlags {
                flags: h.flags,
                bad,
            });
        }
        let no_reply = h.flags & FLAG_NO_REPLY != 0;
        if no_reply && !opcode.pipelined() {
            return Err(FieldError::NoReplyNotAllowed { opcode: h.opcode });
        }
        let mut r = if lend {
            Reader::lending(body, HEADER_LEN)
        } else {
            Reader::new(body, HEADER_LEN)
        };
        let request = Request::decode_payload(opcode, &mut r, limits)?;
        let lent = r.lent;
        r.finish()?;
        Ok((
            RequestFrame {
                id: h.id,
                no_reply,
                request,
            },
            lent,
        ))
    };
    match parse() {
        Ok(frame) => Ok(Decoded::Frame {
            frame,
            len: h.length as usize,
        }),
        Err(reason) => Err(h.reject(reason)),
    }
}

impl Message for RequestFrame {
    fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded<Self>, DecodeError> {
        Ok(match decode_request(buf, limits, false)? {
            Decoded::NeedMore(n) => Decoded::NeedMore(n),
            Decoded::Frame {
                frame: (frame, _),
                len,
            } => Decoded::Frame { frame, len },
        })
    }
}

// A reply flag on a request is caught by the `bad` bits above.
const _: () = assert!(FLAG_REPLY & FLAG_NO_REPLY == 0);
