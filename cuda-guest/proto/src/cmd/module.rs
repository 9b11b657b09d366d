//! Modules: `image_len: u32` + image; `module: u64`; `module: u64` + `name_len: u32` +
//! name.

use super::super::error::{EncodeError, FieldError};
use super::super::wire::{Reader, Writer};
use super::super::{Limits, ModuleId, Opcode, Request};

pub(super) fn decode(
    opcode: Opcode,
    r: &mut Reader<'_>,
    limits: &Limits,
) -> Result<Request, FieldError> {
    Ok(match opcode {
        Opcode::ModuleLoadData => Request::ModuleLoadData {
            image: r.blob("image_len", limits.max_module)?,
        },
        Opcode::ModuleUnload => Request::ModuleUnload {
            module: ModuleId(r.u64("module")?),
        },
        Opcode::ModuleGetFunction => Request::ModuleGetFunction {
            module: ModuleId(r.u64("module")?),
            name: r.string("name_len", limits.max_name)?,
        },
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    match req {
        Request::ModuleLoadData { image } => w.blob("image", image)?,
        Request::ModuleUnload { module } => w.u64(module.0),
        Request::ModuleGetFunction { module, name } => {
            w.u64(module.0);
            w.blob("name", name.as_bytes())?;
        }
        _ => {}
    }
    Ok(())
}
