//! Payload codecs of the requests, one file per command group (as mini-redis has one
//! per command). Each group's `decode` reads the payload of one of its opcodes and its
//! `encode` writes it; the frame header is done by the caller.

mod context;
mod copy;
mod device;
mod event;
mod launch;
mod memory;
mod module;
mod session;
mod stream;

use super::error::{EncodeError, FieldError};
use super::wire::{Reader, Writer};
use super::{Limits, Opcode, Request};

/// Decodes the payload of a request with `opcode`.
pub(crate) fn decode(
    opcode: Opcode,
    r: &mut Reader<'_>,
    limits: &Limits,
) -> Result<Request, FieldError> {
    use Opcode as O;
    match opcode {
        O::Ping | O::Init | O::DriverGetVersion | O::Goodbye => session::decode(opcode, r, limits),
        O::DeviceGetCount
        | O::DeviceGet
        | O::DeviceGetName
        | O::DeviceGetUuid
        | O::DeviceGetPciBusId
        | O::DeviceGetAttribute
        | O::DeviceTotalMem
        | O::DeviceComputeCapability => device::decode(opcode, r),
        O::PrimaryCtxRetain | O::PrimaryCtxRelease | O::CtxSetCurrent | O::CtxSynchronize => {
            context::decode(opcode, r)
        }
        O::ModuleLoadData | O::ModuleUnload | O::ModuleGetFunction => {
            module::decode(opcode, r, limits)
        }
        O::MemAlloc | O::MemFree | O::MemGetInfo | O::Memset | O::MemsetAsync => {
            memory::decode(opcode, r)
        }
        O::MemcpyHtoD
        | O::MemcpyHtoDAsync
        | O::MemcpyDtoH
        | O::MemcpyDtoHAsync
        | O::MemcpyDtoD
        | O::MemcpyDtoDAsync => copy::decode(opcode, r, limits),
        O::StreamCreate
        | O::StreamDestroy
        | O::StreamSynchronize
        | O::StreamQuery
        | O::StreamWaitEvent => stream::decode(opcode, r),
        O::EventCreate
        | O::EventDestroy
        | O::EventRecord
        | O::EventSynchronize
        | O::EventQuery
        | O::EventElapsedTime => event::decode(opcode, r),
        O::LaunchKernel => launch::decode(r, limits),
    }
}

/// Encodes the payload of `req`.
pub(crate) fn encode(req: &Request, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    use Request as R;
    match req {
        R::Ping { .. } | R::Init { .. } | R::DriverGetVersion | R::Goodbye => {
            session::encode(req, w)
        }
        R::DeviceGetCount
        | R::DeviceGet { .. }
        | R::DeviceGetName { .. }
        | R::DeviceGetUuid { .. }
        | R::DeviceGetPciBusId { .. }
        | R::DeviceGetAttribute { .. }
        | R::DeviceTotalMem { .. }
        | R::DeviceComputeCapability { .. } => {
            device::encode(req, w);
            Ok(())
        }
        R::PrimaryCtxRetain { .. }
        | R::PrimaryCtxRelease { .. }
        | R::CtxSetCurrent { .. }
        | R::CtxSynchronize => {
            context::encode(req, w);
            Ok(())
        }
        R::ModuleLoadData { .. } | R::ModuleUnload { .. } | R::ModuleGetFunction { .. } => {
            module::encode(req, w)
        }
        R::MemAlloc { .. } | R::MemFree { .. } | R::MemGetInfo | R::Memset { .. } => {
            memory::encode(req, w);
            Ok(())
        }
        R::MemcpyHtoD { .. } | R::MemcpyDtoH { .. } | R::MemcpyDtoD { .. } => copy::encode(req, w),
        R::StreamCreate { .. }
        | R::StreamDestroy { .. }
        | R::StreamSynchronize { .. }
        | R::StreamQuery { .. }
        | R::StreamWaitEvent { .. } => {
            stream::encode(req, w);
            Ok(())
        }
        R::EventCreate { .. }
        | R::EventDestroy { .. }
        | R::EventRecord { .. }
        | R::EventSynchronize { .. }
        | R::EventQuery { .. }
        | R::EventElapsedTime { .. } => {
            event::encode(req, w);
            Ok(())
        }
        R::LaunchKernel { .. } => launch::encode(req, w),
    }
}

/// For `unreachable` arms: the group dispatchers above only pass their own opcodes.
fn wrong_group(opcode: Opcode) -> FieldError {
    FieldError::UnknownOpcode {
        opcode: opcode.code(),
    }
}
