//! The CUDA driver API as one Rust boundary: [`Backend`], an object-safe trait at the
//! level of the driver API, with its handle and value types, the `CUresult` table
//! ([`Status`]) and the one error type ([`DriverError`]). It knows no host or guest
//! specifics: the native driver (`vmgpu-cuda-native`), the PTX simulator
//! (`vmgpu-cuda-sim`) and a proxy to a vmgpu CUDA service (`vmgpu-cuda-proto`) implement
//! it; the guest's `libcuda.so.1`, the service and the VMM's accelerator use it.
//!
//! Handles ([`Context`], [`Module`], [`Function`], [`Stream`], [`Event`],
//! [`HostAlloc`]) are opaque values: a raw 64-bit handle tagged with the backend
//! instance that made it, so a handle of another backend is refused rather than handed
//! to a driver. [`Stream`], [`Event`] and [`HostAlloc`] are neither `Copy` nor `Clone`
//! and are destroyed by value, so safe code cannot use one after destroying it. Device
//! addresses are plain [`DevicePtr`] numbers; the operations that read or write through
//! one are `unsafe` (see [`Backend`]).

/// An enum of `cuda.h` numbered constants written once, as `Name = number` rows: the
/// enum, its number (`code`), the value of a number (`from_code`) and every named
/// value (`ALL`). With `raw`, a `Raw(i32)` variant carries any other number.
macro_rules! code_enum {
    ($(#[$doc:meta])* $name:ident, raw { $($(#[$vdoc:meta])* $variant:ident = $code:expr,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
            /// Any other value, by its number.
            Raw(i32),
        }

        impl $name {
            /// Every named value.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Its `cuda.h` number.
            pub const fn code(self) -> i32 {
                match self {
                    $($name::$variant => $code,)*
                    $name::Raw(n) => n,
                }
            }

            /// The named value of `code`, else [`Raw`](Self::Raw).
            pub const fn from_code(code: i32) -> Self {
                match code {
                    $($code => $name::$variant,)*
                    n => $name::Raw(n),
                }
            }
        }
    };
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $code:expr,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Its `cuda.h` number.
            pub const fn code(self) -> i32 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value of `code`, if it is one.
            pub const fn from_code(code: i32) -> Option<Self> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

pub mod error;
mod fault;
pub mod occupancy;
pub mod shim_log;
pub mod status;
pub mod sys;
pub mod texture;

pub use error::{CudaError, DriverError};
pub use fault::{FaultKind, Location, MemoryFault, NearestAlloc};
pub use status::Status;

/// Whether a handle of backend instance `owner` may be used by instance `id` (0: any
/// instance, e.g. [`Stream::DEFAULT`]); otherwise an error naming `op` and both instances.
pub fn check_owner(owner: u32, id: u32, op: &'static str) -> Result<()> {
    if owner == 0 || owner == id {
        Ok(())
    } else {
        // As CUDA answers a handle that is not one of the context's.
        let mut e = CudaError::builtin(sys::CUDA_ERROR_INVALID_HANDLE, op);
        e.detail = Some(format!(
            "the handle belongs to backend instance (or context) {owner}, not to this one ({id})"
        ));
        Err(e.into())
    }
}

/// Instance ids of every backend in the process.
static NEXT_INSTANCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// A fresh backend instance id (never 0) for [`Backend::instance_id`]; every backend of
/// this crate (native, simulator) draws its id here so that no two instances share one.
pub fn next_instance_id() -> u32 {
    loop {
        let id = NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if id != 0 && id != u32::MAX {
            return id;
        }
    }
}

/// Results of the driver boundary.
pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// A device, by ordinal (0 is the first the driver or simulator reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device(u32);

impl Device {
    /// The device with this ordinal.
    pub const fn new(ordinal: u32) -> Self {
        Device(ordinal)
    }
    /// Its ordinal.
    pub const fn ordinal(self) -> u32 {
        self.0
    }
}

/// A device address (`CUdeviceptr`). Only a number: the operations that go through one
/// are `unsafe` and say what they need of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null device address.
    pub const NULL: DevicePtr = DevicePtr(0);
    /// This address plus `bytes` (wrapping; the driver or simulator checks the result).
    pub const fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

impl std::fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident $(, $derive:ident)*) => {
        $(#[$doc])*
        #[derive(Debug, PartialEq, Eq, Hash $(, $derive)*)]
        pub struct $name {
            owner: u32,
            raw: u64,
        }

        impl $name {
            /// A handle of backend instance `owner` (see [`Backend::instance_id`]) whose
            /// backend-specific value is `raw`. For backends of this crate only.
            #[allow(dead_code)]
            pub const fn from_raw(owner: u32, raw: u64) -> Self {
                Self { owner, raw }
            }
            /// The backend-specific value (for logs and error messages).
            pub const fn raw(&self) -> u64 {
                self.raw
            }
            /// The backend instance that made it (0: any).
            pub const fn owner(&self) -> u32 {
                self.owner
            }
        }
    };
}

handle!(
    /// A context (the device's primary context), made current per thread with
    /// [`Backend::context_set_current`]. It stays valid as long as its backend.
    Context, Clone, Copy
);
handle!(
    /// A loaded module. Unloading it ([`Backend::module_unload`]) invalidates its
    /// functions.
    Module
);
handle!(
    /// A kernel of a loaded module.
    Function, Clone, Copy
);
handle!(
    /// A stream; [`Stream::DEFAULT`] is the legacy default stream of the current context.
    Stream
);
handle!(
    /// An event.
    Event
);

impl Stream {
    /// The legacy default stream (`0`), valid on every backend.
    pub const DEFAULT: Stream = Stream { owner: 0, raw: 0 };
}

/// Page-locked host memory from [`Backend::host_alloc`]. Free it with
/// [`Backend::host_free`]; the safe layer's `PinnedBuffer` does so itself.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct HostAlloc {
    owner: u32,
    addr: usize,
    len: usize,
}

impl HostAlloc {
    /// For backends of this crate: `len` bytes at `addr`, owned by backend `owner`.
    #[allow(dead_code)]
    pub const fn from_raw(owner: u32, addr: usize, len: usize) -> Self {
        Self { owner, addr, len }
    }
    /// Its start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
    /// Its length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }
    /// Whether it is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The backend instance that made it.
    pub const fn owner(&self) -> u32 {
        self.owner
    }
}

/// Which implementation a backend is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The NVIDIA driver (`libcuda.so.1`).
    Native,
    /// The PTX simulator.
    Simulator,
    /// A vmgpu CUDA service reached over its protocol (`vmgpu-cuda-proto`'s client).
    Remote,
}

impl BackendKind {
    /// Its short name, as `--backend` and `VMGPU_CUDA_BACKEND` spell it: `native`, `sim`,
    /// `remote`.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Native => "native",
            BackendKind::Simulator => "sim",
            BackendKind::Remote => "remote",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

code_enum! {
    /// Device attributes (`CU_DEVICE_ATTRIBUTE_*`): the ones this crate names, each with
    /// its `cuda.h` number, written once. [`DeviceAttribute::Raw`] reaches any other by
    /// number.
    DeviceAttribute, raw {
        /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
        MaxThreadsPerBlock = 1,
        /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X`.
        MaxBlockDimX = 2,
        /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y`.
        MaxBlockDimY = 3,
        /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z`.
        MaxBlockDimZ = 4,
        /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X`.
        MaxGridDimX = 5,
        /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y`.
        MaxGridDimY = 6,
        /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z`.
        MaxGridDimZ = 7,
        /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK`.
        MaxSharedMemoryPerBlock = 8,
        /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`.
        MaxSharedMemoryPerBlockOptin = 97,
        /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`.
        MaxSharedMemoryPerMultiprocessor = 81,
        /// `CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY`.
        TotalConstantMemory = 9,
        /// `CU_DEVICE_ATTRIBUTE_WARP_SIZE`.
        WarpSize = 10,
        /// `CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK`.
        MaxRegistersPerBlock = 12,
        /// `CU_DEVICE_ATTRIBUTE_CLOCK_RATE` (kHz).
        ClockRate = 13,
        /// `CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE` (kHz).
        MemoryClockRate = 36,
        /// `CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH` (Bits).
        GlobalMemoryBusWidth = 37,
        /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
        MultiprocessorCount = 16,
        /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`.
        MaxThreadsPerMultiprocessor = 39,
        /// `CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR`.
        MaxRegistersPerMultiprocessor = 82,
        /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR`.
        MaxBlocksPerMultiprocessor = 106,
        /// `CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK` (bytes).
        ReservedSharedMemoryPerBlock = 111,
        /// `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE` (Bytes).
        L2CacheSize = 38,
        /// `CU_DEVICE_ATTRIBUTE_ECC_ENABLED`.
        EccEnabled = 32,
        /// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
        UnifiedAddressing = 41,
        /// `CU_DEVICE_ATTRIBUTE_INTEGRATED`.
        Integrated = 18,
        /// `CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY`.
        CanMapHostMemory = 19,
        /// `CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS`.
        ConcurrentKernels = 31,
        /// `CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`.
        AsyncEngineCount = 40,
        /// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY`.
        ManagedMemory = 83,
        /// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: the host and the device may
        /// use managed memory at the same time.
        ConcurrentManagedAccess = 89,
        /// `CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED`.
        HostRegisterSupported = 99,
        /// `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH` (`cuLaunchCooperativeKernel`).
        CooperativeLaunch = 95,
        /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` (`cuMemAllocAsync`).
        MemoryPoolsSupported = 115,
        /// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
        PciDomainId = 50,
        /// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
        PciBusId = 33,
        /// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
        PciDeviceId = 34,
        /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
        ComputeCapabilityMajor = 75,
        /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
        ComputeCapabilityMinor = 76,
    }
}

code_enum! {
    /// Function attributes (`CUfunction_attribute`, `cuFuncGetAttribute`), each with its
    /// `cuda.h` number, written once.
    FunctionAttribute {
        /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: the most threads a block of this
        /// kernel may have.
        MaxThreadsPerBlock = 0,
        /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: static shared memory per block.
        SharedSizeBytes = 1,
        /// `CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`: user constant memory.
        ConstSizeBytes = 2,
        /// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`: local memory per thread.
        LocalSizeBytes = 3,
        /// `CU_FUNC_ATTRIBUTE_NUM_REGS`: registers per thread.
        NumRegs = 4,
        /// `CU_FUNC_ATTRIBUTE_PTX_VERSION`: the PTX ISA version, major * 10 + minor.
        PtxVersion = 5,
        /// `CU_FUNC_ATTRIBUTE_BINARY_VERSION`: the architecture of the code, major * 10 +
        /// minor.
        BinaryVersion = 6,
        /// `CU_FUNC_ATTRIBUTE_CACHE_MODE_CA`: compiled with `-Xptxas --dlcm=ca`.
        CacheModeCa = 7,
        /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: dynamic shared memory a
        /// launch may use (settable).
        MaxDynamicSharedSizeBytes = 8,
        /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`: percent of the unified
        /// L1/shared memory preferred as shared memory, -1 for the default (settable).
        PreferredSharedMemoryCarveout = 9,
        /// `CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET`.
        ClusterSizeMustBeSet = 10,
        /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`.
        RequiredClusterWidth = 11,
        /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT`.
        RequiredClusterHeight = 12,
        /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH`.
        RequiredClusterDepth = 13,
        /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
        NonPortableClusterSizeAllowed = 14,
        /// `CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`.
        ClusterSchedulingPolicyPreference = 15,
    }
}

/// Free and total device memory of the current context's device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// Free bytes.
    pub free: u64,
    /// Total bytes.
    pub total: u64,
}

/// Where one kernel parameter lies in the parameter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamLayout {
    /// Byte offset.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// How a grid is launched: plainly (`cuLaunchKernel`) or with every block at once
/// (`cuLaunchCooperativeKernel`, for cooperative groups' `grid.sync()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchKind {
    /// `cuLaunchKernel`.
    Plain,
    /// `cuLaunchCooperativeKernel`.
    Cooperative,
}

impl LaunchKind {
    /// `Cooperative` when `cooperative`, else `Plain`.
    pub const fn of(cooperative: bool) -> Self {
        if cooperative {
            Self::Cooperative
        } else {
            Self::Plain
        }
    }

    /// The driver entry point that makes this kind of launch, for messages.
    pub const fn entry_point(self) -> &'static str {
        match self {
            Self::Plain => "cuLaunchKernel",
            Self::Cooperative => "cuLaunchCooperativeKernel",
        }
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A 1D launch of `blocks` blocks of `threads` threads, no dynamic shared memory.
    pub const fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            shared_bytes: 0,
        }
    }

    /// The smallest 1D launch of `threads`-wide blocks covering `n` elements.
    pub fn for_elements(n: u32, threads: u32) -> Self {
        let threads = threads.max(1);
        Self::linear(n.div_ceil(threads).max(1), threads)
    }
}

/// `cuMemHostAlloc` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostAllocFlags {
    /// Pinned for every context, not only the current one (`PORTABLE`).
    pub portable: bool,
    /// Mapped into the device address space (`DEVICEMAP`).
    pub device_map: bool,
    /// Write-combined: fast for the device to read, slow for the host to read.
    pub write_combined: bool,
}

impl HostAllocFlags {
    /// The `CU_MEMHOSTALLOC_*` bits.
    pub fn bits(self) -> u32 {
        (if self.portable {
            sys::CU_MEMHOSTALLOC_PORTABLE
        } else {
            0
        }) | (if self.device_map {
            sys::CU_MEMHOSTALLOC_DEVICEMAP
        } else {
            0
        }) | (if self.write_combined {
            sys::CU_MEMHOSTALLOC_WRITECOMBINED
        } else {
            0
        })
    }
}

/// `cuMemHostRegister` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostRegisterFlags {
    /// Pinned for every context (`PORTABLE`).
    pub portable: bool,
    /// Mapped into the device address space (`DEVICEMAP`).
    pub device_map: bool,
    /// The device only reads it (`READ_ONLY`).
    pub read_only: bool,
}

impl HostRegisterFlags {
    /// The `CU_MEMHOSTREGISTER_*` bits.
    pub fn bits(self) -> u32 {
        (if self.portable {
            sys::CU_MEMHOSTREGISTER_PORTABLE
        } else {
            0
        }) | (if self.device_map {
            sys::CU_MEMHOSTREGISTER_DEVICEMAP
        } else {
            0
        }) | (if self.read_only {
            sys::CU_MEMHOSTREGISTER_READ_ONLY
        } else {
            0
        })
    }
}

/// Stream creation flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamFlags {
    /// Does not synchronise with the legacy default stream (`CU_STREAM_NON_BLOCKING`).
    pub non_blocking: bool,
}

/// Event creation flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventFlags {
    /// The host thread sleeps in [`Backend::event_synchronize`] instead of spinning.
    pub blocking_sync: bool,
    /// No timing (cheaper; [`Backend::event_elapsed_ms`] then fails).
    pub disable_timing: bool,
}

/// A host function enqueued on a stream ([`Backend::stream_host_func`]): called once,
/// with the outcome of the stream's work before it.
pub type HostFunc = Box<dyn FnOnce(std::result::Result<(), &DriverError>) + Send>;

/// The CUDA driver API as one object-safe trait: the native driver and the simulator
/// implement it, and the safe API and the tests run over either.
///
/// As in CUDA, every call except the device queries and context management works on the
/// context current on the calling thread ([`Backend::context_set_current`]); without
/// one it fails with `CUDA_ERROR_INVALID_CONTEXT`. Errors of asynchronous work surface
/// at the next synchronising call.
///
/// # Safety contract of the `unsafe` methods
/// A [`DevicePtr`] is a number; the driver checks what it can and returns an error for
/// what it cannot map, but with unified addressing a device address may also name host
/// memory (pinned, registered or managed), which the device then reads or writes. So the
/// `unsafe` methods require of the caller that every device range they name is either
/// device memory, or host memory that no Rust reference reads or writes while the
/// operation runs. Asynchronous methods additionally require that the host memory they
/// name stays valid (and, for a destination, unaliased) until the stream has passed the
/// operation.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Native driver or simulator.
    fn kind(&self) -> BackendKind;
    /// A number distinguishing this instance from every other backend in the process;
    /// handles carry it and are refused by any other instance.
    fn instance_id(&self) -> u32;
    /// The driver's CUDA version (`cuDriverGetVersion`, e.g. 13000 for 13.0).
    fn driver_version(&self) -> Result<i32>;

    // Devices.
    /// How many devices there are.
    fn device_count(&self) -> Result<u32>;
    /// The device's name, e.g. `NVIDIA H100 80GB HBM3`.
    fn device_name(&self, dev: Device) -> Result<String>;
    /// The device's UUID (16 bytes, as `nvidia-smi -L` shows them after `GPU-`).
    fn device_uuid(&self, dev: Device) -> Result<[u8; 16]>;
    /// The PCI address, `DDDD:BB:DD.F` (lowercase hex, as sysfs writes it).
    fn device_pci_bus_id(&self, dev: Device) -> Result<String>;
    /// One attribute.
    fn device_attribute(&self, dev: Device, attr: DeviceAttribute) -> Result<i32>;
    /// Total device memory in bytes.
    fn device_total_mem(&self, dev: Device) -> Result<u64>;
    /// Compute capability (major, minor).
    fn compute_capability(&self, dev: Device) -> Result<(u32, u32)> {
        let major = self.device_attribute(dev, DeviceAttribute::ComputeCapabilityMajor)?;
        let minor = self.device_attribute(dev, DeviceAttribute::ComputeCapabilityMinor)?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }

    // Contexts.
    /// Retains the device's primary context (reference counted, as in CUDA). The backend
    /// keeps its own reference until it is dropped, so the context outlives every handle.
    fn primary_context_retain(&self, dev: Device) -> Result<Context>;
    /// Gives back one reference from [`Backend::primary_context_retain`].
    fn primary_context_release(&self, ctx: Context) -> Result<()>;
    /// Resets the device's primary context (`cuDevicePrimaryCtxReset_v2`): waits for
    /// its work, then destroys every allocation, module, stream and event made in it.
    /// References on it and its [`Context`] handle stay valid.
    ///
    /// Sticky errors ([`error::is_sticky`]) differ per backend: the simulator clears them
    /// here; the native driver does not (the process must be restarted to use CUDA
    /// again), and the native backend returns the sticky error, with a detail saying so,
    /// instead of success.
    ///
    /// # Safety
    /// Nothing uses memory from [`Backend::host_alloc`] of this context afterwards (the
    /// driver frees it; the simulator keeps it), and no handle or device address made
    /// before the reset is used afterwards except to be dropped.
    unsafe fn primary_context_reset(&self, dev: Device) -> Result<()>;
    /// Creates a context of its own on `dev` (`cuCtxCreate_v3`), separate from the
    /// primary context: its own device address space, allocations, modules, streams and
    /// sticky error. It is current on the calling thread afterwards.
    fn context_create(&self, dev: Device) -> Result<Context> {
        let _ = dev;
        Err(CudaError::builtin(sys::CUDA_ERROR_NOT_SUPPORTED, "cuCtxCreate_v3").into())
    }
    /// Destroys a context from [`Backend::context_create`] with everything made in it.
    ///
    /// # Safety
    /// Nothing made in the context (device addresses, handles, registered or pinned host
    /// memory) is used afterwards, and no thread uses it as its current context.
    unsafe fn context_destroy(&self, ctx: Context) -> Result<()> {
        let _ = ctx;
        Err(CudaError::builtin(sys::CUDA_ERROR_NOT_SUPPORTED, "cuCtxDestroy_v2").into())
    }
    /// Makes `ctx` current on the calling thread.
    fn context_set_current(&self, ctx: &Context) -> Result<()>;
    /// Waits for all work of the current context; returns its sticky error, if any.
    fn context_synchronize(&self) -> Result<()>;
    /// Free and total memory of the current context's device.
    fn mem_get_info(&self) -> Result<MemInfo>;

    // Modules.
    /// Loads a module from PTX text (JIT compiled). A failure carries the JIT error log.
    fn module_load_ptx(&self, ptx: &str) -> Result<Module>;
    /// [`Backend::module_load_ptx`] under `name` (e.g. the file it was read from), which
    /// the backend's messages use where it has any: the simulator's JIT log and fault
    /// reports say `name:LINE` (with [`Backend::module_load_ptx`] it names the module
    /// `moduleN.ptx`). The native driver's JIT log names no file, so it ignores `name`.
    fn module_load_ptx_named(&self, name: &str, ptx: &str) -> Result<Module> {
        let _ = name;
        self.module_load_ptx(ptx)
    }
    /// Unloads a module.
    ///
    /// # Safety
    /// No [`Function`] of it is launched afterwards and no launch of one is pending.
    unsafe fn module_unload(&self, module: Module) -> Result<()>;
    /// A kernel (`.entry`) of a module by name (`CUDA_ERROR_NOT_FOUND` when it has none
    /// by that name).
    fn module_get_function(&self, module: &Module, name: &str) -> Result<Function>;
    /// A module-scope `.global` or `.const` variable by name: its device address and its
    /// size in bytes (`cuModuleGetGlobal_v2`; `CUDA_ERROR_NOT_FOUND` when it has none by
    /// that name).
    fn module_get_global(&self, module: &Module, name: &str) -> Result<(DevicePtr, usize)>;

    // Device memory.
    /// Allocates `bytes` of device memory (not initialised).
    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Frees device memory from [`Backend::mem_alloc`]. An address that is not the start
    /// of a live allocation is an error.
    fn mem_free(&self, ptr: DevicePtr) -> Result<()>;
    /// Sets `bytes` bytes at `dst` to `value`, ordered on the legacy default stream
    /// (`cuMemsetD8_v2`: for device memory it may return before the memset is done).
    /// Provided: [`Backend::memset_d8_async`] on [`Stream::DEFAULT`].
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize) -> Result<()> {
        // SAFETY: the caller's guarantees; the default stream is always valid.
        unsafe { self.memset_d8_async(dst, value, bytes, &Stream::DEFAULT) }
    }
    /// Sets `count` 32-bit words at `dst` (4-byte aligned) to `value`, as
    /// [`Backend::memset_d8`] does.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d32(&self, dst: DevicePtr, value: u32, count: usize) -> Result<()> {
        // SAFETY: the caller's guarantees; the default stream is always valid.
        unsafe { self.memset_d32_async(dst, value, count, &Stream::DEFAULT) }
    }
    /// Sets `count` 16-bit elements at `dst` (2-byte aligned) to `value`, as
    /// [`Backend::memset_d8`] does.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d16(&self, dst: DevicePtr, value: u16, count: usize) -> Result<()> {
        // SAFETY: the caller's guarantees; the default stream is always valid.
        unsafe { self.memset_d16_async(dst, value, count, &Stream::DEFAULT) }
    }
    /// [`Backend::memset_d16`], ordered on `stream`.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d16_async(
        &self,
        dst: DevicePtr,
        value: u16,
        count: usize,
        stream: &Stream,
    ) -> Result<()>;
    /// [`Backend::memset_d32`], ordered on `stream`.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d32_async(
        &self,
        dst: DevicePtr,
        value: u32,
        count: usize,
        stream: &Stream,
    ) -> Result<()>;
    /// [`Backend::memset_d8`], ordered on `stream`.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memset_d8_async(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()>;
    /// Copies `src` to device memory at `dst`, ordered on the legacy default stream;
    /// returns when done. Provided: [`Backend::memcpy_htod_async`] on
    /// [`Stream::DEFAULT`], then [`Backend::stream_synchronize`].
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` stays borrowed, readable and unwritten until the stream has
        // passed the copy, which it has when the synchronisation returns.
        unsafe { self.memcpy_htod_async(dst, src.as_ptr(), src.len(), &Stream::DEFAULT)? };
        self.stream_synchronize(&Stream::DEFAULT)
    }
    /// Copies `dst.len()` bytes of device memory at `src` into `dst`, ordered on the
    /// legacy default stream; returns when done. Provided as
    /// [`Backend::memcpy_htod`] is.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` stays borrowed mutably (nothing else reads or writes it) until
        // the stream has passed the copy, which it has when the synchronisation returns.
        unsafe { self.memcpy_dtoh_async(dst.as_mut_ptr(), src, dst.len(), &Stream::DEFAULT)? };
        self.stream_synchronize(&Stream::DEFAULT)
    }
    /// Copies `bytes` bytes from `src` to `dst` on the device, ordered on the legacy
    /// default stream (it may return before the copy is done, as `cuMemcpyDtoD_v2`).
    /// Provided: [`Backend::memcpy_dtod_async`] on [`Stream::DEFAULT`].
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize) -> Result<()> {
        // SAFETY: the caller's guarantees; the default stream is always valid.
        unsafe { self.memcpy_dtod_async(dst, src, bytes, &Stream::DEFAULT) }
    }
    /// Copies `bytes` bytes from host `src` to device `dst`, ordered on `stream`.
    /// Asynchronous with respect to the host only for pinned or registered `src`.
    ///
    /// # Safety
    /// `src..src+bytes` is readable host memory that stays valid and unwritten until the
    /// stream has passed the copy; and see the trait's contract.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()>;
    /// Copies `bytes` bytes from device `src` to host `dst`, ordered on `stream`.
    ///
    /// # Safety
    /// `dst..dst+bytes` is writable host memory that stays valid and is neither read nor
    /// written by anything else until the stream has passed the copy; and see the trait's
    /// contract.
    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()>;
    /// Copies `bytes` bytes from `src` to `dst` on the device, ordered on `stream`.
    ///
    /// # Safety
    /// See the trait's contract.
    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Stream,
    ) -> Result<()>;

    // Host memory.
    /// Allocates `bytes` of page-locked host memory (not initialised).
    fn host_alloc(&self, bytes: usize, flags: HostAllocFlags) -> Result<HostAlloc>;
    /// Frees memory from [`Backend::host_alloc`].
    ///
    /// # Safety
    /// No pending asynchronous operation uses it, and nothing uses it afterwards.
    unsafe fn host_free(&self, mem: HostAlloc) -> Result<()>;
    /// Page-locks (registers) existing host memory so that copies from and to it run at
    /// pinned speed.
    ///
    /// # Safety
    /// `ptr..ptr+bytes` is host memory of this process that stays mapped until
    /// [`Backend::host_unregister`].
    unsafe fn host_register(
        &self,
        ptr: *mut u8,
        bytes: usize,
        flags: HostRegisterFlags,
    ) -> Result<()>;
    /// Unregisters memory registered at `ptr`.
    ///
    /// # Safety
    /// No pending asynchronous operation uses the range.
    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()>;
    /// The device's address of page-locked host memory at `host` (from
    /// [`Backend::host_alloc`] or [`Backend::host_register`]): what kernels use to reach
    /// it (`cuMemHostGetDevicePointer`). Provided as not supported, for backends whose
    /// device cannot reach host memory.
    fn host_device_pointer(&self, host: *mut u8) -> Result<DevicePtr> {
        let _ = host;
        Err(CudaError::builtin(
            sys::CUDA_ERROR_NOT_SUPPORTED,
            "cuMemHostGetDevicePointer_v2",
        )
        .into())
    }
    /// Allocates `bytes` of managed memory (`cuMemAllocManaged`): one address that
    /// both the host and the device use. Provided as not supported.
    fn mem_alloc_managed(&self, bytes: usize) -> Result<DevicePtr> {
        let _ = bytes;
        Err(CudaError::builtin(sys::CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocManaged").into())
    }

    // Streams.
    /// Creates a stream in the current context.
    fn stream_create(&self, flags: StreamFlags) -> Result<Stream>;
    /// Waits until the stream has done all its work; returns the first error of it.
    fn stream_synchronize(&self, stream: &Stream) -> Result<()>;
    /// Whether the stream has done all its work (`Ok(false)`: still busy).
    fn stream_query(&self, stream: &Stream) -> Result<bool>;
    /// Makes later work on `stream` wait for `event`'s last record.
    fn stream_wait_event(&self, stream: &Stream, event: &Event) -> Result<()>;
    /// Destroys a stream (its pending work still completes).
    fn stream_destroy(&self, stream: Stream) -> Result<()>;
    /// Calls `f` on the host once the work enqueued on `stream` so far has finished, in
    /// stream order (`cuLaunchHostFunc`, `cuStreamAddCallback`), with that work's
    /// outcome. Provided as waiting for the stream in the caller and then calling `f`:
    /// the order a GPU gives holds (later work on the stream is enqueued after `f`
    /// returned), at the cost of the caller's time; it returns the work's error, as a
    /// synchronisation does. A backend with a queue of its own (the simulator) calls
    /// `f` from it instead and returns at once.
    fn stream_host_func(&self, stream: &Stream, f: HostFunc) -> Result<()> {
        let r = self.stream_synchronize(stream);
        f(r.as_ref().map(|_| ()));
        r
    }
    /// Whether [`Backend::stream_host_func`] runs the function in the caller (the
    /// provided one does): then `libcuda.so.1` holds a non-blocking stream's later work
    /// behind the function itself, so the caller goes on as with a GPU.
    fn host_funcs_block_caller(&self) -> bool {
        true
    }

    // Events.
    /// Creates an event in the current context.
    fn event_create(&self, flags: EventFlags) -> Result<Event>;
    /// Records the event on `stream`.
    fn event_record(&self, event: &Event, stream: &Stream) -> Result<()>;
    /// Waits for the event's last record.
    fn event_synchronize(&self, event: &Event) -> Result<()>;
    /// Whether the event's last record has been reached (`Ok(false)`: not yet).
    fn event_query(&self, event: &Event) -> Result<bool>;
    /// Milliseconds between two completed records.
    fn event_elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32>;
    /// Destroys an event.
    fn event_destroy(&self, event: Event) -> Result<()>;

    // Launch.
    /// The kernel's parameter layout (offset and size of each parameter in the
    /// parameter buffer, in order), when the backend knows it (the simulator reads it
    /// from the PTX); `Ok(None)` otherwise (the native driver does not tell).
    fn function_params(&self, function: &Function) -> Result<Option<Vec<ParamLayout>>> {
        let _ = function;
        Ok(None)
    }
    /// Host memory the backend holds for `module` in this process, in bytes, when it
    /// knows (the simulator: the decoded kernels); `None` otherwise (the native driver
    /// keeps its own). The guest service counts it against a guest's quota.
    fn module_host_bytes(&self, module: &Module) -> Option<u64> {
        let _ = module;
        None
    }
    /// One attribute of a kernel (`cuFuncGetAttribute`): every [`FunctionAttribute`] has
    /// an answer.
    fn function_attribute(&self, function: &Function, attribute: FunctionAttribute) -> Result<i32>;
    /// Sets a kernel attribute (`cuFuncSetAttribute`): the settable ones are
    /// [`FunctionAttribute::MaxDynamicSharedSizeBytes`] and
    /// [`FunctionAttribute::PreferredSharedMemoryCarveout`] (and, on devices with
    /// clusters, the cluster ones); others are `CUDA_ERROR_INVALID_VALUE`.
    fn function_set_attribute(
        &self,
        function: &Function,
        attribute: FunctionAttribute,
        value: i32,
    ) -> Result<()>;
    /// Lets launches of `function` use up to `bytes` of dynamic shared memory
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`). Without it a launch may use
    /// 48 KiB of shared memory in all (static and dynamic); with it, up to the device's
    /// [`DeviceAttribute::MaxSharedMemoryPerBlockOptin`] less the static part.
    fn function_set_max_dynamic_shared(&self, function: &Function, bytes: u32) -> Result<()> {
        let value = i32::try_from(bytes).map_err(|_| DriverError::InvalidArgument {
            operation: "cuFuncSetAttribute",
            reason: format!("{bytes} bytes does not fit a C int"),
        })?;
        self.function_set_attribute(
            function,
            FunctionAttribute::MaxDynamicSharedSizeBytes,
            value,
        )
    }
    /// Launches `function` on `stream`, as `kind` says. `args` holds each kernel
    /// parameter's bytes, in order (a `u64` device pointer as its 8 little-endian bytes,
    /// a `u32` as 4, ...). A cooperative launch runs every block of the grid at once, so
    /// blocks may wait for each other (cooperative groups' `grid.sync()`); the caller
    /// keeps such a grid within what the device holds at once (occupancy times
    /// multiprocessors), and a backend without them answers `CUDA_ERROR_NOT_SUPPORTED`.
    ///
    /// # Safety
    /// `args` matches the kernel's parameter list in number and sizes; the module of
    /// `function` stays loaded until the launch is done; every address the kernel reaches
    /// obeys the trait's contract.
    unsafe fn launch_kind(
        &self,
        kind: LaunchKind,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()>;
    /// `cuLaunchKernel`: [`Backend::launch_kind`] of [`LaunchKind::Plain`].
    ///
    /// # Safety
    /// As [`Backend::launch_kind`].
    unsafe fn launch(
        &self,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.launch_kind(LaunchKind::Plain, function, config, stream, args) }
    }
    /// `cuLaunchCooperativeKernel`: [`Backend::launch_kind`] of
    /// [`LaunchKind::Cooperative`].
    ///
    /// # Safety
    /// As [`Backend::launch_kind`].
    unsafe fn launch_cooperative(
        &self,
        function: &Function,
        config: &LaunchConfig,
        stream: &Stream,
        args: &[&[u8]],
    ) -> Result<()> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.launch_kind(LaunchKind::Cooperative, function, config, stream, args) }
    }
}
