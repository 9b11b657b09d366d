//! Host functions that do not block the caller, over a backend that runs them in the
//! caller (forwarded: the service cannot call into the guest).
//!
//! `cuLaunchHostFunc` on such a backend *holds* the stream: the function and the work
//! enqueued on the stream after it wait here, in order, and a thread of this library
//! submits them once the stream's earlier work is done and the function has returned,
//! as a GPU runs them. Meanwhile the stream is busy (`cuStreamQuery`), an event recorded
//! behind the function is not reached (`cuEventQuery`), and waiting for either waits for
//! the held work too. Only streams made with `CU_STREAM_NON_BLOCKING` are held: the
//! legacy default stream orders itself against every blocking stream, which a held
//! blocking stream would have to join; those streams keep running the function in the
//! caller, in stream order.

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::capture::Op;
use crate::fail::Fail;

/// One piece of held work.
pub enum Held {
    /// Stream-ordered work, the function included.
    Op(Op),
    /// `cuEventRecord` of this event.
    Record(u64),
    /// `cuStreamWaitEvent` on this event.
    Wait(u64),
}

/// The held streams of the program.
#[derive(Default)]
pub struct Holds {
    /// Held stream to (its context, the work waiting).
    queues: HashMap<u64, (u64, VecDeque<Held>)>,
    /// Events with records waiting in a queue: how many.
    events: HashMap<u64, u32>,
    /// Streams made with `CU_STREAM_NON_BLOCKING` (the ones that may be held).
    non_blocking: HashSet<u64>,
    /// The first failure of held work submitted late, per stream: the stream's next
    /// synchronisation returns it.
    failed: HashMap<u64, Fail>,
}

thread_local! {
    /// Set on the thread that submits held work: its submissions are not held again.
    static SUBMITTING: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as the one submitting held work.
pub fn submitting() {
    SUBMITTING.with(|s| s.set(true));
}

impl Holds {
    pub fn stream_created(&mut self, stream: u64, non_blocking: bool) {
        if non_blocking {
            self.non_blocking.insert(stream);
        }
    }

    pub fn stream_destroyed(&mut self, stream: u64) {
        self.non_blocking.remove(&stream);
        self.failed.remove(&stream);
    }

    /// Whether `stream` was made `CU_STREAM_NON_BLOCKING`.
    pub fn is_non_blocking(&self, stream: u64) -> bool {
        self.non_blocking.contains(&stream)
    }

    /// Whether a host function on `stream` is to hold it (rather than run in the caller).
    pub fn may_hold(&self, stream: u64) -> bool {
        self.non_blocking.contains(&stream) && !SUBMITTING.with(Cell::get)
    }

    /// Whether `stream` is held.
    pub fn held(&self, stream: u64) -> bool {
        self.queues.contains_key(&stream)
    }

    /// Whether any stream is held.
    pub fn any(&self) -> bool {
        !self.queues.is_empty()
    }

    /// Whether `event` has a record waiting in a queue.
    pub fn event_pending(&self, event: u64) -> bool {
        self.events.contains_key(&event)
    }

    /// Holds `stream` with `f` first; true if the stream was not held yet (the caller
    /// starts the thread that submits its work).
    pub fn hold(&mut self, ctx: u64, stream: u64, f: Op) -> bool {
        match self.queues.get_mut(&stream) {
            Some((_, q)) => {
                q.push_back(Held::Op(f));
                false
            }
            None => {
                self.queues
                    .insert(stream, (ctx, VecDeque::from([Held::Op(f)])));
                true
            }
        }
    }

    /// Queues `work` behind a held `stream`; false (nothing queued) if it is not held
    /// or this is the submitting thread.
    pub fn queue(&mut self, stream: u64, work: impl FnOnce() -> Held) -> bool {
        if SUBMITTING.with(Cell::get) {
            return false;
        }
        let Some((_, q)) = self.queues.get_mut(&stream) else {
            return false;
        };
        let work = work();
        if let Held::Record(e) = work {
            *self.events.entry(e).or_default() += 1;
        }
        q.push_back(work);
        true
    }

    /// The next held work of `stream` with its context; `None` when there is none left,
    /// and the stream is no longer held.
    pub fn next(&mut self, stream: u64) -> Option<(u64, Held)> {
        let (ctx, q) = self.queues.get_mut(&stream)?;
        let ctx = *ctx;
        match q.pop_front() {
            Some(w) => Some((ctx, w)),
            None => {
                self.queues.remove(&stream);
                None
            }
        }
    }

    /// A queued record of `event` was submitted.
    pub fn recorded(&mut self, event: u64) {
        if let Some(n) = self.events.get_mut(&event) {
            *n -= 1;
            if *n == 0 {
                self.events.remove(&event);
            }
        }
    }

    /// Keeps the first failure of `stream`'s late work.
    pub fn fail(&mut self, stream: u64, f: Fail) {
        self.failed.entry(stream).or_insert(f);
    }

    /// The failure of `stream`'s late work, once.
    pub fn take_failure(&mut self, stream: u64) -> Option<Fail> {
        self.failed.remove(&stream)
    }
}
