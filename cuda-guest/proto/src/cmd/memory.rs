//! Device memory: `bytes: u64`; `ptr: u64`; nothing; and memsets:
//! `[stream: u64]` `dst: u64`, `count: u64`, `value: u32`, `width: u32` (1, 2 or 4).

use super::super::error::FieldError;
use super::super::wire::{Reader, Writer};
use super::super::{DevicePtr, MemsetWidth, Opcode, Request, StreamId};

pub(super) fn decode(opcode: Opcode, r: &mut Reader<'_>) -> Result<Request, FieldError> {
    Ok(match opcode {
        Opcode::MemAlloc => Request::MemAlloc {
            bytes: r.u64("bytes")?,
        },
        Opcode::MemFree => Request::MemFree {
            ptr: DevicePtr(r.u64("ptr")?),
        },
        Opcode::MemGetInfo => Request::MemGetInfo,
        Opcode::Memset | Opcode::MemsetAsync => {
            let stream = if opcode == Opcode::MemsetAsync {
                Some(StreamId(r.u64("stream")?))
            } else {
                None
            };
            let dst = DevicePtr(r.u64("dst")?);
            let count = r.u64("count")?;
            let value = r.u32("value")?;
            let offset = r.offset();
            let w = r.u32("width")?;
            let width = MemsetWidth::from_u32(w).ok_or(FieldError::InvalidValue {
                field: "width",
                offset,
                value: w.into(),
            })?;
            Request::Memset {
                dst,
                value,
                count,
                width,
                stream,
            }
        }
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) {
    match *req {
        Request::MemAlloc { bytes } => w.u64(bytes),
        Request::MemFree { ptr } => w.u64(ptr.0),
        Request::Memset {
            dst,
            value,
            count,
            width,
            stream,
        } => {
            if let Some(s) = stream {
                w.u64(s.0);
            }
            w.u64(dst.0);
            w.u64(count);
            w.u32(value);
            w.u32(width as u32);
        }
        _ => {}
    }
}
