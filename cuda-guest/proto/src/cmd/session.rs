//! `Ping`, `Init`, `DriverGetVersion`, `Goodbye`.

use super::super::error::{EncodeError, FieldError};
use super::super::wire::{Reader, Writer};
use super::super::{Limits, Opcode, Request};

pub(super) fn decode(
    opcode: Opcode,
    r: &mut Reader<'_>,
    limits: &Limits,
) -> Result<Request, FieldError> {
    Ok(match opcode {
        // data_len u32, data
        Opcode::Ping => {
            let n = r.len_u32("data_len", limits.max_inline)?;
            Request::Ping {
                data: r.data("data", n.into())?,
            }
        }
        // flags u32
        Opcode::Init => Request::Init {
            flags: r.u32("flags")?,
        },
        Opcode::DriverGetVersion => Request::DriverGetVersion,
        Opcode::Goodbye => Request::Goodbye,
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    match req {
        Request::Ping { data } => w.blob("data", data)?,
        Request::Init { flags } => w.u32(*flags),
        _ => {}
    }
    Ok(())
}
