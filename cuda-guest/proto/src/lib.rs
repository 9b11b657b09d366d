//! The wire protocol between a guest's `libcuda.so.1` (the client) and the VMM's CUDA
//! service (the server). Pure, synchronous and transport-independent: the same bytes go
//! over a Unix socket, AF_VSOCK, a virtio-serial port or a VMM's own virtio queue.
//! `docs/protocol.md` documents it byte by byte.
//!
//! A connection starts with a handshake ([`ClientHello`], answered by [`ServerHello`],
//! which announces the session's [`Limits`]); then the client sends [`RequestFrame`]s,
//! one per CUDA driver call ([`Request`]), and the server answers each one that does not
//! carry `NO_REPLY` with a [`Reply`], in request order. Every frame starts with a 16-byte
//! header: `length: u32` (the whole frame), `id: u64`, `opcode: u16`, `flags: u16`, all
//! little-endian.
//!
//! Handles ([`ContextId`], [`ModuleId`], [`FunctionId`], [`StreamId`], [`EventId`]) are
//! opaque numbers the server chose for this session; device addresses ([`DevicePtr`]) are
//! addresses in the session's own device address space. Neither is ever a host pointer,
//! and neither means anything in another session.
//!
//! Decoding checks every length and count against the [`Limits`] before allocating and
//! never panics; errors say which field was bad and where. [`Decoder`] assembles frames
//! from a byte stream fed in pieces of any size; [`DeferredErrors`] keeps the rule by
//! which failures of pipelined requests are reported.
//!
//! Everything above does no I/O. The one module that does is [`client`]: its
//! [`RemoteBackend`](client::RemoteBackend) is the client side as a
//! `vmgpu_cuda_api::Backend`, over a Unix socket, AF_VSOCK or a virtio-serial port.
//!
//! ```
//! use vmgpu_cuda_proto::{Decoder, Limits, Reply, ReplyBody, Request, RequestFrame, Opcode, Status};
//!
//! let limits = Limits::default();
//! // Client: cuMemAlloc(1 MiB) as request 7.
//! let mut wire = Vec::new();
//! RequestFrame::new(7, Request::MemAlloc { bytes: 1 << 20 }).encode(&mut wire)?;
//!
//! // Server: bytes arrive in pieces; whole frames come out.
//! let mut server = Decoder::<RequestFrame>::new(limits);
//! server.feed(&wire[..5]);
//! assert!(server.next_frame()?.is_none()); // needs more
//! server.feed(&wire[5..]);
//! let req = server.next_frame()?.unwrap();
//! assert_eq!(req.request, Request::MemAlloc { bytes: 1 << 20 });
//!
//! // Server answers; client decodes.
//! let mut out = Vec::new();
//! Reply::ok(req.id, Opcode::MemAlloc, ReplyBody::DevicePtr(vmgpu_cuda_proto::DevicePtr(0x2_0000_0000)))
//!     .encode(&mut out)?;
//! let mut client = Decoder::<Reply>::new(limits);
//! client.feed(&out);
//! let reply = client.next_frame()?.unwrap();
//! assert_eq!(reply.status, Status::SUCCESS);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`ClientHello`]: crate::ClientHello
//! [`ServerHello`]: crate::ServerHello
//! [`Limits`]: crate::Limits
//! [`RequestFrame`]: crate::RequestFrame
//! [`Request`]: crate::Request
//! [`Reply`]: crate::Reply
//! [`ContextId`]: crate::ContextId
//! [`ModuleId`]: crate::ModuleId
//! [`FunctionId`]: crate::FunctionId
//! [`StreamId`]: crate::StreamId
//! [`EventId`]: crate::EventId
//! [`DevicePtr`]: crate::DevicePtr
//! [`Decoder`]: crate::Decoder
//! [`DeferredErrors`]: crate::DeferredErrors

#[macro_use]
mod declare;
pub mod client;
mod codec;
mod commands;
mod decoder;
mod deferred;
mod error;
mod frame;
mod handshake;
mod reply;
mod request;
pub mod serve;
mod wire;

pub use commands::{serve, Opcode, ReplyBody, Request};
pub use decoder::{Decoded, Decoder, Frame, Message};
pub use deferred::{Covered, DeferredError, DeferredErrors};
pub use error::{DecodeError, EncodeError, FieldError, HandshakeError, Refused};
pub use frame::{FLAG_NO_REPLY, FLAG_REPLY, HEADER_LEN, REPLY_HEADER_LEN};
pub use handshake::{ClientHello, ServerHello, CLIENT_HELLO_LEN, SERVER_HELLO_LEN};
pub use reply::{Cause, FunctionInfo, Reply};
pub use request::{
    HostDest, HostSource, KernelParams, LentRequest, MemsetWidth, RequestFrame, SgEntry, SyncScope,
};
/// The device address and parameter layout types are the driver boundary's own.
pub use vmgpu_cuda_api::{DevicePtr, ParamLayout, Status};

/// Protocol major version: peers of different majors do not talk.
pub const VERSION_MAJOR: u16 = 1;
/// Protocol minor version: the session uses the smaller of the two peers' minors.
pub const VERSION_MINOR: u16 = 2;

/// Feature bits negotiated in the handshake (the session gets the intersection of what
/// the client asks and the server offers; unknown bits are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(pub u64);

impl Features {
    /// No optional feature.
    pub const NONE: Features = Features(0);
    /// Bulk data as guest-physical scatter-gather lists ([`HostSource::Guest`],
    /// [`HostDest::Guest`]); only for transports where the server reaches guest memory
    /// (a VMM's own device). Socket transports move data inline.
    pub const SCATTER_GATHER: Features = Features(1 << 0);
    /// Requests sent with `NO_REPLY` (pipelined launches, async copies and memsets,
    /// event records, stream waits). Servers of version 1.0 always offer it; a client
    /// that did not get it sends none.
    pub const PIPELINING: Features = Features(1 << 1);
    /// Every feature this version knows.
    pub const ALL: Features = Features(0b11);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }
    /// The bits both have.
    pub const fn intersect(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }
}

/// Hard limits of a session, announced by the server in its [`ServerHello`]. The decoder
/// checks each before allocating anything for the field it bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Largest frame, header included, in either direction.
    pub max_frame: u32,
    /// Largest inline data of one copy (either direction) or ping.
    pub max_inline: u32,
    /// Largest module image (`ModuleLoadData`).
    pub max_module: u32,
    /// Most scatter-gather entries in one copy.
    pub max_sg_entries: u32,
    /// Most kernel parameters of one launch (and of a function's parameter list).
    pub max_params: u32,
    /// Largest packed kernel parameter bytes of one launch.
    pub max_param_bytes: u32,
    /// Longest string (kernel name, device name, PCI bus id).
    pub max_name: u32,
    /// Most live objects (allocations, modules, functions, streams, events) of the
    /// session; enforced by the service, announced so the guest knows.
    pub max_objects: u32,
    /// Most requests awaiting a reply (sent without `NO_REPLY`, reply not yet read) the
    /// client may have at once. Beyond it the server may stop reading until the client
    /// reads its replies, so a client that writes more without reading can deadlock.
    /// `NO_REPLY` requests do not count: the transport's backpressure bounds them.
    pub max_pipelined: u32,
}

/// Fixed bytes any frame may need besides its data, its strings or its lists: a frame
/// limit must leave this much room above each of them.
pub const FRAME_OVERHEAD: u32 = 64;
/// The smallest `max_frame` a server may announce.
pub const MIN_FRAME: u32 = 4096;

impl Default for Limits {
    /// 8 MiB of inline data per copy, 16 MiB modules, 4096 scatter-gather entries,
    /// 1024 parameters in 32764 bytes (CUDA 12.1's limit), 4096-byte names.
    fn default() -> Self {
        Limits {
            max_frame: (16 << 20) + 4096,
            max_inline: 8 << 20,
            max_module: 16 << 20,
            max_sg_entries: 4096,
            max_params: 1024,
            max_param_bytes: 32764,
            max_name: 4096,
            max_objects: 65536,
            max_pipelined: 4096,
        }
    }
}

impl Limits {
    /// Checks that the limits are usable: `max_frame` at least [`MIN_FRAME`] and room in
    /// a frame for the largest data, module, list, parameters and name they allow.
    pub fn validate(&self) -> Result<(), HandshakeError> {
        let frame = u64::from(self.max_frame);
        let room = frame.saturating_sub(FRAME_OVERHEAD.into());
        let bad = |field, offset, value, why| {
            Err(HandshakeError::BadLimits {
                field,
                offset,
                value,
                why,
            })
        };
        if self.max_frame < MIN_FRAME {
            return bad("max_frame", 12, self.max_frame, "below the minimum of 4096");
        }
        if u64::from(self.max_inline) > room {
            return bad(
                "max_inline",
                32,
                self.max_inline,
                "does not fit in max_frame",
            );
        }
        if u64::from(self.max_module) > room {
            return bad(
                "max_module",
                36,
                self.max_module,
                "does not fit in max_frame",
            );
        }
        if u64::from(self.max_sg_entries) * 16 > room {
            return bad(
                "max_sg_entries",
                40,
                self.max_sg_entries,
                "16 bytes each do not fit in max_frame",
            );
        }
        if u64::from(self.max_params) * 8 + u64::from(self.max_param_bytes) > room {
            return bad(
                "max_params",
                44,
                self.max_params,
                "8 bytes each plus max_param_bytes do not fit in max_frame",
            );
        }
        if u64::from(self.max_name) > room {
            return bad("max_name", 52, self.max_name, "does not fit in max_frame");
        }
        if self.max_pipelined == 0 {
            return bad("max_pipelined", 60, 0, "must be at least 1");
        }
        Ok(())
    }
}

macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u64);
    )*};
}

handles! {
    /// A context handle (the session's primary context of one device).
    ContextId;
    /// A module handle.
    ModuleId;
    /// A kernel handle.
    FunctionId;
    /// A stream handle; [`StreamId::DEFAULT`] (0) is the default stream.
    StreamId;
    /// An event handle.
    EventId;
}

impl StreamId {
    /// The default stream (`NULL` in CUDA).
    pub const DEFAULT: StreamId = StreamId(0);
    /// `CU_STREAM_LEGACY`: the legacy default stream.
    pub const LEGACY: StreamId = StreamId(1);
    /// `CU_STREAM_PER_THREAD`: the per-thread default stream (of the connection).
    pub const PER_THREAD: StreamId = StreamId(2);
    /// Handles below this value are reserved for the special streams above; the server
    /// hands out handles from here on.
    pub const FIRST_HANDLE: u64 = 0x100;
}

#[cfg(test)]
mod tests;
