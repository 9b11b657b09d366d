//! Streams (`0x05..`) of the current context; the reserved values 0, 1 and 2 are its
//! legacy default stream.

use super::{failed, invalid, Done, Outcome, Session};
use vmgpu_cuda_api::{Backend, DriverError, Stream, StreamFlags};
use vmgpu_cuda_proto::{EventId, ReplyBody, Status, StreamId};

impl Session {
    /// The stream `s` of context `cx` (the default stream for 0, 1 and 2).
    pub(super) fn stream(&self, cx: u64, s: StreamId) -> Result<&Stream, Outcome> {
        if s.0 <= 2 {
            return Ok(&Stream::DEFAULT);
        }
        Self::found(&self.streams, "stream", s.0, cx)
    }

    /// `StreamCreate`: flag `CU_STREAM_NON_BLOCKING` only; the priority is ignored.
    pub(super) fn stream_create(&mut self, cx: u64, flags: u32, _priority: i32) -> Done {
        if flags & !1 != 0 {
            return Err(invalid(format!("stream flags {flags:#x}")));
        }
        self.object_quota("stream")?;
        let s = self.backend()?.stream_create(StreamFlags {
            non_blocking: flags & 1 != 0,
        })?;
        Ok(ReplyBody::Stream(StreamId(self.streams.insert(cx, s))))
    }

    /// `StreamDestroy`: what is pending of it is not reported afterwards.
    pub(super) fn stream_destroy(&mut self, cx: u64, stream: StreamId) -> Done {
        let s = self
            .streams
            .remove(stream.0, cx)
            .map_err(|m| super::miss("stream", stream.0, m))?;
        if let Some(c) = self.contexts.get_mut(cx) {
            c.deferred.forget_stream(stream);
            c.unsynced.retain(|(u, _)| *u != stream);
        }
        self.backend()?.stream_destroy(s)?;
        Ok(ReplyBody::Empty)
    }

    /// `StreamQuery`: `CUDA_ERROR_NOT_READY` while busy.
    pub(super) fn stream_query(&mut self, cx: u64, stream: StreamId) -> Done {
        let be = self.backend()?;
        if be.stream_query(self.stream(cx, stream)?)? {
            Ok(ReplyBody::Empty)
        } else {
            Err(failed(Status::ERROR_NOT_READY, ""))
        }
    }

    /// `StreamWaitEvent` (flags 0).
    pub(super) fn stream_wait_event(
        &mut self,
        cx: u64,
        stream: StreamId,
        event: EventId,
        flags: u32,
    ) -> Done {
        if flags != 0 {
            return Err(invalid("cuStreamWaitEvent flags must be 0"));
        }
        let st = self.stream(cx, stream)?;
        let ev = Self::found(&self.events, "event", event.0, cx)?;
        self.backend()?.stream_wait_event(st, &ev.event)?;
        Ok(ReplyBody::Empty)
    }

    /// The wait of a stream scope (`StreamSynchronize`, `MemcpyDtoHAsync`): the stream's
    /// work to its end.
    pub(super) fn wait_stream(be: &dyn Backend, st: &Stream) -> Result<(), DriverError> {
        be.stream_synchronize(st)
    }
}
