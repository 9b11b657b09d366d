//! Events (`0x06..`) of the current context.

use super::{failed, invalid, Done, Session};
use vmgpu_cuda_api::{Backend, DriverError, Event, EventFlags};
use vmgpu_cuda_proto::{EventId, ReplyBody, Status, StreamId};

/// An event of the session.
#[derive(Debug)]
pub(in crate::session) struct EventEntry {
    pub(in crate::session) event: Event,
    /// The stream it was last recorded on (normalised): what its sync scope covers.
    pub(in crate::session) recorded_on: Option<StreamId>,
}

impl Session {
    /// `EventCreate`: flags `BLOCKING_SYNC` (1) and `DISABLE_TIMING` (2).
    pub(super) fn event_create(&mut self, cx: u64, flags: u32) -> Done {
        if flags & !3 != 0 {
            return Err(invalid(format!("event flags {flags:#x}")));
        }
        self.object_quota("event")?;
        let e = self.backend()?.event_create(EventFlags {
            blocking_sync: flags & 1 != 0,
            disable_timing: flags & 2 != 0,
        })?;
        let h = self.events.insert(
            cx,
            EventEntry {
                event: e,
                recorded_on: None,
            },
        );
        Ok(ReplyBody::Event(EventId(h)))
    }

    /// `EventDestroy`.
    pub(super) fn event_destroy(&mut self, cx: u64, event: EventId) -> Done {
        let e = self
            .events
            .remove(event.0, cx)
            .map_err(|m| super::miss("event", event.0, m))?;
        self.backend()?.event_destroy(e.event)?;
        Ok(ReplyBody::Empty)
    }

    /// `EventRecord` on a stream of the same context.
    pub(super) fn event_record(&mut self, cx: u64, event: EventId, stream: StreamId) -> Done {
        let st = self.stream(cx, stream)?;
        let ev = Self::found(&self.events, "event", event.0, cx)?;
        self.backend()?.event_record(&ev.event, st)?;
        if let Ok(ev) = self.events.get_mut(event.0, cx) {
            ev.recorded_on = Some(super::norm(stream));
        }
        Ok(ReplyBody::Empty)
    }

    /// `EventQuery`: `CUDA_ERROR_NOT_READY` until reached.
    pub(super) fn event_query(&mut self, cx: u64, event: EventId) -> Done {
        let ev = Self::found(&self.events, "event", event.0, cx)?;
        if self.backend()?.event_query(&ev.event)? {
            Ok(ReplyBody::Empty)
        } else {
            Err(failed(Status::ERROR_NOT_READY, ""))
        }
    }

    /// The wait of an event scope (`EventSynchronize`): its last record.
    pub(super) fn wait_event(be: &dyn Backend, event: &Event) -> Result<(), DriverError> {
        be.event_synchronize(event)
    }
}
