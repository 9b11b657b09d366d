//! Copies. Every `*Async` payload starts with `stream: u64`; then
//!
//! - `MemcpyHtoD`: `dst: u64`, `bytes: u64`, `kind: u32`, `count: u32`, then `count`
//!   data bytes (kind 0, inline: `count == bytes`) or `count` scatter-gather entries
//!   (kind 1, guest memory: their lengths add up to `bytes`);
//! - `MemcpyDtoH`: `src: u64`, `bytes: u64`, `kind: u32`, `count: u32`, then nothing
//!   (kind 0, inline: `count == 0`, the data comes in the reply) or `count` entries;
//! - `MemcpyDtoD`: `dst: u64`, `src: u64`, `bytes: u64`.
//!
//! A scatter-gather entry is `gpa: u64`, `len: u64` (non-zero, `gpa + len` without
//! overflow).

use super::super::error::{EncodeError, FieldError};
use super::super::wire::{Reader, Writer};
use super::super::{DevicePtr, HostDest, HostSource, Limits, Opcode, Request, SgEntry, StreamId};

const KIND_INLINE: u32 = 0;
const KIND_GUEST: u32 = 1;

pub(super) fn decode(
    opcode: Opcode,
    r: &mut Reader<'_>,
    limits: &Limits,
) -> Result<Request, FieldError> {
    use Opcode as O;
    let stream = match opcode {
        O::MemcpyHtoDAsync | O::MemcpyDtoHAsync | O::MemcpyDtoDAsync => {
            Some(StreamId(r.u64("stream")?))
        }
        _ => None,
    };
    Ok(match opcode {
        O::MemcpyHtoD | O::MemcpyHtoDAsync => {
            let dst = DevicePtr(r.u64("dst")?);
            let bytes_at = r.offset();
            let bytes = r.u64("bytes")?;
            let kind = kind(r)?;
            let src = if kind == KIND_INLINE {
                let count_at = r.offset();
                let count = r.len_u32("count", limits.max_inline)?;
                if u64::from(count) != bytes {
                    return Err(FieldError::Mismatch {
                        field: "count",
                        offset: count_at,
                        found: count.into(),
                        expected: bytes,
                    });
                }
                HostSource::Inline(r.data("data", count.into())?)
            } else {
                HostSource::Guest(sg_list(r, limits, bytes, bytes_at)?)
            };
            Request::MemcpyHtoD { dst, src, stream }
        }
        O::MemcpyDtoH | O::MemcpyDtoHAsync => {
            let src = DevicePtr(r.u64("src")?);
            let bytes_at = r.offset();
            let bytes = r.u64("bytes")?;
            let kind = kind(r)?;
            let dst = if kind == KIND_INLINE {
                if bytes > limits.max_inline.into() {
                    return Err(FieldError::LimitExceeded {
                        field: "bytes",
                        offset: bytes_at,
                        value: bytes,
                        max: limits.max_inline.into(),
                    });
                }
                let count_at = r.offset();
                let count = r.u32("count")?;
                if count != 0 {
                    return Err(FieldError::InvalidValue {
                        field: "count",
                        offset: count_at,
                        value: count.into(),
                    });
                }
                HostDest::Inline
            } else {
                HostDest::Guest(sg_list(r, limits, bytes, bytes_at)?)
            };
            Request::MemcpyDtoH {
                src,
                bytes,
                dst,
                stream,
            }
        }
        O::MemcpyDtoD | O::MemcpyDtoDAsync => Request::MemcpyDtoD {
            dst: DevicePtr(r.u64("dst")?),
            src: DevicePtr(r.u64("src")?),
            bytes: r.u64("bytes")?,
            stream,
        },
        _ => return Err(super::wrong_group(opcode)),
    })
}

fn kind(r: &mut Reader<'_>) -> Result<u32, FieldError> {
    let offset = r.offset();
    match r.u32("kind")? {
        k @ (KIND_INLINE | KIND_GUEST) => Ok(k),
        k => Err(FieldError::InvalidValue {
            field: "kind",
            offset,
            value: k.into(),
        }),
    }
}

/// `count: u32` then the entries; their total must be `bytes` (the field at `bytes_at`).
fn sg_list(
    r: &mut Reader<'_>,
    limits: &Limits,
    bytes: u64,
    bytes_at: usize,
) -> Result<Vec<SgEntry>, FieldError> {
    let count = r.len_u32("count", limits.max_sg_entries)?;
    r.check_items("sg_entries", count, 16)?;
    let mut list = Vec::with_capacity(count as usize);
    let mut total: u128 = 0;
    for _ in 0..count {
        let gpa = r.u64("sg_gpa")?;
        let len_at = r.offset();
        let len = r.u64("sg_len")?;
        if len == 0 || gpa.checked_add(len).is_none() {
            return Err(FieldError::InvalidValue {
                field: "sg_len",
                offset: len_at,
                value: len,
            });
        }
        total += u128::from(len);
        list.push(SgEntry { gpa, len });
    }
    if total != u128::from(bytes) {
        return Err(FieldError::Mismatch {
            field: "bytes",
            offset: bytes_at,
            found: bytes,
            expected: u64::try_from(total).unwrap_or(u64::MAX),
        });
    }
    Ok(list)
}

fn write_sg(w: &mut Writer<'_>, list: &[SgEntry]) -> Result<(), EncodeError> {
    w.len_u32("sg_entries", list.len())?;
    for e in list {
        w.u64(e.gpa);
        w.u64(e.len);
    }
    Ok(())
}

fn sg_total(list: &[SgEntry]) -> u64 {
    list.iter().fold(0u64, |t, e| t.wrapping_add(e.len))
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) -> Result<(), EncodeError> {
    match req {
        Request::MemcpyHtoD { dst, src, stream } => {
            if let Some(s) = stream {
                w.u64(s.0);
            }
            w.u64(dst.0);
            match src {
                HostSource::Inline(data) => {
                    w.u64(data.len() as u64);
                    w.u32(KIND_INLINE);
                    w.blob("data", data)?;
                }
                HostSource::Guest(list) => {
                    w.u64(sg_total(list));
                    w.u32(KIND_GUEST);
                    write_sg(w, list)?;
                }
            }
        }
        Request::MemcpyDtoH {
            src,
            bytes,
            dst,
            stream,
        } => {
            if let Some(s) = stream {
                w.u64(s.0);
            }
            w.u64(src.0);
            w.u64(*bytes);
            match dst {
                HostDest::Inline => {
                    w.u32(KIND_INLINE);
                    w.u32(0);
                }
                HostDest::Guest(list) => {
                    w.u32(KIND_GUEST);
                    write_sg(w, list)?;
                }
            }
        }
        Request::MemcpyDtoD {
            dst,
            src,
            bytes,
            stream,
        } => {
            if let Some(s) = stream {
                w.u64(s.0);
            }
            w.u64(dst.0);
            w.u64(src.0);
            w.u64(*bytes);
        }
        _ => {}
    }
    Ok(())
}
