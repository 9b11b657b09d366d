//! The protocol's commands, each declared once: its request fields in wire order, its
//! opcode (and its `*Async` twin's), what it needs (`session`: nothing; `device`: `Init`;
//! `context`: `Init` and a current context), whether it may be pipelined, the stream it
//! is ordered on, what its reply reports (`sync`), the body of its successful reply and
//! the `vmgpu_cuda_api::Backend` method that serves it. The grammar is at
//! [`commands!`](crate::declare); `docs/protocol.md` section 4 is the same table for
//! people, and the tests check that the two agree.
//!
//! Adding a command is one row here (plus a [`Wire`](crate::codec::Wire) impl if a field
//! has a new type, and a row of `bodies!` if its reply has a new shape), and a backend
//! method. A command that is one backend call (`=> method(field: Arg, ...) -> Ret as
//! "cuName"`) needs nothing else: the service serves it through [`serve`](crate::serve())
//! and [`RemoteBackend`](crate::client::RemoteBackend)'s stub is generated. A command
//! whose serving keeps state of its own (handles the session issues, quotas, caches in
//! the client) names only its method, and has a handler in the service's `session/` and
//! a stub in the client.

use super::codec::{Blob, Lent, MaxInline, MaxModule, MaxName, Str};
use super::request::{HostDest, HostSource, KernelParams, MemsetWidth};
use super::{ContextId, DevicePtr, EventId, FunctionId, FunctionInfo, ModuleId, StreamId};
use vmgpu_cuda_api::{Device, DeviceAttribute, Event, Function, FunctionAttribute, LaunchConfig};

bodies! {
    /// Nothing.
    Empty;
    /// Data: `len: u32`, bytes (at most `max_inline`; empty when a copy's data went to
    /// guest memory).
    Data(Vec<u8> as Blob<MaxInline>) data;
    /// An `i32`.
    Int(i32) value;
    /// A count, `u32`.
    Count(u32) count;
    /// A device, `u32`.
    Device(u32) device;
    /// A string: `len: u32`, UTF-8 (at most `max_name`).
    Text(String as Str<MaxName>) text;
    /// A UUID, 16 bytes.
    Uuid([u8; 16]) uuid;
    /// A size in bytes, `u64`.
    Size(u64) bytes;
    /// `major: u32`, `minor: u32`.
    ComputeCapability {
        /// Major.
        major: u32,
        /// Minor.
        minor: u32,
    };
    /// A context, `u64`.
    Context(ContextId) ctx;
    /// A module, `u64`.
    Module(ModuleId) module;
    /// A kernel and its parameter layout: `function: u64`, `param_count: u32`
    /// (`0xffffffff`: unknown), then `param_count` x (`offset: u32`, `size: u32`).
    Function(FunctionInfo) function;
    /// A device address, `u64`.
    DevicePtr(DevicePtr) dptr;
    /// `free: u64`, `total: u64`.
    MemInfo {
        /// Free bytes (of the session's quota).
        free: u64,
        /// Total bytes (the session's quota, at most the device's).
        total: u64,
    };
    /// A stream, `u64`.
    Stream(StreamId) stream;
    /// An event, `u64`.
    Event(EventId) event;
    /// Milliseconds, `f32` bits.
    ElapsedMs(f32) ms;
    /// A module variable: `dptr: u64`, `bytes: u64`.
    Global {
        /// Its device address.
        dptr: DevicePtr,
        /// Its size in bytes.
        bytes: u64,
    };
}

commands! {
    // ------------------------------------------------------------ session

    /// Echo `data` (at most `max_inline` bytes): benchmarks, liveness.
    Ping {
        /// Echoed back in the reply.
        data: Vec<u8> as Lent<MaxInline>,
    } = 0x0001 [session] -> Data;

    /// `cuInit(flags)`.
    Init {
        /// Must be 0 in CUDA.
        flags: u32,
    } = 0x0002 [session] -> Empty;

    /// `cuDriverGetVersion`.
    DriverGetVersion = 0x0003 [session] -> Int
        => driver_version() -> i32 as "cuDriverGetVersion";

    /// End the session: the server releases everything, answers, and closes. Also the
    /// opcode of the server's last notice (request id 0) before it closes a connection.
    Goodbye = 0x0004 [session] sync context -> Empty;

    // ------------------------------------------------------------ devices

    /// `cuDeviceGetCount`.
    DeviceGetCount = 0x0101 [device] -> Count => device_count;

    /// `cuDeviceGet(ordinal)`.
    DeviceGet {
        /// Device ordinal.
        ordinal: u32,
    } = 0x0102 [device] -> Device;

    /// `cuDeviceGetName`.
    DeviceGetName {
        /// Device.
        device: u32,
    } = 0x0103 [device] -> Text => device_name;

    /// `cuDeviceGetUuid`.
    DeviceGetUuid {
        /// Device.
        device: u32,
    } = 0x0104 [device] -> Uuid => device_uuid(device: Device) -> [u8; 16] as "cuDeviceGetUuid";

    /// `cuDeviceGetPCIBusId`.
    DeviceGetPciBusId {
        /// Device.
        device: u32,
    } = 0x0105 [device] -> Text => device_pci_bus_id;

    /// `cuDeviceGetAttribute`.
    DeviceGetAttribute {
        /// Device.
        device: u32,
        /// `CU_DEVICE_ATTRIBUTE_*` number.
        attribute: i32,
    } = 0x0106 [device] -> Int
        => device_attribute(device: Device, attribute: DeviceAttribute) -> i32
            as "cuDeviceGetAttribute";

    /// `cuDeviceTotalMem`.
    DeviceTotalMem {
        /// Device.
        device: u32,
    } = 0x0107 [device] -> Size => device_total_mem;

    /// `cuDeviceComputeCapability`.
    DeviceComputeCapability {
        /// Device.
        device: u32,
    } = 0x0108 [device] -> ComputeCapability
        => compute_capability(device: Device) -> (u32, u32) as "cuDeviceComputeCapability";

    // ------------------------------------------------------------ contexts

    /// `cuDevicePrimaryCtxRetain`.
    PrimaryCtxRetain {
        /// Device.
        device: u32,
    } = 0x0201 [device] -> Context => primary_context_retain;

    /// `cuDevicePrimaryCtxRelease`.
    PrimaryCtxRelease {
        /// Device.
        device: u32,
    } = 0x0202 [device] sync context -> Empty => primary_context_release;

    /// `cuCtxSetCurrent`: the context later requests of this connection use.
    CtxSetCurrent {
        /// Context (0: none).
        ctx: ContextId,
    } = 0x0203 [device] -> Empty => context_set_current;

    /// `cuCtxSynchronize`.
    CtxSynchronize = 0x0204 [context] sync context -> Empty => context_synchronize;

    /// `cuCtxCreate_v3` (since 1.1): a context of its own on `device`, separate from the
    /// primary one (its own memory, modules, streams, events and sticky error); it is
    /// the connection's current context afterwards.
    CtxCreate {
        /// Device.
        device: u32,
        /// `CU_CTX_*` flags.
        flags: u32,
    } = 0x0205 [device, v1_1] -> Context => context_create;

    /// `cuCtxDestroy_v2` (since 1.1): waits for the context's work, then frees everything
    /// made in it; its handles are dead afterwards. The primary context is released, not
    /// destroyed.
    CtxDestroy {
        /// Context (from `CtxCreate`).
        ctx: ContextId,
    } = 0x0206 [device, v1_1] -> Empty => context_destroy;

    // ------------------------------------------------------------ modules

    /// `cuModuleLoadData` with a PTX image (text; a trailing NUL is allowed).
    ModuleLoadData {
        /// The image, at most `max_module` bytes.
        image: Vec<u8> as Blob<MaxModule>,
    } = 0x0301 [context] -> Module => module_load_ptx;

    /// `cuModuleUnload`.
    ModuleUnload {
        /// Module.
        module: ModuleId,
    } = 0x0302 [context] sync context -> Empty => module_unload;

    /// `cuModuleGetFunction`.
    ModuleGetFunction {
        /// Module.
        module: ModuleId,
        /// Kernel name (`.entry` name, mangled if C++), at most `max_name` bytes.
        name: String as Str<MaxName>,
    } = 0x0303 [context] -> Function => module_get_function;

    /// `cuModuleGetGlobal_v2` (since 1.1): a module's `.global`/`.const` variable by name.
    ModuleGetGlobal {
        /// Module.
        module: ModuleId,
        /// Variable name, at most `max_name` bytes.
        name: String as Str<MaxName>,
    } = 0x0304 [context, v1_1] -> Global => module_get_global;

    /// `cuFuncGetAttribute` (since 1.1).
    FuncGetAttribute {
        /// Kernel.
        function: FunctionId,
        /// `CU_FUNC_ATTRIBUTE_*` number.
        attribute: i32,
    } = 0x0305 [context, v1_1] -> Int
        => function_attribute(function: &Function, attribute: FunctionAttribute) -> i32
            as "cuFuncGetAttribute";

    /// `cuFuncSetAttribute` (since 1.1).
    FuncSetAttribute {
        /// Kernel.
        function: FunctionId,
        /// `CU_FUNC_ATTRIBUTE_*` number.
        attribute: i32,
        /// The value.
        value: i32,
    } = 0x0306 [context, v1_1] -> Empty => function_set_attribute;

    // ------------------------------------------------------------ memory

    /// `cuMemAlloc`.
    MemAlloc {
        /// Bytes.
        bytes: u64,
    } = 0x0401 [context] -> DevicePtr => mem_alloc;

    /// `cuMemFree`.
    MemFree {
        /// Start of the allocation.
        ptr: DevicePtr,
    } = 0x0402 [context] sync context -> Empty => mem_free;

    /// `cuMemGetInfo` (of the session: its quota and what it uses).
    MemGetInfo = 0x0403 [context] -> MemInfo => mem_get_info;

    /// `cuMemsetD8/D16/D32[Async]`.
    Memset {
        /// Destination.
        dst: DevicePtr,
        /// Number of elements.
        count: u64,
        /// Element value (low bits used for 8 and 16-bit widths).
        value: u32,
        /// Element width.
        width: MemsetWidth;
        /// `cuMemsetD8/D16/D32Async`.
        async stream => MemsetAsync = 0x0411 [context, pipelined] -> Empty
            => memset_d8_async | memset_d16_async | memset_d32_async;
    } = 0x0410 [context] sync context -> Empty => memset_d8 | memset_d16 | memset_d32;

    // ------------------------------------------------------------ copies

    /// `cuMemcpyHtoD[Async]`.
    MemcpyHtoD {
        /// Destination.
        dst: DevicePtr,
        /// The bytes.
        src: HostSource;
        /// `cuMemcpyHtoDAsync`.
        async stream => MemcpyHtoDAsync = 0x0421 [context, pipelined] -> Empty
            => memcpy_htod_async;
    } = 0x0420 [context] sync context -> Empty => memcpy_htod;

    /// `cuMemcpyDtoH[Async]`.
    MemcpyDtoH {
        /// Source.
        src: DevicePtr,
        /// Bytes to copy (inline: at most `max_inline`; guest: the list's total).
        bytes: u64,
        /// Where they go.
        dst: HostDest [bytes];
        /// `cuMemcpyDtoHAsync`: its reply carries the data, so it is sent when the
        /// stream has reached the copy.
        async stream => MemcpyDtoHAsync = 0x0423 [context] sync stream(stream) -> Data
            => memcpy_dtoh_async;
    } = 0x0422 [context] sync context -> Data => memcpy_dtoh;

    /// `cuMemcpyDtoD[Async]`.
    MemcpyDtoD {
        /// Destination.
        dst: DevicePtr,
        /// Source.
        src: DevicePtr,
        /// Bytes.
        bytes: u64;
        /// `cuMemcpyDtoDAsync`.
        async stream => MemcpyDtoDAsync = 0x0425 [context, pipelined] -> Empty
            => memcpy_dtod_async;
    } = 0x0424 [context] sync context -> Empty => memcpy_dtod;

    // ------------------------------------------------------------ streams

    /// `cuStreamCreateWithPriority` (and `cuStreamCreate`).
    StreamCreate {
        /// `CU_STREAM_*` flags.
        flags: u32,
        /// Priority (0: default).
        priority: i32,
    } = 0x0501 [context] -> Stream => stream_create;

    /// `cuStreamDestroy`.
    StreamDestroy {
        /// Stream.
        stream: StreamId,
    } = 0x0502 [context] -> Empty => stream_destroy;

    /// `cuStreamSynchronize`.
    StreamSynchronize {
        /// Stream.
        stream: StreamId,
    } = 0x0503 [context] on stream sync stream(stream) -> Empty => stream_synchronize;

    /// `cuStreamQuery`: `SUCCESS` when done, `ERROR_NOT_READY` when not.
    StreamQuery {
        /// Stream.
        stream: StreamId,
    } = 0x0504 [context] on stream sync stream(stream) -> Empty => stream_query;

    /// `cuStreamWaitEvent`.
    StreamWaitEvent {
        /// Stream that waits.
        stream: StreamId,
        /// Event waited for.
        event: EventId,
        /// Flags (0).
        flags: u32,
    } = 0x0505 [context, pipelined] on stream -> Empty => stream_wait_event;

    // ------------------------------------------------------------ events

    /// `cuEventCreate`.
    EventCreate {
        /// `CU_EVENT_*` flags.
        flags: u32,
    } = 0x0601 [context] -> Event => event_create;

    /// `cuEventDestroy`.
    EventDestroy {
        /// Event.
        event: EventId,
    } = 0x0602 [context] -> Empty => event_destroy;

    /// `cuEventRecord`.
    EventRecord {
        /// Event.
        event: EventId,
        /// Stream.
        stream: StreamId,
    } = 0x0603 [context, pipelined] on stream -> Empty => event_record;

    /// `cuEventSynchronize`.
    EventSynchronize {
        /// Event.
        event: EventId,
    } = 0x0604 [context] sync event(event) -> Empty => event_synchronize;

    /// `cuEventQuery`: `SUCCESS` when reached, `ERROR_NOT_READY` when not.
    EventQuery {
        /// Event.
        event: EventId,
    } = 0x0605 [context] sync event(event) -> Empty => event_query;

    /// `cuEventElapsedTime`.
    EventElapsedTime {
        /// Start event.
        start: EventId,
        /// End event.
        end: EventId,
    } = 0x0606 [context] -> ElapsedMs
        => event_elapsed_ms(start: &Event, end: &Event) -> f32 as "cuEventElapsedTime";

    // ------------------------------------------------------------ launches

    /// `cuLaunchKernel`.
    LaunchKernel {
        /// Kernel.
        function: FunctionId,
        /// Stream.
        stream: StreamId,
        /// Grid (blocks in x, y, z), block (threads in x, y, z) and dynamic shared
        /// memory per block in bytes: 28 bytes, in that order.
        config: LaunchConfig,
        /// Parameters.
        params: KernelParams,
    } = 0x0701 [context, pipelined] on stream -> Empty => launch_kind;

    /// `cuLaunchCooperativeKernel` (since 1.2): as `LaunchKernel`, every block of the
    /// grid at once (the client keeps the grid within what the device holds).
    LaunchCooperativeKernel {
        /// Kernel.
        function: FunctionId,
        /// Stream.
        stream: StreamId,
        /// As `LaunchKernel`'s.
        config: LaunchConfig,
        /// Parameters.
        params: KernelParams,
    } = 0x0702 [context, pipelined, v1_2] on stream -> Empty => launch_kind;
}
