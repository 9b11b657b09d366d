//! Primary contexts: `device: u32` for retain and release, `ctx: u64` for set-current,
//! nothing for synchronize.

use super::super::error::FieldError;
use super::super::wire::{Reader, Writer};
use super::super::{ContextId, Opcode, Request};

pub(super) fn decode(opcode: Opcode, r: &mut Reader<'_>) -> Result<Request, FieldError> {
    Ok(match opcode {
        Opcode::PrimaryCtxRetain => Request::PrimaryCtxRetain {
            device: r.u32("device")?,
        },
        Opcode::PrimaryCtxRelease => Request::PrimaryCtxRelease {
            device: r.u32("device")?,
        },
        Opcode::CtxSetCurrent => Request::CtxSetCurrent {
            ctx: ContextId(r.u64("ctx")?),
        },
        Opcode::CtxSynchronize => Request::CtxSynchronize,
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) {
    match *req {
        Request::PrimaryCtxRetain { device } | Request::PrimaryCtxRelease { device } => {
            w.u32(device)
        }
        Request::CtxSetCurrent { ctx } => w.u64(ctx.0),
        _ => {}
    }
}
