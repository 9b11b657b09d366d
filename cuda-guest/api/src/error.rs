//! Errors of the driver boundary: a library or entry point that is missing, a device
//! that is not there, and every failing CUDA call with its name, description, what was
//! being done, on which device and stream, and a hint for the common ones.

use std::fmt;

use super::sys;
use crate::Status;

/// [`DriverError::LibraryNotFound`]`::library` of the CUDA driver (`libcuda.so.1`).
pub const LIBRARY_CUDA: &str = "CUDA driver";
/// [`DriverError::LibraryNotFound`]`::library` of NVRTC (`libnvrtc.so`).
pub const LIBRARY_NVRTC: &str = "NVRTC";

/// Everything that can go wrong at the driver boundary. Never a panic: a VMM must keep
/// running when its host lacks a driver or a GPU.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// A library loaded at run time (the CUDA driver, NVRTC) could not be opened.
    #[error("cannot load the {library} library `{path}`: {reason} (hint: {hint})")]
    LibraryNotFound {
        /// Which library: [`LIBRARY_CUDA`] or [`LIBRARY_NVRTC`].
        library: &'static str,
        /// The path or name that was opened.
        path: String,
        /// What the dynamic loader said.
        reason: String,
        /// What to do about it (which package ships it, which variable points at it).
        hint: &'static str,
    },
    /// A library loaded at run time lacks an entry point that is needed.
    #[error("the {library} library `{path}` does not provide `{symbol}`: {reason}")]
    SymbolMissing {
        /// Which library: [`LIBRARY_CUDA`] or [`LIBRARY_NVRTC`].
        library: &'static str,
        /// The library's path or name.
        path: String,
        /// The entry point.
        symbol: String,
        /// How it was looked up and what came back.
        reason: String,
    },
    /// The driver works but reports no device.
    #[error(
        "the CUDA driver (version {driver_version}) reports no device (hint: check \
         `nvidia-smi`, CUDA_VISIBLE_DEVICES and that the GPU is bound to the nvidia driver, \
         not vfio-pci)"
    )]
    NoDevice {
        /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0; 0 if unknown.
        driver_version: i32,
    },
    /// A CUDA call failed.
    #[error(transparent)]
    Cuda(Box<CudaError>),
    /// An NVRTC call failed; a failed compilation carries the compiler's log.
    #[error("{operation} failed: {name} ({code}){}", log.as_deref().filter(|l| !l.trim().is_empty()).map(|l| format!("\nNVRTC log:\n{}", l.trim_end())).unwrap_or_default())]
    Nvrtc {
        /// The NVRTC call.
        operation: &'static str,
        /// The `nvrtcResult`.
        code: i32,
        /// Its name from `nvrtcGetErrorString`, e.g. `NVRTC_ERROR_COMPILATION`.
        name: String,
        /// The compilation log.
        log: Option<String>,
    },
    /// The driver answered with something this crate cannot use (e.g. a PCI address it
    /// cannot parse).
    #[error("{operation} returned something unexpected: {reason}")]
    Unexpected {
        /// What was being done.
        operation: &'static str,
        /// What came back.
        reason: String,
    },
    /// A launch argument does not match the kernel's parameter list (read from its PTX),
    /// refused before the launch.
    #[error("kernel `{kernel}`: argument {index} (parameter `{param}`): {reason}")]
    BadKernelArgument {
        /// The kernel.
        kernel: String,
        /// The argument's position (0-based); for a wrong count, the first missing or
        /// extra one.
        index: usize,
        /// The parameter's name in the PTX (`-` past the end of the list).
        param: String,
        /// What does not match.
        reason: String,
    },
    /// No backend could be chosen (the native one was asked for and failed to load,
    /// or the choice is not understood).
    #[error("no CUDA backend: {reason}")]
    NoBackend {
        /// Why, with the native backend's error where there is one.
        reason: String,
    },
    /// An argument was refused before reaching the driver (a handle of another backend,
    /// a name with a NUL byte, a size that does not fit).
    #[error("{operation}: {reason}")]
    InvalidArgument {
        /// What was being done.
        operation: &'static str,
        /// Why the argument was refused.
        reason: String,
    },
}

impl DriverError {
    /// The `CUresult` when a CUDA call failed.
    pub fn code(&self) -> Option<i32> {
        match self {
            DriverError::Cuda(e) => Some(e.code),
            DriverError::NoDevice { .. } => Some(sys::CUDA_ERROR_NO_DEVICE),
            _ => None,
        }
    }

    /// The `CUresult` a driver-API caller gets for this error: the one mapping, used by
    /// the guest's `libcuda.so.1` and by the service alike. A failed CUDA call keeps its
    /// own; a refused argument is `CUDA_ERROR_INVALID_VALUE`; a driver (or NVRTC)
    /// library that cannot be loaded, or that lacks an entry point, is
    /// `CUDA_ERROR_NOT_INITIALIZED` (what `cuInit` says when the driver is unusable);
    /// no device is `CUDA_ERROR_NO_DEVICE`; anything else `CUDA_ERROR_UNKNOWN`.
    pub fn status(&self) -> Status {
        let code = match self {
            DriverError::Cuda(e) => e.code,
            DriverError::NoDevice { .. } => sys::CUDA_ERROR_NO_DEVICE,
            DriverError::InvalidArgument { .. } | DriverError::BadKernelArgument { .. } => {
                sys::CUDA_ERROR_INVALID_VALUE
            }
            DriverError::LibraryNotFound { .. }
            | DriverError::SymbolMissing { .. }
            | DriverError::NoBackend { .. } => sys::CUDA_ERROR_NOT_INITIALIZED,
            DriverError::Nvrtc { .. } | DriverError::Unexpected { .. } => sys::CUDA_ERROR_UNKNOWN,
        };
        Status(code as u32)
    }

    /// The CUDA name of the failure, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub fn cuda_name(&self) -> Option<&str> {
        match self {
            DriverError::Cuda(e) => Some(&e.name),
            DriverError::NoDevice { .. } => Status::ERROR_NO_DEVICE.name(),
            _ => None,
        }
    }

    /// The failing CUDA call, when it was one.
    pub fn as_cuda(&self) -> Option<&CudaError> {
        match self {
            DriverError::Cuda(e) => Some(e),
            _ => None,
        }
    }
}

impl From<CudaError> for DriverError {
    fn from(e: CudaError) -> Self {
        DriverError::Cuda(Box::new(e))
    }
}

/// A CUDA call that returned something other than `CUDA_SUCCESS`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaError {
    /// The `CUresult`.
    pub code: i32,
    /// Its name, e.g. `CUDA_ERROR_OUT_OF_MEMORY` (from `cuGetErrorName`, else the
    /// built-in table).
    pub name: String,
    /// Its description (from `cuGetErrorString`, else the built-in table).
    pub description: String,
    /// What was being done: the entry point and, where it helps, its arguments.
    pub operation: String,
    /// The device (ordinal) the call was for, when known.
    pub device: Option<u32>,
    /// The stream (raw handle; 0 is the default stream), for stream-ordered calls.
    pub stream: Option<u64>,
    /// The JIT error log of a failed module load.
    pub jit_log: Option<String>,
    /// What the backend knows beyond the code: for an asynchronous error, the operation
    /// that caused it; on the simulator, its precise fault report (kernel, block, thread,
    /// PTX line, address, nearest allocation); for a refused argument, which one.
    pub detail: Option<String>,
    /// The simulator's memory-fault report, when a simulated kernel faulted.
    pub fault: Option<Box<crate::MemoryFault>>,
}

impl CudaError {
    /// An error for `code` with the built-in name and description (for backends
    /// without a driver library to ask).
    pub fn builtin(code: i32, operation: impl Into<String>) -> CudaError {
        let (name, description) = builtin_text(code);
        CudaError {
            code,
            name: name.into(),
            description: description.into(),
            operation: operation.into(),
            device: None,
            stream: None,
            jit_log: None,
            detail: None,
            fault: None,
        }
    }

    /// A short hint for the common failures.
    pub fn hint(&self) -> Option<&'static str> {
        hint(self.code)
    }

    /// Whether this is a sticky error ([`is_sticky`]).
    pub fn is_sticky(&self) -> bool {
        is_sticky(self.code)
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.operation)?;
        if let Some(d) = self.device {
            write!(f, " on device {d}")?;
        }
        if let Some(s) = self.stream {
            if s == 0 {
                write!(f, " on the default stream")?;
            } else {
                write!(f, " on stream {s:#x}")?;
            }
        }
        write!(f, ": {} ({}): {}", self.name, self.code, self.description)?;
        if let Some(h) = self.hint() {
            write!(f, " (hint: {h})")?;
        }
        if let Some(d) = &self.detail {
            write!(f, "\n{d}")?;
        }
        if let Some(log) = &self.jit_log {
            let log = log.trim_end();
            if !log.is_empty() {
                write!(f, "\nJIT log:\n{log}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for CudaError {}

/// A short hint for the common failures.
pub fn hint(code: i32) -> Option<&'static str> {
    Some(match code {
        sys::CUDA_ERROR_NO_DEVICE => {
            "no usable GPU: check `nvidia-smi`, CUDA_VISIBLE_DEVICES and that the GPU is \
             bound to the nvidia driver"
        }
        sys::CUDA_ERROR_OUT_OF_MEMORY => {
            "device memory is exhausted: free buffers, use smaller ones, or check `nvidia-smi` \
             for other processes"
        }
        sys::CUDA_ERROR_INVALID_PTX | sys::CUDA_ERROR_INVALID_IMAGE => {
            "the PTX did not compile: see the JIT log"
        }
        sys::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            "the PTX ISA version is newer than this driver's JIT: update the driver or emit \
             an older .version"
        }
        sys::CUDA_ERROR_NO_BINARY_FOR_GPU => {
            "the module has no code for this GPU's architecture: load PTX, or build for it"
        }
        sys::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
            "too many registers or too much shared memory for this block size: use smaller \
             blocks or less shared memory"
        }
        sys::CUDA_ERROR_ILLEGAL_ADDRESS => {
            "a kernel accessed memory outside its allocations (compute-sanitizer finds the \
             access); this is a sticky error: on the native driver the process must be \
             restarted to use CUDA again (a reset does not clear it), on the simulator \
             `Gpu::reset` clears it"
        }
        sys::CUDA_ERROR_MISALIGNED_ADDRESS => {
            "a kernel accessed memory at a misaligned address; this is a sticky error: on \
             the native driver the process must be restarted to use CUDA again (a reset does \
             not clear it), on the simulator `Gpu::reset` clears it"
        }
        sys::CUDA_ERROR_LAUNCH_FAILED
        | sys::CUDA_ERROR_LAUNCH_TIMEOUT
        | sys::CUDA_ERROR_ASSERT
        | sys::CUDA_ERROR_HARDWARE_STACK_ERROR
        | sys::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | sys::CUDA_ERROR_INVALID_ADDRESS_SPACE
        | sys::CUDA_ERROR_INVALID_PC => {
            "the kernel faulted, asserted or ran too long; this is a sticky error: on the \
             native driver the process must be restarted to use CUDA again (a reset does not \
             clear it), on the simulator `Gpu::reset` clears it"
        }
        sys::CUDA_ERROR_INVALID_CONTEXT => {
            "no context is current on this thread: retain the primary context and make it \
             current first"
        }
        sys::CUDA_ERROR_NOT_INITIALIZED => {
            "cuInit has not succeeded, or (forward mode) the vmgpu CUDA service could not be \
             reached: the detail names the address"
        }
        sys::CUDA_ERROR_STUB_LIBRARY => {
            "the loaded libcuda is the toolkit's stub, not the driver: point VMGPU_LIBCUDA at \
             the driver's libcuda.so.1"
        }
        sys::CUDA_ERROR_INSUFFICIENT_DRIVER | sys::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            "the user-space driver library and the kernel module do not match or are too old"
        }
        _ => return None,
    })
}

/// Whether `code` is a sticky error ([`Status::is_sticky`], from the one table).
pub fn is_sticky(code: i32) -> bool {
    Status(code as u32).is_sticky()
}

/// The name and description of a `CUresult` from the one table ([`crate::status`]), for
/// when the driver library is absent or its `cuGetErrorName` fails.
pub fn builtin_text(code: i32) -> (&'static str, &'static str) {
    let s = Status(code as u32);
    match (s.name(), s.description()) {
        (Some(n), Some(d)) => (n, d),
        _ => (
            "CUDA_ERROR_UNRECOGNIZED",
            "a CUresult this crate does not know",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: i32) -> CudaError {
        let (name, description) = builtin_text(code);
        CudaError {
            code,
            name: name.into(),
            description: description.into(),
            operation: "cuLaunchKernel".into(),
            device: Some(1),
            stream: Some(0xabc),
            jit_log: None,
            detail: None,
            fault: None,
        }
    }

    #[test]
    fn display_names_operation_device_stream_code_and_hint() {
        let e = err(sys::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(
            e.to_string(),
            "cuLaunchKernel failed on device 1 on stream 0xabc: CUDA_ERROR_ILLEGAL_ADDRESS \
             (700): an illegal memory access was encountered (hint: a kernel accessed memory \
             outside its allocations (compute-sanitizer finds the access); this is a sticky \
             error: on the native driver the process must be restarted to use CUDA again (a \
             reset does not clear it), on the simulator `Gpu::reset` clears it)"
        );
        let mut e = err(sys::CUDA_ERROR_INVALID_PTX);
        e.stream = Some(0);
        e.jit_log = Some("ptxas application ptx input, line 3; error\n".into());
        let s = e.to_string();
        assert!(s.contains("on the default stream"), "{s}");
        assert!(
            s.ends_with("JIT log:\nptxas application ptx input, line 3; error"),
            "{s}"
        );
        let wrapped = DriverError::from(e);
        assert_eq!(wrapped.code(), Some(218));
        assert_eq!(wrapped.cuda_name(), Some("CUDA_ERROR_INVALID_PTX"));
    }

    #[test]
    fn common_failures_have_hints_and_names() {
        for code in [
            1, 2, 3, 34, 35, 100, 200, 201, 209, 218, 222, 700, 701, 716, 719, 803,
        ] {
            let (name, desc) = builtin_text(code);
            assert!(name.starts_with("CUDA_ERROR_"), "{code}");
            assert_ne!(name, "CUDA_ERROR_UNRECOGNIZED", "{code}");
            assert!(!desc.is_empty());
        }
        for code in [2, 100, 218, 701, 700] {
            assert!(hint(code).is_some(), "{code}");
        }
        for code in [700, 702, 710, 714, 715, 716, 717, 718, 719] {
            assert!(is_sticky(code), "{code}");
            let h = hint(code).unwrap_or_else(|| panic!("no hint for {code}"));
            assert!(
                h.contains("sticky") && h.contains("restarted"),
                "{code}: {h}"
            );
            assert_ne!(builtin_text(code).0, "CUDA_ERROR_UNRECOGNIZED", "{code}");
        }
        for code in [1, 2, 201, 218, 600, 701, 709] {
            assert!(!is_sticky(code), "{code}");
        }
        assert!(hint(sys::CUDA_ERROR_NOT_READY).is_none());
        assert_eq!(builtin_text(123_456).0, "CUDA_ERROR_UNRECOGNIZED");
        assert_eq!(builtin_text(0).0, "CUDA_SUCCESS");
    }

    #[test]
    fn no_device_is_a_cuda_code_too() {
        let e = DriverError::NoDevice { driver_version: 0 };
        assert_eq!(e.code(), Some(100));
        assert!(e.to_string().contains("nvidia-smi"));
    }
}
