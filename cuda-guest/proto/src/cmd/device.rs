//! Device queries: every payload is `device: u32` (`DeviceGet`: the ordinal), plus
//! `attribute: i32` for `DeviceGetAttribute`; `DeviceGetCount` has none.

use super::super::error::FieldError;
use super::super::wire::{Reader, Writer};
use super::super::{Opcode, Request};

pub(super) fn decode(opcode: Opcode, r: &mut Reader<'_>) -> Result<Request, FieldError> {
    use Opcode as O;
    if opcode == O::DeviceGetCount {
        return Ok(Request::DeviceGetCount);
    }
    if opcode == O::DeviceGet {
        return Ok(Request::DeviceGet {
            ordinal: r.u32("ordinal")?,
        });
    }
    let device = r.u32("device")?;
    Ok(match opcode {
        O::DeviceGetName => Request::DeviceGetName { device },
        O::DeviceGetUuid => Request::DeviceGetUuid { device },
        O::DeviceGetPciBusId => Request::DeviceGetPciBusId { device },
        O::DeviceGetAttribute => Request::DeviceGetAttribute {
            device,
            attribute: r.i32("attribute")?,
        },
        O::DeviceTotalMem => Request::DeviceTotalMem { device },
        O::DeviceComputeCapability => Request::DeviceComputeCapability { device },
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) {
    use Request as R;
    match *req {
        R::DeviceGet { ordinal } => w.u32(ordinal),
        R::DeviceGetName { device }
        | R::DeviceGetUuid { device }
        | R::DeviceGetPciBusId { device }
        | R::DeviceTotalMem { device }
        | R::DeviceComputeCapability { device } => w.u32(device),
        R::DeviceGetAttribute { device, attribute } => {
            w.u32(device);
            w.i32(attribute);
        }
        _ => {}
    }
}
