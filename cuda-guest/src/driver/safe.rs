//! The safe API over any [`Backend`] (native driver or simulator), with resources that
//! free themselves:
//!
//! - [`Gpu`]: one device with its primary context retained; device queries
//!   ([`Gpu::properties`]), memory info, synchronisation, reset.
//! - [`DeviceBuffer<T>`] with typed views ([`DeviceSlice`], [`DeviceSliceMut`]),
//!   memset, and H2D/D2H/D2D copies; [`PinnedBuffer`]; [`RegisteredBuffer`].
//! - [`Module`] from PTX text or file (JIT log on failure) or CUDA C++ through NVRTC,
//!   [`Function`], launches with [`KernelArg`]s checked against the kernel's PTX
//!   parameters before the launch.
//! - [`GpuStream`], [`GpuEvent`], elapsed time, and [`GpuFuture`]s that complete when a
//!   stream reaches an operation, for async code (tokio or any other executor: a
//!   completion thread per stream waits, never the executor's workers).
//!
//! Every operation makes the device's context current on the calling thread first.
//!
//! ```
//! use cuda_guest::driver::safe::{Gpu, KernelArg};
//! use cuda_guest::driver::{Device, LaunchConfig, SimBackend, StreamFlags};
//! use cuda_guest::sim::SimConfig;
//! use std::sync::Arc;
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! let gpu = Gpu::new(Arc::new(SimBackend::new(SimConfig::default())?), Device::new(0))?;
//! let module = gpu.load_ptx(r#"
//! .version 7.0
//! .target sm_80
//! .address_size 64
//! .visible .entry twice(.param .u64 p, .param .u32 n)
//! {
//!     .reg .pred %p<2>; .reg .b32 %r<6>; .reg .b64 %rd<5>;
//!     ld.param.u64 %rd1, [p];
//!     ld.param.u32 %r1, [n];
//!     mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
//!     mad.lo.s32 %r5, %r2, %r3, %r4;
//!     setp.ge.u32 %p1, %r5, %r1;
//!     @%p1 bra DONE;
//!     cvta.to.global.u64 %rd2, %rd1;
//!     mul.wide.u32 %rd3, %r5, 4;
//!     add.s64 %rd4, %rd2, %rd3;
//!     ld.global.u32 %r2, [%rd4];
//!     shl.b32 %r2, %r2, 1;
//!     st.global.u32 [%rd4], %r2;
//! DONE:
//!     ret;
//! }"#)?;
//! let twice = module.function("twice")?;
//! let mut data = gpu.htod(&[1u32, 2, 3, 4, 5])?;
//! let stream = gpu.stream(StreamFlags::default())?;
//! // A wrong argument is refused before the launch, naming the parameter:
//! let err = twice.check_args(&[KernelArg::from(&data), KernelArg::from(5u64)]).unwrap_err();
//! assert!(err.to_string().contains("parameter `n`"));
//! // SAFETY: the kernel touches only its buffer argument.
//! unsafe { twice.launch(&stream, LaunchConfig::for_elements(5, 128), &cuda_guest::kernel_args![&mut data, 5u32])? };
//! stream.synchronize()?;
//! assert_eq!(data.to_vec()?, [2, 4, 6, 8, 10]);
//! # Ok(()) }
//! ```
//!
//! Asynchronous copies and launches as futures, here under tokio's single-threaded
//! runtime (the completion thread waits for the device, never the runtime):
//!
//! ```
//! use cuda_guest::accel::{Accelerator, Choice};
//! use cuda_guest::driver::StreamFlags;
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! let gpu = Accelerator::builder().backend(Choice::Sim).build()?.gpu(0)?;
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! rt.block_on(async {
//!     let stream = gpu.stream(StreamFlags { non_blocking: true })?;
//!     let mut a = gpu.alloc_zeroed::<u32>(1024)?;
//!     let mut b = gpu.alloc_zeroed::<u32>(1024)?;
//!     let host: Vec<u32> = (0..1024).collect();
//!     // The future owns `host` until the device has read it, then gives it back.
//!     let host = stream.upload(&mut a.as_mut_slice(), host)?.await?;
//!     stream.copy_dtod_future(&mut b.as_mut_slice(), &a.as_slice())?.await?;
//!     let back = stream.download(&b.as_slice(), vec![0u32; 1024])?.await?;
//!     assert_eq!(back, host);
//!     Ok(())
//! })
//! # }
//! ```

mod future;
mod memory;
mod module;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use future::GpuFuture;
pub use memory::{
    as_bytes, as_bytes_mut, DeviceBuffer, DeviceData, DeviceSlice, DeviceSliceMut, HostMemory,
    PinnedBuffer, RegisteredBuffer, ScalarKind,
};
pub use module::{check_args, ArgKind, Function, KernelArg, Module};

use super::{
    sys, Backend, BackendKind, Context, CudaError, Device, DeviceAttribute, DevicePciAddress,
    DriverError, Event, EventFlags, HostAllocFlags, HostRegisterFlags, MemInfo, Result, Stream,
    StreamFlags,
};

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn Backend>,
    device: Device,
    ctx: Context,
    /// Shared by every `Gpu` of this backend instance and device.
    shared: Arc<DeviceShared>,
}

/// What every [`Gpu`] of one backend instance and device shares: a reset concerns the
/// device's primary context, whichever `Gpu` made the objects.
#[derive(Debug, Default)]
struct DeviceShared {
    /// Bumped by every [`Gpu::reset`]; objects made before refuse to work.
    generation: AtomicU64,
    /// Pinned buffers alive (a reset would free their memory on the driver).
    pinned: AtomicUsize,
}

/// (backend instance, device ordinal) to what their `Gpu`s share.
type Registry = HashMap<(u32, u32), std::sync::Weak<DeviceShared>>;
static DEVICES: Mutex<Option<Registry>> = Mutex::new(None);

fn device_shared(instance: u32, device: Device) -> Arc<DeviceShared> {
    let mut reg = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let map = reg.get_or_insert_with(HashMap::new);
    let key = (instance, device.ordinal());
    if let Some(s) = map.get(&key).and_then(|w| w.upgrade()) {
        return s;
    }
    map.retain(|_, w| w.strong_count() > 0);
    let s = Arc::new(DeviceShared::default());
    map.insert(key, Arc::downgrade(&s));
    s
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = self.backend.primary_context_release(self.ctx) {
            log::warn!("releasing the primary context of {:?}: {e}", self.device);
        }
    }
}

/// One device of a backend with its primary context retained. Cheap to clone; buffers,
/// streams, events and modules keep it alive.
#[derive(Debug, Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

/// Everything [`Gpu::properties`] reports about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// Ordinal.
    pub ordinal: u32,
    /// Name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// UUID bytes.
    pub uuid: [u8; 16],
    /// PCI address (tie to sysfs through the `pcie` crate).
    pub pci_address: pcie::PciAddress,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Total device memory, bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Most threads in a block.
    pub max_threads_per_block: u32,
    /// Most threads per multiprocessor.
    pub max_threads_per_multiprocessor: u32,
    /// Largest block, x/y/z.
    pub max_block: [u32; 3],
    /// Largest grid, x/y/z.
    pub max_grid: [u32; 3],
    /// Shared memory per block without opting in, bytes.
    pub shared_memory_per_block: u32,
    /// Shared memory per block with opt-in, bytes.
    pub shared_memory_per_block_optin: u32,
    /// Shared memory per multiprocessor, bytes.
    pub shared_memory_per_multiprocessor: u32,
    /// Constant memory, bytes.
    pub constant_memory: u32,
    /// Registers per block.
    pub registers_per_block: u32,
    /// Warp size (32).
    pub warp_size: u32,
    /// SM clock, kHz.
    pub clock_khz: u32,
    /// Memory clock, kHz.
    pub memory_clock_khz: u32,
    /// Memory bus width, bits.
    pub memory_bus_width: u32,
    /// L2 cache, bytes.
    pub l2_cache_bytes: u32,
    /// ECC enabled.
    pub ecc: bool,
    /// Unified addressing.
    pub unified_addressing: bool,
    /// Integrated with the host's memory.
    pub integrated: bool,
    /// Kernels of several streams may run at once.
    pub concurrent_kernels: bool,
    /// Copy engines.
    pub async_engines: u32,
    /// `cuMemHostRegister` is supported.
    pub host_register: bool,
}

impl std::fmt::Display for DeviceProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} (sm_{}{}, {} SMs, {} MiB, {})",
            self.ordinal,
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.multiprocessors,
            self.total_memory >> 20,
            self.pci_address
        )
    }
}

/// The UUID as `nvidia-smi -L` prints it after `GPU-`.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

impl Gpu {
    /// Retains `device`'s primary context and makes it current on this thread.
    pub fn new(backend: Arc<dyn Backend>, device: Device) -> Result<Gpu> {
        let ctx = backend.primary_context_retain(device)?;
        let backend_id = backend.instance_id();
        let gpu = Gpu {
            inner: Arc::new(Inner {
                backend,
                device,
                ctx,
                shared: device_shared(backend_id, device),
            }),
        };
        gpu.bind()?;
        Ok(gpu)
    }

    /// Makes the context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.inner.backend.context_set_current(&self.inner.ctx)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Native driver or simulator.
    pub fn kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    pub(crate) fn generation(&self) -> u64 {
        self.inner.shared.generation.load(Ordering::Acquire)
    }

    /// Binds the context and checks that an object of `generation` is still valid.
    pub(crate) fn enter(&self, generation: u64) -> Result<()> {
        if generation != self.generation() {
            let mut e = CudaError::builtin(sys::CUDA_ERROR_CONTEXT_IS_DESTROYED, "vmgpu safe API");
            e.device = Some(self.inner.device.ordinal());
            e.detail = Some("the object was made before the context was reset".into());
            return Err(e.into());
        }
        self.bind()
    }

    fn pinned_dropped(&self) {
        self.inner.shared.pinned.fetch_sub(1, Ordering::AcqRel);
    }

    /// One attribute.
    pub fn attribute(&self, attr: DeviceAttribute) -> Result<i32> {
        self.inner.backend.device_attribute(self.inner.device, attr)
    }

    /// The device's name.
    pub fn name(&self) -> Result<String> {
        self.inner.backend.device_name(self.inner.device)
    }

    /// Every query at once.
    pub fn properties(&self) -> Result<DeviceProperties> {
        use DeviceAttribute as A;
        let b = &self.inner.backend;
        let dev = self.inner.device;
        let a = |x| -> Result<u32> { Ok(b.device_attribute(dev, x)?.max(0) as u32) };
        Ok(DeviceProperties {
            ordinal: dev.ordinal(),
            name: b.device_name(dev)?,
            uuid: b.device_uuid(dev)?,
            pci_address: b.device_pci_address(dev)?,
            compute_capability: b.compute_capability(dev)?,
            total_memory: b.device_total_mem(dev)?,
            multiprocessors: a(A::MultiprocessorCount)?,
            max_threads_per_block: a(A::MaxThreadsPerBlock)?,
            max_threads_per_multiprocessor: a(A::MaxThreadsPerMultiprocessor)?,
            max_block: [
                a(A::MaxBlockDimX)?,
                a(A::MaxBlockDimY)?,
                a(A::MaxBlockDimZ)?,
            ],
            max_grid: [a(A::MaxGridDimX)?, a(A::MaxGridDimY)?, a(A::MaxGridDimZ)?],
            shared_memory_per_block: a(A::MaxSharedMemoryPerBlock)?,
            shared_memory_per_block_optin: a(A::MaxSharedMemoryPerBlockOptin)?,
            shared_memory_per_multiprocessor: a(A::MaxSharedMemoryPerMultiprocessor)?,
            constant_memory: a(A::TotalConstantMemory)?,
            registers_per_block: a(A::MaxRegistersPerBlock)?,
            warp_size: a(A::WarpSize)?,
            clock_khz: a(A::ClockRate)?,
            memory_clock_khz: a(A::MemoryClockRate)?,
            memory_bus_width: a(A::GlobalMemoryBusWidth)?,
            l2_cache_bytes: a(A::L2CacheSize)?,
            ecc: a(A::EccEnabled)? != 0,
            unified_addressing: a(A::UnifiedAddressing)? != 0,
            integrated: a(A::Integrated)? != 0,
            concurrent_kernels: a(A::ConcurrentKernels)? != 0,
            async_engines: a(A::AsyncEngineCount)?,
            host_register: a(A::HostRegisterSupported)? != 0,
        })
    }

    /// Waits for all work of the context; returns its sticky or pending asynchronous
    /// error, if any.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.inner.backend.context_synchronize()
    }

    /// Free and total device memory.
    pub fn mem_info(&self) -> Result<MemInfo> {
        self.bind()?;
        self.inner.backend.mem_get_info()
    }

    /// Resets the primary context: waits for its work, frees every device buffer,
    /// module, stream and event made in it (the safe objects that remain, from any `Gpu`
    /// of this backend and device, refuse to work with `CUDA_ERROR_CONTEXT_IS_DESTROYED`
    /// and drop quietly). Refused while a [`PinnedBuffer`] of this backend and device
    /// lives.
    ///
    /// After a sticky error ([`crate::driver::error::is_sticky`], e.g.
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`) the backends differ: the simulator clears it and the
    /// device works again; the native driver cannot clear it (NVIDIA: the process must be
    /// terminated and relaunched), so this returns that error, with a detail saying to
    /// restart the process, and the objects made before stay refused.
    ///
    /// # Safety
    /// No raw handle taken from an object of this device (`GpuStream::raw`, ...) and no
    /// raw device address of its buffers is passed to the backend afterwards, and no
    /// other thread uses the device while the reset runs (it could allocate pinned
    /// memory between the check and the reset).
    pub unsafe fn reset(&self) -> Result<()> {
        let live = self.inner.shared.pinned.load(Ordering::Acquire);
        if live > 0 {
            return Err(DriverError::InvalidArgument {
                operation: "Gpu::reset",
                reason: format!(
                    "{live} pinned buffer(s) of this device are alive; the driver would \
                     free their memory"
                ),
            });
        }
        self.bind()?;
        self.inner.shared.generation.fetch_add(1, Ordering::AcqRel);
        // SAFETY: no pinned memory of the context is alive (counted above); every safe
        // object made before checks the generation bumped above and no longer reaches
        // the backend; raw handles are the caller's guarantee.
        unsafe { self.inner.backend.primary_context_reset(self.inner.device) }?;
        self.bind()
    }

    /// A device buffer of `len` values of `T`, zeroed.
    pub fn alloc_zeroed<T: DeviceData>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.bind()?;
        let bytes =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or(DriverError::InvalidArgument {
                    operation: "Gpu::alloc_zeroed",
                    reason: format!("{len} elements overflow the address space"),
                })?;
        let ptr = self.inner.backend.mem_alloc(bytes.max(1))?;
        let mut buf = DeviceBuffer {
            gpu: self.clone(),
            ptr,
            len,
            generation: self.generation(),
            _t: std::marker::PhantomData,
        };
        if len > 0 {
            buf.memset(0)?;
        }
        Ok(buf)
    }

    /// A device buffer holding a copy of `data`.
    pub fn htod<T: DeviceData>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        self.bind()?;
        let bytes = std::mem::size_of_val(data);
        let ptr = self.inner.backend.mem_alloc(bytes.max(1))?;
        let mut buf = DeviceBuffer {
            gpu: self.clone(),
            ptr,
            len: data.len(),
            generation: self.generation(),
            _t: std::marker::PhantomData,
        };
        if !data.is_empty() {
            buf.copy_from_host(data)?;
        }
        Ok(buf)
    }

    /// A new stream.
    pub fn stream(&self, flags: StreamFlags) -> Result<GpuStream> {
        self.bind()?;
        let stream = self.inner.backend.stream_create(flags)?;
        Ok(GpuStream {
            gpu: self.clone(),
            stream: Some(stream),
            generation: self.generation(),
            completer: Mutex::new(None),
        })
    }

    /// The legacy default stream (synchronises with every blocking stream).
    pub fn default_stream(&self) -> GpuStream {
        GpuStream {
            gpu: self.clone(),
            stream: None,
            generation: u64::MAX,
            completer: Mutex::new(None),
        }
    }

    /// A new event.
    pub fn event(&self, flags: EventFlags) -> Result<GpuEvent> {
        self.bind()?;
        let event = self.inner.backend.event_create(flags)?;
        Ok(GpuEvent {
            gpu: self.clone(),
            event: Some(event),
            generation: self.generation(),
        })
    }

    /// A zeroed, page-locked host buffer of `len` bytes.
    pub fn pinned(&self, len: usize, flags: HostAllocFlags) -> Result<PinnedBuffer> {
        self.bind()?;
        let mem = self.inner.backend.host_alloc(len.max(1), flags)?;
        // SAFETY: `mem` is `len.max(1)` writable bytes just allocated, used by nothing else.
        unsafe { std::ptr::write_bytes(mem.as_ptr(), 0, mem.len()) };
        self.inner.shared.pinned.fetch_add(1, Ordering::AcqRel);
        Ok(PinnedBuffer {
            gpu: self.clone(),
            mem: Some(mem),
            len,
        })
    }

    /// Registers `data` with the driver (`cuMemHostRegister`) so that copies from and
    /// to it run at pinned speed. An empty vector cannot be registered.
    pub fn register<T: DeviceData>(
        &self,
        data: Vec<T>,
        flags: HostRegisterFlags,
    ) -> Result<RegisteredBuffer<T>> {
        RegisteredBuffer::new(self, data, flags)
    }
}

/// A stream that destroys itself.
#[derive(Debug)]
pub struct GpuStream {
    gpu: Gpu,
    stream: Option<Stream>,
    /// `u64::MAX` for the default stream, valid in every generation.
    generation: u64,
    /// The queue of this stream's completion thread, started by its first future.
    completer: Mutex<Option<std::sync::mpsc::Sender<future::Job>>>,
}

impl GpuStream {
    /// The backend's handle.
    pub fn raw(&self) -> &Stream {
        self.stream.as_ref().unwrap_or(&Stream::DEFAULT)
    }
    /// Its device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }
    fn check(&self) -> Result<()> {
        if self.generation == u64::MAX {
            self.gpu.bind()
        } else {
            self.gpu.enter(self.generation)
        }
    }
    /// Waits for all its work; returns its (or the context's) first error.
    pub fn synchronize(&self) -> Result<()> {
        self.check()?;
        self.gpu.backend().stream_synchronize(self.raw())
    }
    /// Whether all its work is done.
    pub fn query(&self) -> Result<bool> {
        self.check()?;
        self.gpu.backend().stream_query(self.raw())
    }
    /// Makes later work wait for `event`'s last record.
    pub fn wait(&self, event: &GpuEvent) -> Result<()> {
        self.check()?;
        event.check()?;
        self.gpu
            .backend()
            .stream_wait_event(self.raw(), event.raw())
    }

    /// Copies `src` (exactly its length) into device memory, ordered on this stream.
    ///
    /// # Safety
    /// `src` is neither written nor freed until the stream has passed the copy.
    pub unsafe fn copy_htod_async<T: DeviceData>(
        &self,
        dst: &mut DeviceSliceMut<'_, T>,
        src: &[T],
    ) -> Result<()> {
        if dst.len() != src.len() {
            return Err(len_error(
                "GpuStream::copy_htod_async",
                dst.len(),
                src.len(),
            ));
        }
        self.check()?;
        // SAFETY: `dst` is device memory of a live buffer; the caller keeps `src` valid
        // and unwritten until the stream has passed the copy.
        unsafe {
            self.gpu.backend().memcpy_htod_async(
                dst.ptr(),
                src.as_ptr().cast(),
                dst.byte_len(),
                self.raw(),
            )
        }
    }

    /// Copies device `src` into `dst` (exactly its length), ordered on this stream.
    ///
    /// # Safety
    /// `dst` is neither read, written nor freed until the stream has passed the copy.
    pub unsafe fn copy_dtoh_async<T: DeviceData>(
        &self,
        dst: &mut [T],
        src: &DeviceSlice<'_, T>,
    ) -> Result<()> {
        if dst.len() != src.len() {
            return Err(len_error(
                "GpuStream::copy_dtoh_async",
                src.len(),
                dst.len(),
            ));
        }
        self.check()?;
        // SAFETY: `src` is device memory of a live buffer; the caller keeps `dst` valid
        // and unused until the stream has passed the copy.
        unsafe {
            self.gpu.backend().memcpy_dtoh_async(
                dst.as_mut_ptr().cast(),
                src.ptr(),
                src.byte_len(),
                self.raw(),
            )
        }
    }

    /// A future that completes when the stream has done all the work queued so far
    /// (with the first error of it).
    pub fn done(&self) -> Result<GpuFuture<()>> {
        self.future_with(())
    }

    /// Queues a copy of `src` (owned until the device is done with it) into `dst`, and
    /// returns a future that gives `src` back once the stream has passed the copy.
    pub fn upload<T: DeviceData, H: HostMemory>(
        &self,
        dst: &mut DeviceSliceMut<'_, T>,
        mut src: H,
    ) -> Result<GpuFuture<H>> {
        if src.host_len() != dst.byte_len() {
            return Err(len_error(
                "GpuStream::upload",
                dst.byte_len(),
                src.host_len(),
            ));
        }
        self.check()?;
        // The event first: once the copy is queued, `src` must not be dropped before the
        // stream has passed it.
        let event = self.completion_event()?;
        // SAFETY: `dst` is device memory of a live buffer; `src` is owned by the future
        // (and by the completion thread until the stream has passed the copy), and its
        // memory does not move with it (`HostMemory`).
        unsafe {
            self.gpu.backend().memcpy_htod_async(
                dst.ptr(),
                src.host_ptr(),
                src.host_len(),
                self.raw(),
            )
        }?;
        self.complete_with(event, src)
    }

    /// Queues a copy of device `src` into `dst` (owned until the device is done with
    /// it), and returns a future that gives `dst` back, filled, once the stream has
    /// passed the copy.
    pub fn download<T: DeviceData, H: HostMemory>(
        &self,
        src: &DeviceSlice<'_, T>,
        mut dst: H,
    ) -> Result<GpuFuture<H>> {
        if dst.host_len() != src.byte_len() {
            return Err(len_error(
                "GpuStream::download",
                src.byte_len(),
                dst.host_len(),
            ));
        }
        self.check()?;
        let event = self.completion_event()?;
        // SAFETY: `src` is device memory of a live buffer; `dst` is owned by the future
        // (and by the completion thread until the stream has passed the copy), its
        // memory does not move, and nothing else reaches it meanwhile (`HostMemory`).
        unsafe {
            self.gpu.backend().memcpy_dtoh_async(
                dst.host_ptr(),
                src.ptr(),
                src.byte_len(),
                self.raw(),
            )
        }?;
        self.complete_with(event, dst)
    }

    /// Queues a device-to-device copy and returns a future that completes when the
    /// stream has passed it.
    pub fn copy_dtod_future<T: DeviceData>(
        &self,
        dst: &mut DeviceSliceMut<'_, T>,
        src: &DeviceSlice<'_, T>,
    ) -> Result<GpuFuture<()>> {
        dst.copy_from_device_async(src, self)?;
        self.done()
    }

    fn future_with<V: Send + 'static>(&self, value: V) -> Result<GpuFuture<V>> {
        let event = self.completion_event()?;
        self.complete_with(event, value)
    }

    fn completion_event(&self) -> Result<GpuEvent> {
        self.gpu.event(EventFlags {
            disable_timing: true,
            blocking_sync: true,
        })
    }

    /// Records `event` after the work queued so far and hands `value` to a future that
    /// keeps it until the event is reached.
    fn complete_with<V: Send + 'static>(&self, event: GpuEvent, value: V) -> Result<GpuFuture<V>> {
        if let Err(e) = event.record(self) {
            // `value` may be in use by queued work: let the stream pass it first.
            let _ = self.synchronize();
            drop(value);
            return Err(e);
        }
        future::submit(&self.completer, event, value)
    }
}

fn len_error(operation: &'static str, device: usize, host: usize) -> DriverError {
    DriverError::InvalidArgument {
        operation,
        reason: format!("lengths differ: {device} on the device, {host} on the host"),
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            if self.gpu.enter(self.generation).is_ok() {
                if let Err(e) = self.gpu.backend().stream_destroy(s) {
                    log::debug!("destroying a stream: {e}");
                }
            }
        }
    }
}

/// An event that destroys itself.
#[derive(Debug)]
pub struct GpuEvent {
    gpu: Gpu,
    event: Option<Event>,
    generation: u64,
}

impl GpuEvent {
    /// The backend's handle.
    pub fn raw(&self) -> &Event {
        // `event` is Some until drop.
        self.event.as_ref().unwrap_or(&NO_EVENT)
    }
    fn check(&self) -> Result<()> {
        self.gpu.enter(self.generation)
    }
    /// Records it on `stream`.
    pub fn record(&self, stream: &GpuStream) -> Result<()> {
        self.check()?;
        stream.check()?;
        self.gpu.backend().event_record(self.raw(), stream.raw())
    }
    /// Waits for its last record.
    pub fn synchronize(&self) -> Result<()> {
        self.check()?;
        self.gpu.backend().event_synchronize(self.raw())
    }
    /// Whether its last record has been reached.
    pub fn query(&self) -> Result<bool> {
        self.check()?;
        self.gpu.backend().event_query(self.raw())
    }
    /// Milliseconds from `start`'s record to this one's (both completed).
    pub fn elapsed_since(&self, start: &GpuEvent) -> Result<f32> {
        self.check()?;
        start.check()?;
        self.gpu.backend().event_elapsed_ms(start.raw(), self.raw())
    }
}

/// Stands in for a destroyed event (never reached: events are taken only in drop).
const NO_EVENT: Event = Event::from_raw(u32::MAX, 0);

impl Drop for GpuEvent {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            if self.gpu.enter(self.generation).is_ok() {
                if let Err(e) = self.gpu.backend().event_destroy(e) {
                    log::debug!("destroying an event: {e}");
                }
            }
        }
    }
}
