//! Futures that complete when a stream reaches a recorded event.
//!
//! Each [`GpuStream`](super::GpuStream) starts, with its first future, one completion
//! thread that waits on the stream's events in order (`cuEventSynchronize`, a
//! blocking-sync event; a stream reaches them in that order anyway) and wakes each
//! future's task; it ends when the stream is dropped and its futures are complete. No executor thread ever blocks, so the futures
//! work with tokio (or any executor). What a future owns (host memory an asynchronous
//! copy reads or writes) stays alive until the event is reached, even when the future
//! is dropped before: the completion thread holds it too.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::GpuEvent;
use crate::driver::{DriverError, Result};

#[derive(Debug)]
struct Slot<V> {
    result: Option<Result<()>>,
    value: Option<V>,
    waker: Option<Waker>,
}

#[derive(Debug)]
struct Shared<V> {
    slot: Mutex<Slot<V>>,
}

trait Complete: Send {
    fn complete(&self, r: Result<()>);
}

impl<V: Send> Complete for Shared<V> {
    fn complete(&self, r: Result<()>) {
        let waker = {
            let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            s.result = Some(r);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// One future's event and where its result goes.
pub(super) struct Job {
    event: GpuEvent,
    done: Arc<dyn Complete + Sync>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("event", &self.event).finish()
    }
}

/// A queued operation as a [`Future`]: ready when the stream has reached it, with the
/// value it owned (e.g. the host buffer of a copy) or the operation's error.
#[derive(Debug)]
#[must_use = "a GpuFuture does nothing unless awaited (the work is queued either way)"]
pub struct GpuFuture<V> {
    shared: Arc<Shared<V>>,
}

impl<V> GpuFuture<V> {
    /// Whether the stream has reached the operation (polling would be ready).
    pub fn is_complete(&self) -> bool {
        self.shared
            .slot
            .lock()
            .map(|s| s.result.is_some())
            .unwrap_or(true)
    }
}

impl<V: Send> GpuFuture<V> {
    /// Blocks the calling thread until the operation is done (outside async code).
    pub fn wait(self) -> Result<V> {
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let waker = Waker::from(Arc::new(ChannelWaker(Mutex::new(tx))));
        let mut cx = Context::from_waker(&waker);
        let mut this = self;
        loop {
            if let Poll::Ready(r) = Pin::new(&mut this).poll(&mut cx) {
                return r;
            }
            if rx.recv().is_err() {
                return Err(DriverError::Unexpected {
                    operation: "GpuFuture::wait",
                    reason: "the completion thread went away".into(),
                });
            }
        }
    }
}

struct ChannelWaker(Mutex<mpsc::SyncSender<()>>);

impl std::task::Wake for ChannelWaker {
    fn wake(self: Arc<Self>) {
        if let Ok(tx) = self.0.lock() {
            let _ = tx.try_send(());
        }
    }
}

impl<V> Unpin for GpuFuture<V> {}

impl<V: Send> Future for GpuFuture<V> {
    type Output = Result<V>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<V>> {
        let mut s = self.shared.slot.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(Ok(())) => match s.value.take() {
                Some(v) => Poll::Ready(Ok(v)),
                None => Poll::Ready(Err(DriverError::InvalidArgument {
                    operation: "GpuFuture::poll",
                    reason: "polled again after it was ready".into(),
                })),
            },
            Some(Err(e)) => {
                // The operation's host memory is dropped here: the stream is past it
                // (or the context failed, and no more work of it runs).
                s.value = None;
                Poll::Ready(Err(e))
            }
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A future already complete with `error`: the work was queued, and its failure (a
/// sticky fault) was known before its completion could be recorded.
pub(super) fn failed<V>(error: DriverError) -> GpuFuture<V> {
    GpuFuture {
        shared: Arc::new(Shared {
            slot: Mutex::new(Slot {
                result: Some(Err(error)),
                value: None,
                waker: None,
            }),
        }),
    }
}

/// Hands `event` (recorded) to the stream's completion thread; the future owns `value`
/// until the event is reached.
pub(super) fn submit<V: Send + 'static>(
    completer: &Mutex<Option<mpsc::Sender<Job>>>,
    event: GpuEvent,
    value: V,
) -> Result<GpuFuture<V>> {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            result: None,
            value: Some(value),
            waker: None,
        }),
    });
    let job = Job {
        event,
        done: shared.clone(),
    };
    let mut completer = completer.lock().unwrap_or_else(|e| e.into_inner());
    let job = match completer.as_ref() {
        Some(tx) => match tx.send(job) {
            Ok(()) => return Ok(GpuFuture { shared }),
            Err(mpsc::SendError(job)) => job,
        },
        None => job,
    };
    let (tx, rx) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("vmgpu-completion".into())
        .spawn(move || {
            for job in rx {
                let r = job.event.synchronize();
                job.done.complete(r);
                // The event (and the Gpu reference it holds) is dropped here.
            }
        });
    if let Err(e) = spawned {
        // No thread to wait with: wait here, so that what the future owns is not
        // released while the device may still use it.
        log::warn!("cannot start the completion thread ({e}); waiting for the stream");
        let r = job.event.synchronize();
        job.done.complete(r);
        return Ok(GpuFuture { shared });
    }
    // A new channel: the receiver lives in the thread just started.
    if let Err(mpsc::SendError(job)) = tx.send(job) {
        let r = job.event.synchronize();
        job.done.complete(r);
    }
    *completer = Some(tx);
    Ok(GpuFuture { shared })
}
