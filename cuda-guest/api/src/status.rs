//! `CUresult` values as they travel in replies, with their CUDA names and descriptions,
//! so the guest shim can answer `cuGetErrorName`/`cuGetErrorString` locally.

use std::fmt;

/// A `CUresult` (the numbers of `cuda.h`). Replies carry it as a little-endian `u32`, so
/// the shim hands it straight back to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Status(pub u32);

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident = $value:expr, $desc:expr;)*) => {
        impl Status {
            $($(#[$doc])* pub const $name: Status = Status($value);)*

            /// The CUDA name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`, for the values this crate
            /// knows.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(concat!("CUDA_", stringify!($name))),)*
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

            /// Every value this crate knows.
            pub const KNOWN: &'static [Status] = &[$(Status::$name),*];
        }
    };
}

statuses! {
    /// No error.
    SUCCESS = 0, "no error";
    /// An argument is not valid (also: a malformed frame's payload).
    ERROR_INVALID_VALUE = 1, "invalid argument";
    /// Out of device memory, or over the session's memory quota.
    ERROR_OUT_OF_MEMORY = 2, "out of memory";
    /// `cuInit` was not called.
    ERROR_NOT_INITIALIZED = 3, "initialization error";
    /// The driver is shutting down.
    ERROR_DEINITIALIZED = 4, "driver shutting down";
    /// The driver is a stub library.
    ERROR_STUB_LIBRARY = 34, "CUDA driver is a stub library";
    /// The device is busy or unavailable.
    ERROR_DEVICE_UNAVAILABLE = 46, "CUDA-capable device(s) is/are busy or unavailable";
    /// No device.
    ERROR_NO_DEVICE = 100, "no CUDA-capable device is detected";
    /// Bad device ordinal.
    ERROR_INVALID_DEVICE = 101, "invalid device ordinal";
    /// The module image is not valid.
    ERROR_INVALID_IMAGE = 200, "device kernel image is invalid";
    /// No context, or not a context of this session.
    ERROR_INVALID_CONTEXT = 201, "invalid device context";
    /// No kernel image for this GPU.
    ERROR_NO_BINARY_FOR_GPU = 209, "no kernel image is available for execution on the device";
    /// Uncorrectable ECC error (sticky).
    ERROR_ECC_UNCORRECTABLE = 214, "uncorrectable ECC error encountered";
    /// PTX JIT compilation failed; the reply's detail is the JIT log.
    ERROR_INVALID_PTX = 218, "a PTX JIT compilation failed";
    /// The PTX JIT compiler is missing.
    ERROR_JIT_COMPILER_NOT_FOUND = 221, "PTX JIT compiler library not found";
    /// The PTX is of a newer toolchain.
    ERROR_UNSUPPORTED_PTX_VERSION = 222, "the provided PTX was compiled with an unsupported toolchain.";
    /// The source is not valid.
    ERROR_INVALID_SOURCE = 300, "device kernel image is invalid";
    /// A file was not found.
    ERROR_FILE_NOT_FOUND = 301, "file not found";
    /// An OS call failed.
    ERROR_OPERATING_SYSTEM = 304, "OS call failed or operation not supported on this OS";
    /// A handle that is not a live object of this session.
    ERROR_INVALID_HANDLE = 400, "invalid resource handle";
    /// Not possible in the present state.
    ERROR_ILLEGAL_STATE = 401, "the operation cannot be performed in the present state";
    /// A named symbol (kernel) was not found.
    ERROR_NOT_FOUND = 500, "named symbol not found";
    /// Stream or event not done yet (from queries; not an error).
    ERROR_NOT_READY = 600, "device not ready";
    /// Illegal memory access (sticky).
    ERROR_ILLEGAL_ADDRESS = 700, "an illegal memory access was encountered";
    /// Launch needs more resources than the device has.
    ERROR_LAUNCH_OUT_OF_RESOURCES = 701, "too many resources requested for launch";
    /// Launch timed out (sticky).
    ERROR_LAUNCH_TIMEOUT = 702, "the launch timed out and was terminated";
    /// The context is destroyed.
    ERROR_CONTEXT_IS_DESTROYED = 709, "context is destroyed";
    /// Device-side assert (sticky).
    ERROR_ASSERT = 710, "device-side assert triggered";
    /// Host memory already registered.
    ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, "part or all of the requested memory range is already mapped";
    /// Host memory not registered.
    ERROR_HOST_MEMORY_NOT_REGISTERED = 713, "pointer does not correspond to a registered memory region";
    /// Hardware stack error (sticky).
    ERROR_HARDWARE_STACK_ERROR = 714, "hardware stack error";
    /// Illegal instruction (sticky).
    ERROR_ILLEGAL_INSTRUCTION = 715, "an illegal instruction was encountered";
    /// Misaligned address (sticky).
    ERROR_MISALIGNED_ADDRESS = 716, "misaligned address";
    /// Invalid address space (sticky).
    ERROR_INVALID_ADDRESS_SPACE = 717, "operation not supported on global/shared address space";
    /// Invalid program counter (sticky).
    ERROR_INVALID_PC = 718, "invalid program counter";
    /// Launch failed (sticky).
    ERROR_LAUNCH_FAILED = 719, "unspecified launch failure";
    /// Not permitted (e.g. a quota forbids it).
    ERROR_NOT_PERMITTED = 800, "operation not permitted";
    /// Not supported (an entry point or feature the service lacks).
    ERROR_NOT_SUPPORTED = 801, "operation not supported";
    /// Unknown error.
    ERROR_UNKNOWN = 999, "unknown error";
}

impl Status {
    /// Whether it is [`Status::SUCCESS`].
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// Whether, as in CUDA, the error leaves the context unusable: every later call of
    /// the session returns it until the service resets the session's context.
    pub const fn is_sticky(self) -> bool {
        matches!(self.0, 214 | 700 | 702 | 710 | 714..=719)
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
