//! The runtime's error codes (`cudaError_t`): one table of value, name and description,
//! from which `cudaGetErrorName`, `cudaGetErrorString` and the constants come; and the
//! one mapping from the driver's `CUresult` (the runtime's codes share the driver's
//! numbers where both have the error).

#![allow(non_upper_case_globals)]

/// A `cudaError_t`.
pub type CudaError = i32;

macro_rules! runtime_errors {
    ($($value:literal $name:ident $desc:literal;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: ", $desc, ".")]
            pub const $name: CudaError = $value;
        )*

        /// The name of `e` (`cudaErrorInvalidValue`), if the runtime has it.
        pub fn name(e: CudaError) -> Option<&'static str> {
            match e {
                $($value => Some(concat!(stringify!($name), "\0")),)*
                _ => None,
            }
        }

        /// What `e` means (`cudaGetErrorString`), if the runtime has it.
        pub fn description(e: CudaError) -> Option<&'static str> {
            match e {
                $($value => Some(concat!($desc, "\0")),)*
                _ => None,
            }
        }
    };
}

// Generated from cuda_runtime 13.0's driver_types.h (the cudaError enum): value, name,
// description (cudaGetErrorString's short text where it is well known, else the
// first sentence of the header's documentation).
runtime_errors! {
    0 cudaSuccess "no error";
    1 cudaErrorInvalidValue "invalid argument";
    2 cudaErrorMemoryAllocation "out of memory";
    3 cudaErrorInitializationError "initialization error";
    4 cudaErrorCudartUnloading "This indicates that a CUDA Runtime API call cannot be executed because it is being called during process shut down, at a point in time after CUDA driver has been unloaded";
    5 cudaErrorProfilerDisabled "This indicates profiler is not initialized for this run";
    6 cudaErrorProfilerNotInitialized "(deprecated) It is no longer an error to attempt to enable/disable the profiling via ::cudaProfilerStart or ::cudaProfilerStop without initialization";
    7 cudaErrorProfilerAlreadyStarted "(deprecated) It is no longer an error to call cudaProfilerStart() when profiling is already enabled";
    8 cudaErrorProfilerAlreadyStopped "(deprecated) It is no longer an error to call cudaProfilerStop() when profiling is already disabled";
    9 cudaErrorInvalidConfiguration "invalid configuration argument";
    12 cudaErrorInvalidPitchValue "This indicates that one or more of the pitch-related parameters passed to the API call is not within the acceptable range for pitch";
    13 cudaErrorInvalidSymbol "invalid device symbol";
    16 cudaErrorInvalidHostPointer "This indicates that at least one host pointer passed to the API call is not a valid host pointer";
    17 cudaErrorInvalidDevicePointer "invalid device pointer";
    18 cudaErrorInvalidTexture "This indicates that the texture passed to the API call is not a valid texture";
    19 cudaErrorInvalidTextureBinding "This indicates that the texture binding is not valid";
    20 cudaErrorInvalidChannelDescriptor "This indicates that the channel descriptor passed to the API call is not valid";
    21 cudaErrorInvalidMemcpyDirection "invalid copy direction for memcpy";
    22 cudaErrorAddressOfConstant "This indicated that the user has taken the address of a constant variable, which was forbidden up until the CUDA 3.1 release";
    23 cudaErrorTextureFetchFailed "This indicated that a texture fetch was not able to be performed";
    24 cudaErrorTextureNotBound "This indicated that a texture was not bound for access";
    25 cudaErrorSynchronizationError "This indicated that a synchronization operation had failed";
    26 cudaErrorInvalidFilterSetting "This indicates that a non-float texture was being accessed with linear filtering";
    27 cudaErrorInvalidNormSetting "This indicates that an attempt was made to read an unsupported data type as a normalized float";
    28 cudaErrorMixedDeviceExecution "Mixing of device and device emulation code was not allowed";
    31 cudaErrorNotYetImplemented "This indicates that the API call is not yet implemented";
    32 cudaErrorMemoryValueTooLarge "This indicated that an emulated device pointer exceeded the 32-bit address range";
    34 cudaErrorStubLibrary "This indicates that the CUDA driver that the application has loaded is a stub library";
    35 cudaErrorInsufficientDriver "CUDA driver version is insufficient for CUDA runtime version";
    36 cudaErrorCallRequiresNewerDriver "This indicates that the API call requires a newer CUDA driver than the one currently installed";
    37 cudaErrorInvalidSurface "This indicates that the surface passed to the API call is not a valid surface";
    43 cudaErrorDuplicateVariableName "This indicates that multiple global or constant variables (across separate CUDA source files in the application) share the same string name";
    44 cudaErrorDuplicateTextureName "This indicates that multiple textures (across separate CUDA source files in the application) share the same string name";
    45 cudaErrorDuplicateSurfaceName "This indicates that multiple surfaces (across separate CUDA source files in the application) share the same string name";
    46 cudaErrorDevicesUnavailable "This indicates that all CUDA devices are busy or unavailable at the current time";
    49 cudaErrorIncompatibleDriverContext "This indicates that the current context is not compatible with this the CUDA Runtime";
    52 cudaErrorMissingConfiguration "__global__ function call is not configured";
    53 cudaErrorPriorLaunchFailure "This indicated that a previous kernel launch failed";
    65 cudaErrorLaunchMaxDepthExceeded "This error indicates that a device runtime grid launch did not occur because the depth of the child grid would exceed the maximum supported number of nested grid launches";
    66 cudaErrorLaunchFileScopedTex "This error indicates that a grid launch did not occur because the kernel uses file-scoped textures which are unsupported by the device runtime";
    67 cudaErrorLaunchFileScopedSurf "This error indicates that a grid launch did not occur because the kernel uses file-scoped surfaces which are unsupported by the device runtime";
    68 cudaErrorSyncDepthExceeded "This error indicates that a call to ::cudaDeviceSynchronize made from the device runtime failed because the call was made at grid depth greater than than either the default (2 levels of grids) or user specified device limit ::cudaLimitDevRuntimeSyncDepth";
    69 cudaErrorLaunchPendingCountExceeded "This error indicates that a device runtime grid launch failed because the launch would exceed the limit ::cudaLimitDevRuntimePendingLaunchCount";
    98 cudaErrorInvalidDeviceFunction "invalid device function";
    100 cudaErrorNoDevice "no CUDA-capable device is detected";
    101 cudaErrorInvalidDevice "invalid device ordinal";
    102 cudaErrorDeviceNotLicensed "This indicates that the device doesn't have a valid Grid License";
    103 cudaErrorSoftwareValidityNotEstablished "By default, the CUDA runtime may perform a minimal set of self-tests, as well as CUDA driver tests, to establish the validity of both";
    127 cudaErrorStartupFailure "This indicates an internal startup failure in the CUDA runtime";
    200 cudaErrorInvalidKernelImage "device kernel image is invalid";
    201 cudaErrorDeviceUninitialized "invalid device context";
    205 cudaErrorMapBufferObjectFailed "This indicates that the buffer object could not be mapped";
    206 cudaErrorUnmapBufferObjectFailed "This indicates that the buffer object could not be unmapped";
    207 cudaErrorArrayIsMapped "This indicates that the specified array is currently mapped and thus cannot be destroyed";
    208 cudaErrorAlreadyMapped "This indicates that the resource is already mapped";
    209 cudaErrorNoKernelImageForDevice "no kernel image is available for execution on the device";
    210 cudaErrorAlreadyAcquired "This indicates that a resource has already been acquired";
    211 cudaErrorNotMapped "This indicates that a resource is not mapped";
    212 cudaErrorNotMappedAsArray "This indicates that a mapped resource is not available for access as an array";
    213 cudaErrorNotMappedAsPointer "This indicates that a mapped resource is not available for access as a pointer";
    214 cudaErrorECCUncorrectable "This indicates that an uncorrectable ECC error was detected during execution";
    215 cudaErrorUnsupportedLimit "This indicates that the ::cudaLimit passed to the API call is not supported by the active device";
    216 cudaErrorDeviceAlreadyInUse "This indicates that a call tried to access an exclusive-thread device that is already in use by a different thread";
    217 cudaErrorPeerAccessUnsupported "This error indicates that P2P access is not supported across the given devices";
    218 cudaErrorInvalidPtx "a PTX JIT compilation failed";
    219 cudaErrorInvalidGraphicsContext "This indicates an error with the OpenGL or DirectX context";
    220 cudaErrorNvlinkUncorrectable "This indicates that an uncorrectable NVLink error was detected during the execution";
    221 cudaErrorJitCompilerNotFound "This indicates that the PTX JIT compiler library was not found";
    222 cudaErrorUnsupportedPtxVersion "This indicates that the provided PTX was compiled with an unsupported toolchain";
    223 cudaErrorJitCompilationDisabled "This indicates that the JIT compilation was disabled";
    224 cudaErrorUnsupportedExecAffinity "This indicates that the provided execution affinity is not supported by the device";
    225 cudaErrorUnsupportedDevSideSync "This indicates that the code to be compiled by the PTX JIT contains unsupported call to cudaDeviceSynchronize";
    226 cudaErrorContained "This indicates that an exception occurred on the device that is now contained by the GPU's error containment capability";
    300 cudaErrorInvalidSource "This indicates that the device kernel source is invalid";
    301 cudaErrorFileNotFound "This indicates that the file specified was not found";
    302 cudaErrorSharedObjectSymbolNotFound "This indicates that a link to a shared object failed to resolve";
    303 cudaErrorSharedObjectInitFailed "This indicates that initialization of a shared object failed";
    304 cudaErrorOperatingSystem "This error indicates that an OS call failed";
    400 cudaErrorInvalidResourceHandle "invalid resource handle";
    401 cudaErrorIllegalState "This indicates that a resource required by the API call is not in a valid state to perform the requested operation";
    402 cudaErrorLossyQuery "This indicates an attempt was made to introspect an object in a way that would discard semantically important information";
    500 cudaErrorSymbolNotFound "named symbol not found";
    600 cudaErrorNotReady "device not ready";
    700 cudaErrorIllegalAddress "an illegal memory access was encountered";
    701 cudaErrorLaunchOutOfResources "too many resources requested for launch";
    702 cudaErrorLaunchTimeout "the launch timed out and was terminated";
    703 cudaErrorLaunchIncompatibleTexturing "This error indicates a kernel launch that uses an incompatible texturing mode";
    704 cudaErrorPeerAccessAlreadyEnabled "This error indicates that a call to ::cudaDeviceEnablePeerAccess() is trying to re-enable peer addressing on from a context which has already had peer addressing enabled";
    705 cudaErrorPeerAccessNotEnabled "This error indicates that ::cudaDeviceDisablePeerAccess() is trying to disable peer addressing which has not been enabled yet via ::cudaDeviceEnablePeerAccess()";
    708 cudaErrorSetOnActiveProcess "This indicates that the user has called ::cudaSetValidDevices(), ::cudaSetDeviceFlags(), ::cudaD3D9SetDirect3DDevice(), ::cudaD3D10SetDirect3DDevice, ::cudaD3D11SetDirect3DDevice(), or ::cudaVDPAUSetVDPAUDevice() after initializing the CUDA runtime by calling non-device management operations (allocating memory and launching kernels are examples of non-device management operations)";
    709 cudaErrorContextIsDestroyed "This error indicates that the context current to the calling thread has been destroyed using ::cuCtxDestroy, or is a primary context which has not yet been initialized";
    710 cudaErrorAssert "device-side assert triggered";
    711 cudaErrorTooManyPeers "This error indicates that the hardware resources required to enable peer access have been exhausted for one or more of the devices passed to ::cudaEnablePeerAccess()";
    712 cudaErrorHostMemoryAlreadyRegistered "This error indicates that the memory range passed to ::cudaHostRegister() has already been registered";
    713 cudaErrorHostMemoryNotRegistered "This error indicates that the pointer passed to ::cudaHostUnregister() does not correspond to any currently registered memory region";
    714 cudaErrorHardwareStackError "Device encountered an error in the call stack during kernel execution, possibly due to stack corruption or exceeding the stack size limit";
    715 cudaErrorIllegalInstruction "The device encountered an illegal instruction during kernel execution This leaves the process in an inconsistent state and any further CUDA work will return the same error";
    716 cudaErrorMisalignedAddress "The device encountered a load or store instruction on a memory address which is not aligned";
    717 cudaErrorInvalidAddressSpace "While executing a kernel, the device encountered an instruction which can only operate on memory locations in certain address spaces (global, shared, or local), but was supplied a memory address not belonging to an allowed address space";
    718 cudaErrorInvalidPc "The device encountered an invalid program counter";
    719 cudaErrorLaunchFailure "unspecified launch failure";
    720 cudaErrorCooperativeLaunchTooLarge "This error indicates that the number of blocks launched per grid for a kernel that was launched via either ::cudaLaunchCooperativeKernel exceeds the maximum number of blocks as allowed by ::cudaOccupancyMaxActiveBlocksPerMultiprocessor or ::cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags times the number of multiprocessors as specified by the device attribute ::cudaDevAttrMultiProcessorCount";
    721 cudaErrorTensorMemoryLeak "An exception occurred on the device while exiting a kernel using tensor memory: the tensor memory was not completely deallocated";
    800 cudaErrorNotPermitted "This error indicates the attempted operation is not permitted";
    801 cudaErrorNotSupported "operation not supported";
    802 cudaErrorSystemNotReady "This error indicates that the system is not yet ready to start any CUDA work";
    803 cudaErrorSystemDriverMismatch "This error indicates that there is a mismatch between the versions of the display driver and the CUDA driver";
    804 cudaErrorCompatNotSupportedOnDevice "This error indicates that the system was upgraded to run with forward compatibility but the visible hardware detected by CUDA does not support this configuration";
    805 cudaErrorMpsConnectionFailed "This error indicates that the MPS client failed to connect to the MPS control daemon or the MPS server";
    806 cudaErrorMpsRpcFailure "This error indicates that the remote procedural call between the MPS server and the MPS client failed";
    807 cudaErrorMpsServerNotReady "This error indicates that the MPS server is not ready to accept new MPS client requests";
    808 cudaErrorMpsMaxClientsReached "This error indicates that the hardware resources required to create MPS client have been exhausted";
    809 cudaErrorMpsMaxConnectionsReached "This error indicates the the hardware resources required to device connections have been exhausted";
    810 cudaErrorMpsClientTerminated "This error indicates that the MPS client has been terminated by the server";
    811 cudaErrorCdpNotSupported "This error indicates, that the program is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it";
    812 cudaErrorCdpVersionMismatch "This error indicates, that the program contains an unsupported interaction between different versions of CUDA Dynamic Parallelism";
    900 cudaErrorStreamCaptureUnsupported "The operation is not permitted when the stream is capturing";
    901 cudaErrorStreamCaptureInvalidated "The current capture sequence on the stream has been invalidated due to a previous error";
    902 cudaErrorStreamCaptureMerge "The operation would have resulted in a merge of two independent capture sequences";
    903 cudaErrorStreamCaptureUnmatched "The capture was not initiated in this stream";
    904 cudaErrorStreamCaptureUnjoined "The capture sequence contains a fork that was not joined to the primary stream";
    905 cudaErrorStreamCaptureIsolation "A dependency would have been created which crosses the capture sequence boundary";
    906 cudaErrorStreamCaptureImplicit "The operation would have resulted in a disallowed implicit dependency on a current capture sequence from cudaStreamLegacy";
    907 cudaErrorCapturedEvent "The operation is not permitted on an event which was last recorded in a capturing stream";
    908 cudaErrorStreamCaptureWrongThread "A stream capture sequence not initiated with the ::cudaStreamCaptureModeRelaxed argument to ::cudaStreamBeginCapture was passed to ::cudaStreamEndCapture in a different thread";
    909 cudaErrorTimeout "This indicates that the wait operation has timed out";
    910 cudaErrorGraphExecUpdateFailure "This error indicates that the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    911 cudaErrorExternalDevice "This indicates that an async error has occurred in a device outside of CUDA. If CUDA was waiting for an external device's signal before consuming shared data, the external device signaled an error indicating that the data is not valid for consumption";
    912 cudaErrorInvalidClusterSize "This indicates that a kernel launch error has occurred due to cluster misconfiguration";
    913 cudaErrorFunctionNotLoaded "Indiciates a function handle is not loaded when calling an API that requires a loaded function";
    914 cudaErrorInvalidResourceType "This error indicates one or more resources passed in are not valid resource types for the operation";
    915 cudaErrorInvalidResourceConfiguration "This error indicates one or more resources are insufficient or non-applicable for the operation";
    999 cudaErrorUnknown "unknown error";
}

/// The runtime's code for the driver's `r`: the same number where the runtime has it
/// (their shared errors are numbered alike), else `cudaErrorUnknown`.
pub fn from_driver(r: i32) -> CudaError {
    if name(r).is_some() {
        r
    } else {
        cudaErrorUnknown
    }
}

/// Whether `e` leaves the context unusable (the driver's sticky errors; the one
/// `CUresult` table says which).
pub fn is_sticky(e: CudaError) -> bool {
    u32::try_from(e).is_ok_and(|v| vmgpu_cuda_api::Status(v).is_sticky())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_descriptions_and_the_driver_mapping() {
        assert_eq!(name(cudaSuccess), Some("cudaSuccess\0"));
        assert_eq!(
            description(cudaErrorInvalidValue),
            Some("invalid argument\0")
        );
        assert_eq!(from_driver(700), cudaErrorIllegalAddress);
        assert_eq!(from_driver(1), cudaErrorInvalidValue);
        assert_eq!(from_driver(123_456), cudaErrorUnknown);
        assert!(is_sticky(cudaErrorIllegalAddress));
        assert!(!is_sticky(cudaErrorInvalidValue));
        // Every code the driver's table knows and the runtime has, has the same meaning
        // by number: spot checks of the shared ones.
        assert_eq!(cudaErrorInvalidResourceHandle, 400);
        assert_eq!(cudaErrorNotReady, 600);
        assert_eq!(cudaErrorAssert, 710);
        assert_eq!(cudaErrorLaunchFailure, 719);
    }
}
