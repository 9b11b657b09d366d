//! The CUDA service for guests: one session per guest connection, each with its own
//! contexts, handle tables, allocations, quota and deferred errors, served over a Unix
//! socket (also Firecracker's and Cloud Hypervisor's hybrid-vsock `CONNECT <port>`),
//! AF_VSOCK, or a VMM's own virtio device through the embedding API. The wire format is
//! [`vmgpu_cuda_proto`] (`docs/protocol.md`).
//!
//! # Contexts
//! A session holds its primary context (`PrimaryCtxRetain`/`PrimaryCtxRelease`, retain
//! counted) and the contexts it makes with `CtxCreate` (at most
//! [`MAX_CREATED_CONTEXTS`] at once), each with its own allocations, modules,
//! functions, streams, events, deferred errors and sticky error. Every object belongs to
//! the context current when it was made; naming it in another context is
//! `CUDA_ERROR_INVALID_HANDLE` (its memory, `CUDA_ERROR_INVALID_VALUE`). `CtxDestroy`
//! waits for the context's work and frees everything made in it; the primary context
//! is released, never destroyed. The quotas are over all the session's contexts.
//!
//! # Isolation
//! Every context of a session has a device address space of its own:
//! - on the **simulator** each session has a [`SimBackend`] of its own for its
//!   lifetime (made with its first context), whose memory limit is the guest's quota;
//!   its primary context and the created ones are contexts of that instance (each its
//!   own `Simulator`, memory and device thread); destroying one (or resetting the
//!   primary one) releases everything made in it, and the instance goes with the
//!   session.
//! - on the **native** driver every context of a session (its primary one too) is a
//!   context of its own made with [`Backend::context_create`] (`cuCtxCreate_v3`), not
//!   the process's primary context (which every session of the process would share);
//!   destroying it (`cuCtxDestroy_v2`) releases everything made in it.
//!
//! ## Processes: per backend, and why
//! On the native driver a context of its own is **not enough**: a sticky fault
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`, a launch timeout) poisons every context of the
//! *process*. Measured on an NVIDIA H100 (driver 580, CUDA 13.0): after guest A's kernel
//! wrote through address 0x10, guest B's next `cuMemAlloc_v2` in B's own context failed
//! with 700 too, and so did `cuDevicePrimaryCtxRetain`; NVIDIA's documentation says the
//! process must be terminated. So with the native backend each guest runs in a **worker
//! process** of its own ([`Isolation::Process`], [`worker`]): the service supervises
//! and relays frames (reading only their headers); a sticky fault or a crash ends only
//! that guest's worker (all of that guest's contexts), and the guest gets a fresh
//! worker once it released its primary context and destroyed the ones it created.
//! Operators choose process isolation for the native backend
//! (`vmgpu cuda serve` does). The simulator keeps [`Isolation::InProcess`] by default
//! (a simulator instance per guest shares nothing, and its faults are per instance),
//! and process isolation works with it too (how the tests exercise it without a GPU).
//!
//! Device addresses are **checked real addresses** of the session's own context: they
//! are not translated (kernel parameters carry them as plain bytes, which the server
//! cannot tell from integers), and every copy and memset range is checked against the
//! session's own allocation table, so an address of another guest, a freed one or a
//! made-up one is refused with `CUDA_ERROR_INVALID_VALUE` before the driver sees it.
//! Inside kernels the separate address space isolates: an address of another context is
//! not mapped in this one and faults (a sticky error of this session only).
//!
//! Handles (contexts, modules, functions, streams, events) are opaque, generation-tagged
//! values from per-session tables, salted with a per-session secret: a handle of another
//! guest, a freed one or a made-up one is `CUDA_ERROR_INVALID_HANDLE`
//! (`CUDA_ERROR_INVALID_CONTEXT` for contexts).
//!
//! # Quotas ([`Quota`])
//! Per guest, over all its contexts: device memory bytes (`cuMemAlloc` beyond it is
//! `CUDA_ERROR_OUT_OF_MEMORY`; `cuMemGetInfo` and `cuDeviceTotalMem` report the quota as
//! the total, `cuMemGetInfo`'s free is the quota less everything the guest holds), live
//! objects (allocations, modules, functions, streams, events and created contexts:
//! `CUDA_ERROR_OUT_OF_MEMORY`),
//! module image size (`CUDA_ERROR_OUT_OF_MEMORY`; also announced as `max_module`), and
//! a launch rate (a token bucket: a guest over its rate has its launches throttled,
//! its own worker waits, no other guest's). Each hit is logged with the guest's name.
//!
//! # Faults and teardown
//! A sticky fault (`Status::is_sticky`) tears down the context it happened in
//! (everything in it is released) and is answered to every later request in that
//! context, with the request that caused it, until the guest releases it (the primary
//! context, whose next retain gives a fresh one) or destroys it (a created context). On
//! the simulator the session's other contexts keep working; on a native backend the
//! fault poisons the process, so the session tears all its contexts down with it. On
//! `Goodbye`, disconnect, shutdown or a protocol violation every context of the
//! session is destroyed and all its memory released.
//!
//! With process isolation a sticky fault is reported to the guest by its worker as
//! above; the supervisor then forwards one request at a time to it (its session answers
//! the sticky rule) until the guest holds no context in it any more (its primary one
//! released to 0, the created ones destroyed: the supervisor follows retains, and the
//! context handles of `CtxCreate` replies and `CtxDestroy` requests); it then kills and
//! reaps that worker and starts a fresh one at the next request (new handle secrets:
//! old handles are `CUDA_ERROR_INVALID_HANDLE`). On the native driver all of that
//! guest's contexts are poisoned, on the simulator its other contexts keep working in
//! the same worker meanwhile. A worker that dies (crash, kill): its outstanding requests
//! are answered with `CUDA_ERROR_LAUNCH_FAILED` (sticky), requests needing a context get
//! it (with the first failed request as the cause) until the guest released and
//! destroyed every context it held (the supervisor answers those releases and
//! destructions), requests without one go to a fresh worker; the death is logged and
//! counted ([`ServiceStats::worker_failures`]), the process reaped. The driver frees
//! everything of an ended process, so device memory returns to its level.
//!
//! # Threads
//! Backend calls block. Each connection has its own worker thread that owns the
//! [`Session`] (and keeps its context current); tokio tasks only move bytes. The
//! embedding API runs on the caller's thread, in the caller's process
//! ([`EmbeddedSession`] is always in-process). With process isolation the connection's
//! thread relays guest frames to the worker process, and a second thread relays its
//! replies back.

mod conn;
mod embed;
mod handles;
mod hangup;
mod session;
#[cfg(feature = "transport")]
mod transport;
pub mod worker;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use embed::EmbeddedSession;
pub use session::{Session, MAX_CREATED_CONTEXTS};
#[cfg(feature = "transport")]
pub use transport::{
    serve_unix, serve_unix_until_signal, serve_vsock, BackgroundServer, ShutdownSignal,
};

use vmgpu_cuda_api::{Backend, Device, DriverError};
use vmgpu_cuda_proto::{Features, Limits};
use vmgpu_cuda_sim::SimBackend;
use vmgpu_cuda_sim::SimConfig;

/// What a guest may use. The defaults suit a test or a small guest.
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    /// Device memory in bytes (its allocations together).
    pub device_memory: u64,
    /// Live objects: allocations, modules, functions, streams and events together.
    pub max_objects: u32,
    /// Largest module image in bytes.
    pub max_module_bytes: u32,
    /// Host memory the service may hold for the guest's loaded modules, in bytes: their
    /// decoded kernels on the simulator ([`Backend::module_host_bytes`]), the image size
    /// on the native driver (which keeps its own copy, in the guest's worker process). A
    /// module over it is `CUDA_ERROR_OUT_OF_MEMORY`.
    pub module_host_memory: u64,
    /// Kernel launches per second (`None`: unlimited); beyond it launches wait (a token
    /// bucket; no error, so programs keep their results).
    pub launches_per_sec: Option<u32>,
    /// The bucket's size: launches a guest that was idle may make at once (`None`: one
    /// second's worth, the rate). The bucket starts with one token, so from a session's
    /// start `n` launches take at least `(n - 1) / rate` seconds, and in any `t` seconds
    /// a guest makes at most `burst + rate * t` launches.
    pub launch_burst: Option<u32>,
}

impl Quota {
    /// The launch bucket's size in effect (see [`Quota::launch_burst`]); 0 when
    /// launches are not limited.
    pub fn launch_bucket(&self) -> u32 {
        match self.launches_per_sec.filter(|r| *r > 0) {
            Some(rate) => self.launch_burst.unwrap_or(rate).max(1),
            None => 0,
        }
    }
}

impl Default for Quota {
    /// 1 GiB, 4096 objects, 16 MiB modules holding at most 256 MiB of host memory, no
    /// launch limit.
    fn default() -> Self {
        Quota {
            device_memory: 1 << 30,
            max_objects: 4096,
            max_module_bytes: 16 << 20,
            module_host_memory: 256 << 20,
            launches_per_sec: None,
            launch_burst: None,
        }
    }
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Every guest's quota.
    pub quota: Quota,
    /// The server's protocol limits (shrunk per session to what the client accepts;
    /// `max_module` and `max_objects` are further bounded by the quota).
    pub limits: Limits,
    /// The host device given to guests (their device 0).
    pub device: Device,
    /// Most sessions at once; more are refused with `CUDA_ERROR_OUT_OF_MEMORY`.
    pub max_sessions: usize,
    /// Time a connection has to send its hello (and `CONNECT` line).
    pub handshake_timeout: Duration,
    /// Where guests' sessions run: in this process or each in a worker process.
    pub isolation: Isolation,
    /// Module loads (PTX parsed and decoded) running at once in this process, over all
    /// guests: parsing takes up to about 35 times the image's size in host memory for
    /// its duration, so this bounds that peak; further loads wait their turn.
    pub concurrent_module_loads: usize,
}

/// Where each guest's session runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Isolation {
    /// On a thread of the service's process (contexts of its own, or a simulator
    /// instance, per guest). Right for the simulator; on the native driver a sticky
    /// fault of one guest poisons every context of the process (see [`worker`]).
    #[default]
    InProcess,
    /// Each guest in a worker process of its own, started as `program args...` with a
    /// socket to the service on its stdin, running [`worker::run_stdio`] on the
    /// backend its arguments name. A sticky fault or a crash ends only that guest's
    /// worker. The service's own [`BackendChoice`] then answers nothing guests see.
    Process {
        /// The worker executable (e.g. the VMM's own, with a hidden subcommand).
        program: std::path::PathBuf,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            quota: Quota::default(),
            limits: Limits::default(),
            device: Device::new(0),
            max_sessions: 64,
            handshake_timeout: Duration::from_secs(5),
            isolation: Isolation::InProcess,
            concurrent_module_loads: 2,
        }
    }
}

impl Isolation {
    /// Process isolation with this process's own executable and `args` (e.g. a hidden
    /// `cuda worker --backend native` subcommand of the VMM's binary that calls
    /// [`worker::run_stdio`]).
    pub fn this_executable(args: Vec<String>) -> Result<Isolation, ServiceError> {
        let program = std::env::current_exe().map_err(|source| ServiceError::Io {
            what: "finding this executable".into(),
            source,
        })?;
        Ok(Isolation::Process { program, args })
    }
}

/// The backend the service runs guests on.
#[derive(Debug, Clone)]
pub enum BackendChoice {
    /// The PTX simulator: one instance per guest session (its contexts are the
    /// instance's).
    Simulator(SimConfig),
    /// A shared backend (the native driver) on which every guest context is made with
    /// [`Backend::context_create`].
    Shared(Arc<dyn Backend>),
}

impl BackendChoice {
    /// `sim` (the simulator with its default settings), `native` (the NVIDIA driver;
    /// an error without one) or `auto` (native when a driver with a device loads,
    /// else the simulator).
    pub fn from_name(name: &str) -> Result<BackendChoice, ServiceError> {
        let native = || -> Result<BackendChoice, ServiceError> {
            let be = vmgpu_cuda_native::NativeBackend::new().map_err(|source| {
                ServiceError::Backend {
                    guest: "-".into(),
                    source,
                }
            })?;
            Ok(BackendChoice::Shared(Arc::new(be)))
        };
        match name {
            "sim" | "simulator" => Ok(BackendChoice::Simulator(SimConfig::default())),
            "native" => native(),
            "auto" => Ok(native().unwrap_or_else(|e| {
                log::info!("no native CUDA backend ({e}); serving guests on the simulator");
                BackendChoice::Simulator(SimConfig::default())
            })),
            other => Err(ServiceError::Config {
                reason: format!("unknown backend {other:?} (sim, native or auto)"),
            }),
        }
    }
}

/// Errors of the service, naming the guest where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The backend failed while setting up the service or a guest's session.
    #[error("guest {guest}: {source}")]
    Backend {
        /// The guest (`-` for the service itself).
        guest: String,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A transport failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the guest or the socket.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration cannot work.
    #[error("bad service configuration: {reason}")]
    Config {
        /// Why.
        reason: String,
    },
    /// A guest's session was refused (too many sessions, bad hello).
    #[error("guest {guest}: session refused: {reason}")]
    Refused {
        /// The guest.
        guest: String,
        /// Why.
        reason: String,
    },
}

#[derive(Debug)]
enum Gpu {
    SimPerSession(SimConfig),
    Shared(Arc<dyn Backend>),
}

/// Counters of the whole service, shared by its sessions.
#[derive(Debug, Default)]
struct Stats {
    sessions: AtomicUsize,
    contexts: AtomicUsize,
    device_bytes: AtomicU64,
    throttled: AtomicU64,
    workers: AtomicUsize,
    workers_started: AtomicU64,
    worker_failures: AtomicU64,
}

/// A snapshot of [`Service::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceStats {
    /// Sessions alive.
    pub sessions: usize,
    /// Guest contexts alive (simulator or native contexts; a context a sticky fault tore
    /// down is not counted, though its guest still holds the handle).
    pub contexts: usize,
    /// Device memory the guests hold, in bytes.
    pub device_bytes: u64,
    /// Launches that waited for the launch quota.
    pub throttled_launches: u64,
    /// Worker processes alive (process isolation).
    pub workers: usize,
    /// Worker processes started so far (process isolation).
    pub workers_started: u64,
    /// Worker processes that died without being asked to (crash, kill).
    pub worker_failures: u64,
}

#[derive(Debug)]
struct Inner {
    config: ServiceConfig,
    gpu: Gpu,
    /// Answers device queries (no context needed).
    devices: Arc<dyn Backend>,
    stats: Stats,
    next_session: AtomicU64,
    /// Worker processes alive: (guest, pid).
    worker_pids: std::sync::Mutex<Vec<(String, u32)>>,
    /// Module loads running now ([`ServiceConfig::concurrent_module_loads`]).
    loads: std::sync::Mutex<usize>,
    load_done: std::sync::Condvar,
}

/// A turn to load a module ([`ServiceConfig::concurrent_module_loads`]); the next
/// waiting load goes when it is dropped.
struct LoadTurn<'a>(&'a Inner);

impl Inner {
    fn load_turn(&self) -> LoadTurn<'_> {
        let most = self.config.concurrent_module_loads.max(1);
        let mut n = self.loads.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= most {
            n = self.load_done.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        LoadTurn(self)
    }
}

impl Drop for LoadTurn<'_> {
    fn drop(&mut self) {
        let mut n = self.0.loads.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        self.0.load_done.notify_one();
    }
}

/// The service: configuration, backend and the counters of its sessions. Cheap to
/// clone (shared).
#[derive(Debug, Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

/// A per-session secret for handle salting (random per process and session).
fn session_key(id: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(id);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl Service {
    /// A service on `backend` with `config`.
    pub fn new(backend: BackendChoice, config: ServiceConfig) -> Result<Service, ServiceError> {
        config.limits.validate().map_err(|e| ServiceError::Config {
            reason: e.to_string(),
        })?;
        if config.quota.max_module_bytes == 0 || config.quota.max_objects == 0 {
            return Err(ServiceError::Config {
                reason: "the quota allows no module or no object".into(),
            });
        }
        let backend_err = |source| ServiceError::Backend {
            guest: "-".into(),
            source,
        };
        let (gpu, devices): (Gpu, Arc<dyn Backend>) = match backend {
            BackendChoice::Simulator(sim) => {
                let probe = SimBackend::new(sim.clone()).map_err(backend_err)?;
                (Gpu::SimPerSession(sim), Arc::new(probe))
            }
            BackendChoice::Shared(be) => {
                let count = be.device_count().map_err(backend_err)?;
                if config.device.ordinal() >= count {
                    return Err(ServiceError::Config {
                        reason: format!(
                            "device {} asked for; the backend has {count}",
                            config.device.ordinal()
                        ),
                    });
                }
                (Gpu::Shared(be.clone()), be)
            }
        };
        Ok(Service {
            inner: Arc::new(Inner {
                config,
                gpu,
                devices,
                stats: Stats::default(),
                next_session: AtomicU64::new(1),
                worker_pids: std::sync::Mutex::new(Vec::new()),
                loads: std::sync::Mutex::new(0),
                load_done: std::sync::Condvar::new(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// The backend that answers device queries (the shared backend, or a simulator
    /// instance without guest memory).
    pub fn device_backend(&self) -> &Arc<dyn Backend> {
        &self.inner.devices
    }

    /// The service's counters now.
    pub fn stats(&self) -> ServiceStats {
        let s = &self.inner.stats;
        ServiceStats {
            sessions: s.sessions.load(Ordering::Relaxed),
            contexts: s.contexts.load(Ordering::Relaxed),
            device_bytes: s.device_bytes.load(Ordering::Relaxed),
            throttled_launches: s.throttled.load(Ordering::Relaxed),
            workers: s.workers.load(Ordering::Relaxed),
            workers_started: s.workers_started.load(Ordering::Relaxed),
            worker_failures: s.worker_failures.load(Ordering::Relaxed),
        }
    }

    /// The limits a session of this service announces (before they are shrunk to the
    /// client's `max_frame`): the configured limits, `max_module` and `max_objects` at
    /// most the quota's.
    pub fn session_limits(&self) -> Limits {
        let mut l = self.inner.config.limits;
        let q = &self.inner.config.quota;
        l.max_module = l.max_module.min(q.max_module_bytes);
        l.max_objects = l.max_objects.min(q.max_objects);
        l
    }

    /// A new session number, or a refusal when the service is full.
    fn admit(&self, guest: &str) -> Result<u64, ServiceError> {
        let live = self.inner.stats.sessions.load(Ordering::Relaxed);
        if live >= self.inner.config.max_sessions {
            log::warn!(
                "guest {guest}: refused, {live} sessions of at most {} alive",
                self.inner.config.max_sessions
            );
            return Err(ServiceError::Refused {
                guest: guest.into(),
                reason: format!(
                    "{live} sessions alive, at most {}",
                    self.inner.config.max_sessions
                ),
            });
        }
        Ok(self.inner.next_session.fetch_add(1, Ordering::Relaxed))
    }

    /// A bare session (for a transport of the caller's own that does the handshake
    /// itself): `limits` and `features` are what its `ServerHello` granted.
    pub fn open_session(
        &self,
        guest: &str,
        id: u64,
        limits: Limits,
        features: Features,
    ) -> Session {
        log::info!(
            "guest {guest} (session {id}): connected (quota: {} bytes, {} objects, {} byte modules, launches {})",
            self.inner.config.quota.device_memory,
            self.inner.config.quota.max_objects,
            self.inner.config.quota.max_module_bytes,
            self.inner
                .config
                .quota
                .launches_per_sec
                .map(|r| format!("{r}/s"))
                .unwrap_or_else(|| "unlimited".into())
        );
        Session::new(self.inner.clone(), guest, id, limits, features)
    }

    /// A session for a VMM's own virtio device, which reaches guest memory: see
    /// [`EmbeddedSession`].
    pub fn session(&self, guest: &str) -> Result<EmbeddedSession, ServiceError> {
        let id = self.admit(guest)?;
        Ok(EmbeddedSession::new(self.clone(), guest, id))
    }
}
