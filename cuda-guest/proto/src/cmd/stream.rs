//! Streams: `flags: u32`, `priority: i32` to create; `stream: u64` to destroy,
//! synchronise or query; `stream: u64`, `event: u64`, `flags: u32` to wait on an event.

use super::super::error::FieldError;
use super::super::wire::{Reader, Writer};
use super::super::{EventId, Opcode, Request, StreamId};

pub(super) fn decode(opcode: Opcode, r: &mut Reader<'_>) -> Result<Request, FieldError> {
    if opcode == Opcode::StreamCreate {
        return Ok(Request::StreamCreate {
            flags: r.u32("flags")?,
            priority: r.i32("priority")?,
        });
    }
    let stream = StreamId(r.u64("stream")?);
    Ok(match opcode {
        Opcode::StreamDestroy => Request::StreamDestroy { stream },
        Opcode::StreamSynchronize => Request::StreamSynchronize { stream },
        Opcode::StreamQuery => Request::StreamQuery { stream },
        Opcode::StreamWaitEvent => Request::StreamWaitEvent {
            stream,
            event: EventId(r.u64("event")?),
            flags: r.u32("flags")?,
        },
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) {
    match *req {
        Request::StreamCreate { flags, priority } => {
            w.u32(flags);
            w.i32(priority);
        }
        Request::StreamDestroy { stream }
        | Request::StreamSynchronize { stream }
        | Request::StreamQuery { stream } => w.u64(stream.0),
        Request::StreamWaitEvent {
            stream,
            event,
            flags,
        } => {
            w.u64(stream.0);
            w.u64(event.0);
            w.u32(flags);
        }
        _ => {}
    }
}
