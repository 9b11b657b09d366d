//! The deferred-error rule of `docs/protocol.md` (section 6) as a small state machine a
//! session keeps: failures of pipelined requests are recorded per stream (the first one
//! of each stream until it is reported), and a synchronising request's reply takes the
//! oldest one its scope covers. Sticky errors are kept until the context is reset.

use super::{Cause, Opcode, Reply, Status, StreamId};

/// A failure waiting to be reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeferredError {
    /// Its `CUresult`.
    pub status: Status,
    /// The pipelined request that failed.
    pub cause: Cause,
    /// The failure detail.
    pub detail: String,
}

/// Which streams' deferred errors a synchronising request reports: the streams its
/// [`SyncScope`](super::SyncScope) covers, resolved by the session (an event scope is the
/// stream the event was last recorded on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covered<'a> {
    /// Every stream (scope `Context`).
    All,
    /// These streams.
    Streams(&'a [StreamId]),
}

/// A session's unreported failures of pipelined requests, and its sticky error.
#[derive(Debug, Default, Clone)]
pub struct DeferredErrors {
    /// At most one per stream: the first unreported one.
    pending: Vec<(StreamId, DeferredError)>,
    sticky: Option<DeferredError>,
}

impl DeferredErrors {
    /// No failure.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the pipelined request `cause`, ordered on `stream`, failed. Only the
    /// first unreported failure of a stream is kept; a sticky status
    /// ([`Status::is_sticky`]) also becomes the session's sticky error if it has none.
    pub fn record(&mut self, stream: StreamId, err: DeferredError) {
        if err.status.is_sticky() && self.sticky.is_none() {
            self.sticky = Some(err.clone());
        }
        if !self.pending.iter().any(|(s, _)| *s == stream) {
            self.pending.push((stream, err));
        }
    }

    /// The sticky error, if the session's context is poisoned.
    pub fn sticky(&self) -> Option<&DeferredError> {
        self.sticky.as_ref()
    }

    /// Forgets everything (the session's context was reset, or the streams destroyed with
    /// it).
    pub fn reset(&mut self) {
        self.pending.clear();
        self.sticky = None;
    }

    /// Forgets what is pending on `stream` (it was destroyed; CUDA reports nothing of a
    /// destroyed stream's work afterwards).
    pub fn forget_stream(&mut self, stream: StreamId) {
        self.pending.retain(|(s, _)| *s != stream);
    }

    /// How many streams have an unreported failure.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// What a synchronising request covering `covered` reports: the sticky error if the
    /// context is poisoned (it stays), else the oldest (lowest request id) unreported
    /// failure of the covered streams, which is then cleared.
    pub fn take(&mut self, covered: Covered<'_>) -> Option<DeferredError> {
        if let Some(s) = &self.sticky {
            return Some(s.clone());
        }
        let in_scope = |s: &StreamId| match covered {
            Covered::All => true,
            Covered::Streams(list) => list.contains(s),
        };
        let idx = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| in_scope(s))
            .min_by_key(|(_, (_, e))| e.cause.id)
            .map(|(i, _)| i)?;
        Some(self.pending.swap_remove(idx).1)
    }

    /// [`DeferredErrors::take`] as the reply to request `id` (`opcode`), or `None` when
    /// nothing is to be reported and the request goes ahead.
    pub fn reply_for(&mut self, id: u64, opcode: Opcode, covered: Covered<'_>) -> Option<Reply> {
        self.take(covered)
            .map(|e| Reply::deferred(id, opcode, e.status, e.cause, e.detail))
    }
}
