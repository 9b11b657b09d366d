//! Events: `flags: u32` to create; `event: u64` to destroy, synchronise or query;
//! `event: u64`, `stream: u64` to record; `start: u64`, `end: u64` for the elapsed time.

use super::super::error::FieldError;
use super::super::wire::{Reader, Writer};
use super::super::{EventId, Opcode, Request, StreamId};

pub(super) fn decode(opcode: Opcode, r: &mut Reader<'_>) -> Result<Request, FieldError> {
    Ok(match opcode {
        Opcode::EventCreate => Request::EventCreate {
            flags: r.u32("flags")?,
        },
        Opcode::EventDestroy => Request::EventDestroy {
            event: EventId(r.u64("event")?),
        },
        Opcode::EventRecord => Request::EventRecord {
            event: EventId(r.u64("event")?),
            stream: StreamId(r.u64("stream")?),
        },
        Opcode::EventSynchronize => Request::EventSynchronize {
            event: EventId(r.u64("event")?),
        },
        Opcode::EventQuery => Request::EventQuery {
            event: EventId(r.u64("event")?),
        },
        Opcode::EventElapsedTime => Request::EventElapsedTime {
            start: EventId(r.u64("start")?),
            end: EventId(r.u64("end")?),
        },
        _ => return Err(super::wrong_group(opcode)),
    })
}

pub(super) fn encode(req: &Request, w: &mut Writer<'_>) {
    match *req {
        Request::EventCreate { flags } => w.u32(flags),
        Request::EventDestroy { event }
        | Request::EventSynchronize { event }
        | Request::EventQuery { event } => w.u64(event.0),
        Request::EventRecord { event, stream } => {
            w.u64(event.0);
            w.u64(stream.0);
        }
        Request::EventElapsedTime { start, end } => {
            w.u64(start.0);
            w.u64(end.0);
        }
        _ => {}
    }
}
