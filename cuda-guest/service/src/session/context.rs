//! Contexts (`0x02..`): the primary context (retain counted), the contexts made with
//! `CtxCreate`, the connection's current context, and the teardown of a context with
//! everything made in it (its release or destruction, a sticky fault, the session's
//! end).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::Gpu;
use super::{failed, invalid, Done, Outcome, Session};
use vmgpu_cuda_api::{Backend, Context, Device, DriverError};
use vmgpu_cuda_proto::{
    Cause, ContextId, DeferredError, DeferredErrors, ReplyBody, Status, StreamId,
};

/// Contexts a session may make with `CtxCreate` (besides its primary one): each is a
/// device thread of its own on the simulator, and costs device memory of its own on a
/// GPU that the guest's memory quota does not see. Beyond it `CtxCreate` is
/// `CUDA_ERROR_OUT_OF_MEMORY`, as the driver answers when it cannot make one.
pub const MAX_CREATED_CONTEXTS: usize = 16;

/// One context of the session.
#[derive(Debug)]
pub(in crate::session) struct Ctx {
    /// The device's primary context (released, never destroyed).
    pub(in crate::session) primary: bool,
    /// The context on the backend; `None` once a sticky fault tore it down (the guest
    /// holds its handle until it releases or destroys it).
    pub(in crate::session) live: Option<LiveCtx>,
    /// Its unreported failures of pipelined requests, and its sticky error.
    pub(in crate::session) deferred: DeferredErrors,
    /// Per stream, the first pipelined request not yet synchronised: the cause given to
    /// an asynchronous fault that a later synchronisation finds.
    pub(in crate::session) unsynced: Vec<(StreamId, Cause)>,
    /// Bytes of its asynchronous inline copies, held until their stream is synchronised.
    pub(in crate::session) staged: VecDeque<(StreamId, Vec<u8>)>,
    pub(in crate::session) staged_bytes: usize,
}

/// A context alive on the backend.
#[derive(Debug)]
pub(in crate::session) struct LiveCtx {
    pub(in crate::session) ctx: Context,
    /// Guest memory regions registered with the driver in it (start, length).
    pub(in crate::session) registered: Vec<(usize, usize)>,
}

impl Ctx {
    fn new(primary: bool, ctx: Context) -> Ctx {
        Ctx {
            primary,
            live: Some(LiveCtx {
                ctx,
                registered: Vec::new(),
            }),
            deferred: DeferredErrors::new(),
            unsynced: Vec::new(),
            staged: VecDeque::new(),
            staged_bytes: 0,
        }
    }

    /// Its sticky error, if a fault poisoned it.
    pub(in crate::session) fn sticky(&self) -> Option<&DeferredError> {
        self.deferred.sticky()
    }
}

impl Session {
    // ----- the commands -----

    /// `PrimaryCtxRetain`: the primary context (made at the first retain).
    pub(super) fn primary_ctx_retain(&mut self, device: u32) -> Done {
        self.dev(device)?;
        let h = match self.primary {
            Some(h) => h,
            None => {
                let h = self.open(true)?;
                self.primary = Some(h);
                h
            }
        };
        self.retains = self.retains.saturating_add(1);
        Ok(ReplyBody::Context(ContextId(h)))
    }

    /// `PrimaryCtxRelease`: at the last release the primary context goes with
    /// everything made in it (and its sticky error).
    pub(super) fn primary_ctx_release(&mut self, device: u32) -> Done {
        self.dev(device)?;
        if self.retains == 0 {
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                "the primary context is not retained",
            ));
        }
        self.retains -= 1;
        if self.retains == 0 {
            if let Some(p) = self.primary.take() {
                self.teardown(p);
                self.contexts.remove(p);
                if self.current == Some(p) {
                    self.current = None;
                }
            }
            self.loose.clear();
        }
        Ok(ReplyBody::Empty)
    }

    /// `CtxSetCurrent`: any context the guest holds (0: none).
    pub(super) fn ctx_set_current(&mut self, ctx: ContextId) -> Done {
        if ctx.0 == 0 {
            self.current = None;
            return Ok(ReplyBody::Empty);
        }
        let Some(c) = self.contexts.get(ctx.0) else {
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                format!("context {:#x} is not a live context of this session", ctx.0),
            ));
        };
        if c.live.is_some() {
            self.bind(ctx.0)?;
        }
        self.current = Some(ctx.0);
        Ok(ReplyBody::Empty)
    }

    /// `CtxCreate`: a context of its own, current afterwards.
    pub(super) fn ctx_create(&mut self, device: u32, flags: u32) -> Done {
        self.dev(device)?;
        // CU_CTX_FLAGS_MASK, and a scheduling policy of AUTO, SPIN, YIELD or
        // BLOCKING_SYNC (accepted; the backend has no use for them).
        if flags & !0xff != 0 || matches!(flags & 7, 3 | 5..=7) {
            return Err(invalid(format!("cuCtxCreate flags {flags:#x}")));
        }
        if self.created_contexts() >= MAX_CREATED_CONTEXTS {
            log::warn!(
                "guest {} (session {}): context quota hit ({MAX_CREATED_CONTEXTS} contexts made with cuCtxCreate)",
                self.guest,
                self.id
            );
            return Err(failed(
                Status::ERROR_OUT_OF_MEMORY,
                format!(
                    "guest {}: at most {MAX_CREATED_CONTEXTS} contexts of cuCtxCreate at once",
                    self.guest
                ),
            ));
        }
        self.object_quota("context")?;
        let h = self.open(false)?;
        self.current = Some(h);
        Ok(ReplyBody::Context(ContextId(h)))
    }

    /// `CtxDestroy`: waits for the context's work and frees everything made in it; its
    /// handles are dead afterwards, and no context is current if it was.
    pub(super) fn ctx_destroy(&mut self, ctx: ContextId) -> Done {
        let Some(c) = self.contexts.get(ctx.0) else {
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                format!("context {:#x} is not a live context of this session", ctx.0),
            ));
        };
        if c.primary {
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                "the primary context is released (cuDevicePrimaryCtxRelease), not destroyed",
            ));
        }
        self.teardown(ctx.0);
        self.contexts.remove(ctx.0);
        if self.current == Some(ctx.0) {
            self.current = None;
        }
        Ok(ReplyBody::Empty)
    }

    /// The wait of a context scope: all work of the current context.
    pub(super) fn wait_context(be: &dyn Backend) -> Result<(), DriverError> {
        be.context_synchronize()
    }

    // ----- the session's contexts -----

    /// Whether the session's contexts are simulator contexts.
    pub(super) fn on_simulator(&self) -> bool {
        matches!(self.inner.gpu, Gpu::SimPerSession(_))
    }

    /// Contexts alive on the backend.
    pub(super) fn live_contexts(&self) -> usize {
        self.contexts
            .iter()
            .filter(|(_, c)| c.live.is_some())
            .count()
    }

    /// Contexts the guest made with `CtxCreate` and holds.
    pub(super) fn created_contexts(&self) -> usize {
        self.contexts.iter().filter(|(_, c)| !c.primary).count()
    }

    /// The backend the session's contexts are made on: on the simulator its own
    /// instance (made now if it has none yet; its memory is the guest's quota), else
    /// the shared one.
    fn session_backend(&mut self) -> Result<Arc<dyn Backend>, Outcome> {
        if let Some(b) = &self.backend {
            return Ok(b.clone());
        }
        let be: Arc<dyn Backend> = match &self.inner.gpu {
            Gpu::SimPerSession(config) => {
                let mut config = config.clone();
                config.memory_limit = config.memory_limit.min(self.quota.device_memory);
                Arc::new(vmgpu_cuda_sim::SimBackend::with_cancel(
                    config,
                    self.gone.clone(),
                )?)
            }
            Gpu::Shared(be) => be.clone(),
        };
        self.backend = Some(be.clone());
        Ok(be)
    }

    /// A new context of the session: the simulator's primary context or one it
    /// creates; on the native driver always one of its own (`context_create`), never
    /// the process's primary context, which every session of the process would share.
    fn open(&mut self, primary: bool) -> Result<u64, Outcome> {
        let be = self.session_backend()?;
        let ctx = if !self.on_simulator() {
            be.context_create(self.device)?
        } else if primary {
            be.primary_context_retain(Device::new(0))?
        } else {
            be.context_create(Device::new(0))?
        };
        let h = self.contexts.insert(Ctx::new(primary, ctx));
        self.inner.stats.contexts.fetch_add(1, Ordering::Relaxed);
        Ok(h)
    }

    /// Makes context `h` current on the backend (on this thread).
    pub(super) fn bind(&self, h: u64) -> Result<(), Outcome> {
        let (Some(be), Some(live)) = (
            &self.backend,
            self.contexts.get(h).and_then(|c| c.live.as_ref()),
        ) else {
            return Err(failed(
                Status::ERROR_INVALID_CONTEXT,
                "the context is not alive",
            ));
        };
        be.context_set_current(&live.ctx)?;
        Ok(())
    }

    /// Tears context `h` down with everything made in it (its release or destruction,
    /// a sticky fault, the session's end); the guest's handle of it stays.
    pub(super) fn teardown(&mut self, h: u64) {
        let Some(c) = self.contexts.get_mut(h) else {
            return;
        };
        let Some(live) = c.live.take() else {
            return;
        };
        let primary = c.primary;
        c.unsynced.clear();
        let staged = std::mem::take(&mut c.staged);
        let staged_bytes = std::mem::take(&mut c.staged_bytes);
        // The handles are values; the context's destruction releases what they name.
        let mut bytes = 0u64;
        for (_, m) in self.modules.remove_context(h) {
            bytes += m.device_bytes;
            self.host_used -= m.host_bytes;
        }
        drop(self.functions.remove_context(h));
        drop(self.streams.remove_context(h));
        drop(self.events.remove_context(h));
        let allocs: Vec<(u64, u64)> = self
            .allocs
            .range((h, 0)..=(h, u64::MAX))
            .map(|(&k, &size)| (k.1, size))
            .collect();
        for (base, size) in allocs {
            self.allocs.remove(&(h, base));
            bytes += size;
        }
        self.mem_used -= bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        if let Some(be) = self.backend.clone() {
            let _ = be.context_set_current(&live.ctx);
            // Waits for work still queued (a sticky context answers at once).
            let _ = Self::wait_context(&*be);
            drop(staged);
            self.staged_bytes -= staged_bytes;
            for (start, _) in &live.registered {
                // SAFETY: the range was registered in this context by this session; the
                // context was just synchronised, so no copy uses it.
                let _ = unsafe { be.host_unregister(*start as *mut u8) };
            }
            if primary && self.on_simulator() {
                // SAFETY: every handle and address made in the context was dropped from
                // the session's tables above (they are never used again), and the
                // session allocates no host memory with the backend.
                if let Err(e) = unsafe { be.primary_context_reset(Device::new(0)) } {
                    log::warn!("guest {}: resetting its primary context: {e}", self.guest);
                }
                let _ = be.primary_context_release(live.ctx);
            } else {
                // SAFETY: every handle and address of the context was dropped from the
                // session's tables above; this thread stops using it as current (the
                // next context is made current explicitly, `Session::bind`).
                if let Err(e) = unsafe { be.context_destroy(live.ctx) } {
                    log::warn!("guest {}: destroying its context: {e}", self.guest);
                }
            }
        } else {
            self.staged_bytes -= staged_bytes;
        }
        self.inner.stats.contexts.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every context goes (goodbye, a protocol violation, the session's end), with the
    /// errors they kept.
    pub(super) fn close(&mut self) {
        let all: Vec<u64> = self.contexts.iter().map(|(h, _)| h).collect();
        for h in all {
            self.teardown(h);
        }
        drop(self.contexts.drain());
        self.primary = None;
        self.retains = 0;
        self.current = None;
        self.loose.clear();
    }
}
