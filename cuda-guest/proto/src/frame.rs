//! The frame header and the opcodes.
//!
//! ```text
//! offset size field
//!      0    4 length   whole frame in bytes, header included (16..=max_frame)
//!      4    8 id       request id (non-zero; a reply repeats its request's id)
//!     12    2 opcode   see Opcode
//!     14    2 flags    bit 0 NO_REPLY (requests), bit 15 REPLY (replies), others 0
//! ```

use super::error::{DecodeError, FieldError};
use super::Limits;

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

macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        /// What a frame asks for: one CUDA driver call, or a session command. Replies repeat
        /// their request's opcode.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Opcode {
            $($(#[$doc])* $name = $value,)*
        }

        impl Opcode {
            /// Every opcode.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name),*];

            /// The opcode with this number.
            pub fn from_u16(v: u16) -> Option<Opcode> {
                match v {
                    $($value => Some(Opcode::$name),)*
                    _ => None,
                }
            }

            /// Its name, as in `docs/protocol.md`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Opcode::$name => stringify!($name),)*
                }
            }
        }
    };
}

opcodes! {
    /// Echo (benchmarks, liveness).
    Ping = 0x0001;
    /// `cuInit`.
    Init = 0x0002;
    /// `cuDriverGetVersion`.
    DriverGetVersion = 0x0003;
    /// Ends the session: the server releases everything, answers, and closes. Also the
    /// opcode of the server's last notice (request id 0) before it closes a connection.
    Goodbye = 0x0004;
    /// `cuDeviceGetCount`.
    DeviceGetCount = 0x0101;
    /// `cuDeviceGet`.
    DeviceGet = 0x0102;
    /// `cuDeviceGetName`.
    DeviceGetName = 0x0103;
    /// `cuDeviceGetUuid`.
    DeviceGetUuid = 0x0104;
    /// `cuDeviceGetPCIBusId`.
    DeviceGetPciBusId = 0x0105;
    /// `cuDeviceGetAttribute`.
    DeviceGetAttribute = 0x0106;
    /// `cuDeviceTotalMem`.
    DeviceTotalMem = 0x0107;
    /// `cuDeviceComputeCapability`.
    DeviceComputeCapability = 0x0108;
    /// `cuDevicePrimaryCtxRetain`.
    PrimaryCtxRetain = 0x0201;
    /// `cuDevicePrimaryCtxRelease`.
    PrimaryCtxRelease = 0x0202;
    /// `cuCtxSetCurrent` (for the connection).
    CtxSetCurrent = 0x0203;
    /// `cuCtxSynchronize`.
    CtxSynchronize = 0x0204;
    /// `cuModuleLoadData` (PTX).
    ModuleLoadData = 0x0301;
    /// `cuModuleUnload`.
    ModuleUnload = 0x0302;
    /// `cuModuleGetFunction`.
    ModuleGetFunction = 0x0303;
    /// `cuMemAlloc`.
    MemAlloc = 0x0401;
    /// `cuMemFree`.
    MemFree = 0x0402;
    /// `cuMemGetInfo`.
    MemGetInfo = 0x0403;
    /// `cuMemsetD8/D16/D32`.
    Memset = 0x0410;
    /// `cuMemsetD8/D16/D32Async`.
    MemsetAsync = 0x0411;
    /// `cuMemcpyHtoD`.
    MemcpyHtoD = 0x0420;
    /// `cuMemcpyHtoDAsync`.
    MemcpyHtoDAsync = 0x0421;
    /// `cuMemcpyDtoH`.
    MemcpyDtoH = 0x0422;
    /// `cuMemcpyDtoHAsync`.
    MemcpyDtoHAsync = 0x0423;
    /// `cuMemcpyDtoD`.
    MemcpyDtoD = 0x0424;
    /// `cuMemcpyDtoDAsync`.
    MemcpyDtoDAsync = 0x0425;
    /// `cuStreamCreateWithPriority` (and `cuStreamCreate`).
    StreamCreate = 0x0501;
    /// `cuStreamDestroy`.
    StreamDestroy = 0x0502;
    /// `cuStreamSynchronize`.
    StreamSynchronize = 0x0503;
    /// `cuStreamQuery`.
    StreamQuery = 0x0504;
    /// `cuStreamWaitEvent`.
    StreamWaitEvent = 0x0505;
    /// `cuEventCreate`.
    EventCreate = 0x0601;
    /// `cuEventDestroy`.
    EventDestroy = 0x0602;
    /// `cuEventRecord`.
    EventRecord = 0x0603;
    /// `cuEventSynchronize`.
    EventSynchronize = 0x0604;
    /// `cuEventQuery`.
    EventQuery = 0x0605;
    /// `cuEventElapsedTime`.
    EventElapsedTime = 0x0606;
    /// `cuLaunchKernel`.
    LaunchKernel = 0x0701;
}

impl Opcode {
    /// Its number on the wire.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// Whether it may be sent with `NO_REPLY`: the stream-ordered commands whose reply
    /// would carry nothing but a status (launches, async memsets, async host-to-device and
    /// device-to-device copies, event records, stream waits).
    pub const fn pipelined(self) -> bool {
        matches!(
            self,
            Opcode::LaunchKernel
                | Opcode::MemsetAsync
                | Opcode::MemcpyHtoDAsync
                | Opcode::MemcpyDtoDAsync
                | Opcode::EventRecord
                | Opcode::StreamWaitEvent
        )
    }

    /// Whether the command needs `Init` first (as every driver call but
    /// `cuDriverGetVersion` needs `cuInit`): everything but the session commands
    /// (`Ping`, `Init`, `DriverGetVersion`, `Goodbye`). Before `Init` the server answers
    /// `CUDA_ERROR_NOT_INITIALIZED`.
    pub const fn needs_init(self) -> bool {
        !matches!(
            self,
            Opcode::Ping | Opcode::Init | Opcode::DriverGetVersion | Opcode::Goodbye
        )
    }

    /// Whether the command needs the session's current context: everything but the
    /// session, device-query and primary-context commands (and `cuCtxSetCurrent`).
    pub const fn needs_context(self) -> bool {
        !matches!(
            self,
            Opcode::Ping
                | Opcode::Init
                | Opcode::DriverGetVersion
                | Opcode::Goodbye
                | Opcode::DeviceGetCount
                | Opcode::DeviceGet
                | Opcode::DeviceGetName
                | Opcode::DeviceGetUuid
                | Opcode::DeviceGetPciBusId
                | Opcode::DeviceGetAttribute
                | Opcode::DeviceTotalMem
                | Opcode::DeviceComputeCapability
                | Opcode::PrimaryCtxRetain
                | Opcode::PrimaryCtxRelease
                | Opcode::CtxSetCurrent
        )
    }
}

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
