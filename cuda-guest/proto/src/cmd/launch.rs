//! `LaunchKernel`: `function: u64`, `stream: u64`, `grid: 3 x u32`, `block: 3 x u32`,
//! `shared_bytes: u32`, `param_count: u32`, `param_bytes: u32`, then `param_count`
//! slots (`offset: u32`, `size: u32`), then `param_bytes` bytes. Slots lie in order,
//! without overlap, inside the bytes.

use super::super::error::{EncodeError, FieldError};
use super::super::wire::{Reader, Writer};
use super::super::{FunctionId, KernelParams, Limits, ParamLayout, Request, StreamId};

pub(super) fn decode(r: &mut Reader<'_>, limits: &Limits) -> Result<Request, FieldError> {
    let function = FunctionId(r.u64("function")?);
    let stream = StreamId(r.u64("stream")?);
    let grid = [r.u32("grid_x")?, r.u32("grid_y")?, r.u32("grid_z")?];
    let block = [r.u32("block_x")?, r.u32("block_y")?, r.u32("block_z")?];
    let shared_bytes = r.u32("shared_bytes")?;
    let count = r.len_u32("param_count", limits.max_params)?;
    let blob_len = r.len_u32("param_bytes", limits.max_param_bytes)?;
    r.check_items("param_slots", count, 8)?;
    let mut slots = Vec::with_capacity(count as usize);
    let mut end = 0u64;
    for _ in 0..count {
        let at = r.offset();
        let offset = r.u32("param_offset")?;
        let size = r.u32("param_size")?;
        let stop = u64::from(offset) + u64::from(size);
        if u64::from(offset) < end {
            return Err(FieldError::Mismatch {
                field: "param_offset",
                offset: at,
                found: offset.into(),
                expected: end,
            });
        }
        if stop > u64::from(blob_len) {
            return Err(FieldError::LimitExceeded {
                field: "param_size",
                offset: at + 4,
                value: stop,
                max: blob_len.into(),
            });
        }
        end = stop;
        slots.push(ParamLayout { offset, size });
    }
    let bytes = r.take("param_data", blob_len.into())?.to_vec();
    Ok(Request::LaunchKernel {
        function,
        grid,
        block,
        shared_bytes,
        stream,
        params: KernelParams { slots, bytes },
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    if let Request::LaunchKernel {
        function,
        grid,
        block,
        shared_bytes,
        stream,
        params,
    } = req
    {
        params.check()?;
        w.u64(function.0);
        w.u64(stream.0);
        for v in grid.iter().chain(block) {
            w.u32(*v);
        }
        w.u32(*shared_bytes);
        w.len_u32("param_count", params.slots.len())?;
        w.len_u32("param_bytes", params.bytes.len())?;
        for s in &params.slots {
            w.u32(s.offset);
            w.u32(s.size);
        }
        w.bytes(&params.bytes);
    }
    Ok(())
}
