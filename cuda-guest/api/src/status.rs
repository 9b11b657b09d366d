//! The one `CUresult` table: each value's number, its `cuda.h` name, its description
//! (what `cuGetErrorString` says) and whether it is sticky, written once. [`Status`],
//! the `sys` constants ([`codes`]), [`crate::error::builtin_text`] and the stickiness
//! everyone asks ([`Status::is_sticky`], [`crate::error::is_sticky`]) are derived from it.

use std::fmt;

/// A `CUresult` (the numbers of `cuda.h`). Replies carry it as a little-endian `u32`, so
/// the shim hands it straight back to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Status(pub u32);

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident / $c_name:ident = $value:expr, $kind:ident, $desc:expr;)*) => {
        impl Status {
            $($(#[$doc])* pub const $name: Status = Status($value);)*

            /// The CUDA name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`, for the values this crate
            /// knows.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($c_name)),)*
                    _ => None,
                }
            }

            /// The driver's description, e.g. `an illegal memory access was encountered`.
            pub fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some($desc),)*
                    _ => None,
                }
            }

            /// Whether, as in CUDA, the error leaves the context unusable: every later
            /// call of the context (on the native driver, of the process) returns it.
            /// NVIDIA: "the process is left in an inconsistent state and any further CUDA
            /// work will return the same error. To continue using CUDA, the process must
            /// be terminated and relaunched." The simulator clears it at a context reset;
            /// the service tears the session's context down.
            pub const fn is_sticky(self) -> bool {
                match self.0 {
                    $($value => statuses!(@sticky $kind),)*
                    _ => false,
                }
            }

            /// Every value this crate knows.
            pub const KNOWN: &'static [Status] = &[$(Status::$name),*];
        }

        /// The same values as `cuda.h`'s `CUresult` constants (`CUDA_SUCCESS`,
        /// `CUDA_ERROR_...`), for the C ABI.
        pub mod codes {
            $(#[doc = concat!("`", stringify!($c_name), "`.")] pub const $c_name: crate::sys::CUresult = $value;)*
        }
    };
    (@sticky sticky) => { true };
    (@sticky plain) => { false };
}

statuses! {
    /// No error.
    SUCCESS / CUDA_SUCCESS = 0, plain, "no error";
    /// An argument is not valid (also: a malformed frame's payload).
    ERROR_INVALID_VALUE / CUDA_ERROR_INVALID_VALUE = 1, plain, "invalid argument";
    /// Out of device memory, or over the session's memory quota.
    ERROR_OUT_OF_MEMORY / CUDA_ERROR_OUT_OF_MEMORY = 2, plain, "out of memory";
    /// `cuInit` was not called.
    ERROR_NOT_INITIALIZED / CUDA_ERROR_NOT_INITIALIZED = 3, plain, "initialization error";
    /// The driver is shutting down.
    ERROR_DEINITIALIZED / CUDA_ERROR_DEINITIALIZED = 4, plain, "driver shutting down";
    /// The driver is a stub library.
    ERROR_STUB_LIBRARY / CUDA_ERROR_STUB_LIBRARY = 34, plain, "CUDA driver is a stub library";
    /// The driver is older than the runtime asks for.
    ERROR_INSUFFICIENT_DRIVER / CUDA_ERROR_INSUFFICIENT_DRIVER = 35, plain, "CUDA driver version is insufficient for CUDA runtime version";
    /// The device is busy or unavailable.
    ERROR_DEVICE_UNAVAILABLE / CUDA_ERROR_DEVICE_UNAVAILABLE = 46, plain, "CUDA-capable device(s) is/are busy or unavailable";
    /// No device.
    ERROR_NO_DEVICE / CUDA_ERROR_NO_DEVICE = 100, plain, "no CUDA-capable device is detected";
    /// Bad device ordinal.
    ERROR_INVALID_DEVICE / CUDA_ERROR_INVALID_DEVICE = 101, plain, "invalid device ordinal";
    /// The module image is not valid.
    ERROR_INVALID_IMAGE / CUDA_ERROR_INVALID_IMAGE = 200, plain, "device kernel image is invalid";
    /// No context, or not a context of this session.
    ERROR_INVALID_CONTEXT / CUDA_ERROR_INVALID_CONTEXT = 201, plain, "invalid device context";
    /// No kernel image for this GPU.
    ERROR_NO_BINARY_FOR_GPU / CUDA_ERROR_NO_BINARY_FOR_GPU = 209, plain, "no kernel image is available for execution on the device";
    /// Uncorrectable ECC error (sticky).
    ERROR_ECC_UNCORRECTABLE / CUDA_ERROR_ECC_UNCORRECTABLE = 214, sticky, "uncorrectable ECC error encountered";
    /// A `CUlimit` the device does not have.
    ERROR_UNSUPPORTED_LIMIT / CUDA_ERROR_UNSUPPORTED_LIMIT = 215, plain, "limit is not supported on this architecture";
    /// The two devices cannot reach each other's memory.
    ERROR_PEER_ACCESS_UNSUPPORTED / CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, plain, "peer access is not supported between these two devices";
    /// PTX JIT compilation failed; the reply's detail is the JIT log.
    ERROR_INVALID_PTX / CUDA_ERROR_INVALID_PTX = 218, plain, "a PTX JIT compilation failed";
    /// The PTX JIT compiler is missing.
    ERROR_JIT_COMPILER_NOT_FOUND / CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221, plain, "PTX JIT compiler library not found";
    /// The PTX is of a newer toolchain.
    ERROR_UNSUPPORTED_PTX_VERSION / CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222, plain, "the provided PTX was compiled with an unsupported toolchain.";
    /// The source is not valid.
    ERROR_INVALID_SOURCE / CUDA_ERROR_INVALID_SOURCE = 300, plain, "device kernel image is invalid";
    /// A file was not found.
    ERROR_FILE_NOT_FOUND / CUDA_ERROR_FILE_NOT_FOUND = 301, plain, "file not found";
    /// An OS call failed.
    ERROR_OPERATING_SYSTEM / CUDA_ERROR_OPERATING_SYSTEM = 304, plain, "OS call failed or operation not supported on this OS";
    /// A handle that is not a live object of this session.
    ERROR_INVALID_HANDLE / CUDA_ERROR_INVALID_HANDLE = 400, plain, "invalid resource handle";
    /// Not possible in the present state.
    ERROR_ILLEGAL_STATE / CUDA_ERROR_ILLEGAL_STATE = 401, plain, "the operation cannot be performed in the present state";
    /// A named symbol (kernel) was not found.
    ERROR_NOT_FOUND / CUDA_ERROR_NOT_FOUND = 500, plain, "named symbol not found";
    /// Stream or event not done yet (from queries; not an error).
    ERROR_NOT_READY / CUDA_ERROR_NOT_READY = 600, plain, "device not ready";
    /// Illegal memory access (sticky).
    ERROR_ILLEGAL_ADDRESS / CUDA_ERROR_ILLEGAL_ADDRESS = 700, sticky, "an illegal memory access was encountered";
    /// Launch needs more resources than the device has.
    ERROR_LAUNCH_OUT_OF_RESOURCES / CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, plain, "too many resources requested for launch";
    /// Launch timed out (sticky).
    ERROR_LAUNCH_TIMEOUT / CUDA_ERROR_LAUNCH_TIMEOUT = 702, sticky, "the launch timed out and was terminated";
    /// The context is destroyed.
    ERROR_CONTEXT_IS_DESTROYED / CUDA_ERROR_CONTEXT_IS_DESTROYED = 709, plain, "context is destroyed";
    /// Device-side assert (sticky).
    ERROR_ASSERT / CUDA_ERROR_ASSERT = 710, sticky, "device-side assert triggered";
    /// Host memory already registered.
    ERROR_HOST_MEMORY_ALREADY_REGISTERED / CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, plain, "part or all of the requested memory range is already mapped";
    /// Host memory not registered.
    ERROR_HOST_MEMORY_NOT_REGISTERED / CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713, plain, "pointer does not correspond to a registered memory region";
    /// Hardware stack error (sticky).
    ERROR_HARDWARE_STACK_ERROR / CUDA_ERROR_HARDWARE_STACK_ERROR = 714, sticky, "hardware stack error";
    /// Illegal instruction (sticky).
    ERROR_ILLEGAL_INSTRUCTION / CUDA_ERROR_ILLEGAL_INSTRUCTION = 715, sticky, "an illegal instruction was encountered";
    /// Misaligned address (sticky).
    ERROR_MISALIGNED_ADDRESS / CUDA_ERROR_MISALIGNED_ADDRESS = 716, sticky, "misaligned address";
    /// Peer access is not enabled for the context.
    ERROR_PEER_ACCESS_NOT_ENABLED / CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705, plain, "peer access has not been enabled";
    /// Invalid address space (sticky).
    ERROR_INVALID_ADDRESS_SPACE / CUDA_ERROR_INVALID_ADDRESS_SPACE = 717, sticky, "operation not supported on global/shared address space";
    /// Invalid program counter (sticky).
    ERROR_INVALID_PC / CUDA_ERROR_INVALID_PC = 718, sticky, "invalid program counter";
    /// Launch failed (sticky).
    ERROR_LAUNCH_FAILED / CUDA_ERROR_LAUNCH_FAILED = 719, sticky, "unspecified launch failure";
    /// A cooperative launch's grid is larger than the device holds at once.
    ERROR_COOPERATIVE_LAUNCH_TOO_LARGE / CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720, plain, "too many blocks in cooperative launch";
    /// Not permitted (e.g. a quota forbids it).
    ERROR_NOT_PERMITTED / CUDA_ERROR_NOT_PERMITTED = 800, plain, "operation not permitted";
    /// Not supported (an entry point or feature the service lacks).
    ERROR_NOT_SUPPORTED / CUDA_ERROR_NOT_SUPPORTED = 801, plain, "operation not supported";
    /// The system is not ready.
    ERROR_SYSTEM_NOT_READY / CUDA_ERROR_SYSTEM_NOT_READY = 802, plain, "system not yet initialized";
    /// The driver library and the kernel module do not match.
    ERROR_SYSTEM_DRIVER_MISMATCH / CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803, plain, "system has unsupported display driver / cuda driver combination";
    /// Not permitted while the stream captures.
    ERROR_STREAM_CAPTURE_UNSUPPORTED / CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, plain, "operation not permitted when stream is capturing";
    /// The capture was invalidated by an earlier error.
    ERROR_STREAM_CAPTURE_INVALIDATED / CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, plain, "operation failed due to a previous error during capture";
    /// Two separate captures would merge.
    ERROR_STREAM_CAPTURE_MERGE / CUDA_ERROR_STREAM_CAPTURE_MERGE = 902, plain, "operation would result in a merge of separate capture sequences";
    /// The capture was not begun in this stream.
    ERROR_STREAM_CAPTURE_UNMATCHED / CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903, plain, "capture was not ended in the same stream as it began";
    /// A stream joined to the capture has work not joined back.
    ERROR_STREAM_CAPTURE_UNJOINED / CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904, plain, "capturing stream has unjoined work";
    /// A dependency on work outside the capture.
    ERROR_STREAM_CAPTURE_ISOLATION / CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905, plain, "dependency created on uncaptured work in another stream";
    /// The legacy stream would depend on a capturing stream.
    ERROR_STREAM_CAPTURE_IMPLICIT / CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906, plain, "operation would make the legacy stream depend on a capturing blocking stream";
    /// The event was last recorded in a capturing stream.
    ERROR_CAPTURED_EVENT / CUDA_ERROR_CAPTURED_EVENT = 907, plain, "operation not permitted on an event last recorded in a capturing stream";
    /// A thread-local capture ended from another thread.
    ERROR_STREAM_CAPTURE_WRONG_THREAD / CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908, plain, "attempt to terminate a thread-local capture sequence from another thread";
    /// The executable graph was not updated: the graph differs in more than parameters.
    ERROR_GRAPH_EXEC_UPDATE_FAILURE / CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910, plain, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    /// Unknown error.
    ERROR_UNKNOWN / CUDA_ERROR_UNKNOWN = 999, plain, "unknown error";
}

impl Status {
    /// Whether it is [`Status::SUCCESS`].
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), self.description()) {
            (Some(n), Some(d)) => write!(f, "{n} ({}): {d}", self.0),
            _ => write!(f, "CUresult {}", self.0),
        }
    }
}

impl From<u32> for Status {
    fn from(v: u32) -> Self {
        Status(v)
    }
}
