//! Loading the CUDA driver at run time (never linked).
//!
//! [`Driver::load`] opens `libcuda.so.1` (or the path in `VMGPU_LIBCUDA`, or the one
//! given), looks up `cuGetProcAddress_v2` with `dlsym`, and resolves every entry point
//! the backend uses through it, asking for the ABI of CUDA
//! [`sys::REQUESTED_CUDA_VERSION`] and the legacy (or per-thread) default stream, so the
//! driver itself picks the right `_v2`/`_v3`/`_ptsz` variant. Only when the driver is
//! too old to have `cuGetProcAddress_v2` (before CUDA 12.0) are the versioned names
//! (`cuMemAlloc_v2`, ...) looked up with `dlsym`. Every failure is a [`DriverError`].

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

use vmgpu_cuda_api::error::{builtin_text, CudaError, DriverError, LIBRARY_CUDA};
use vmgpu_cuda_api::sys;

/// The environment variable naming the driver library to load.
pub const LIBCUDA_ENV: &str = "VMGPU_LIBCUDA";
/// The library loaded when neither the options nor [`LIBCUDA_ENV`] name one.
pub const DEFAULT_LIBCUDA: &str = "libcuda.so.1";
/// Where the driver is looked for when [`DEFAULT_LIBCUDA`] is not on the loader's path
/// (containers mount it at the first; WSL puts it at the last).
pub const FALLBACK_PATHS: &[&str] = &[
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
];

macro_rules! entry_points {
    ($( $field:ident : $ty:ident = $name:literal, $versioned:literal; )*) => {
        /// The driver's entry points, resolved at run time, each in the ABI of CUDA
        /// [`sys::REQUESTED_CUDA_VERSION`].
        #[derive(Debug, Clone, Copy)]
        #[allow(missing_docs)]
        pub struct DriverApi {
            $( pub $field: sys::$ty, )*
        }

        /// Every entry point the native backend uses: the name given to
        /// `cuGetProcAddress_v2`, and the versioned symbol looked up with `dlsym` when
        /// the driver has no `cuGetProcAddress_v2`.
        pub const ENTRY_POINTS: &[(&str, &str)] = &[ $( ($name, $versioned), )* ];

        impl DriverApi {
            /// Every entry point as (name, versioned symbol, address resolved), to check
            /// the resolution against what `dlsym` gives for each name.
            pub fn addresses(&self) -> Vec<(&'static str, &'static str, usize)> {
                vec![ $( ($name, $versioned, self.$field as usize), )* ]
            }

            fn resolve(
                lookup: &mut dyn FnMut(&'static CStr, &'static CStr) -> Result<*mut c_void, DriverError>,
            ) -> Result<Self, DriverError> {
                Ok(Self {
                    $( $field: {
                        let name = cstr(concat!($name, "\0"))?;
                        let versioned = cstr(concat!($versioned, "\0"))?;
                        let p = lookup(name, versioned)?;
                        // SAFETY: `lookup` returned a non-null address that the driver
                        // gave for this entry point in the ABI of the CUDA version we
                        // asked for (or the exported symbol of that versioned name);
                        // `sys::$ty` is that entry point's C prototype from cuda.h, and
                        // a data pointer and a function pointer have the same size and
                        // representation on every platform libcuda exists for.
                        unsafe { std::mem::transmute::<*mut c_void, sys::$ty>(p) }
                    }, )*
                })
            }
        }
    };
}

entry_points! {
    init: cuInit = "cuInit", "cuInit";
    driver_get_version: cuDriverGetVersion = "cuDriverGetVersion", "cuDriverGetVersion";
    get_error_name: cuGetErrorText = "cuGetErrorName", "cuGetErrorName";
    get_error_string: cuGetErrorText = "cuGetErrorString", "cuGetErrorString";
    device_get_count: cuDeviceGetCount = "cuDeviceGetCount", "cuDeviceGetCount";
    device_get: cuDeviceGet = "cuDeviceGet", "cuDeviceGet";
    device_get_name: cuDeviceGetName = "cuDeviceGetName", "cuDeviceGetName";
    device_get_uuid: cuDeviceGetUuid = "cuDeviceGetUuid", "cuDeviceGetUuid_v2";
    device_get_pci_bus_id: cuDeviceGetPCIBusId = "cuDeviceGetPCIBusId", "cuDeviceGetPCIBusId";
    device_get_attribute: cuDeviceGetAttribute = "cuDeviceGetAttribute", "cuDeviceGetAttribute";
    device_total_mem: cuDeviceTotalMem = "cuDeviceTotalMem", "cuDeviceTotalMem_v2";
    primary_ctx_retain: cuDevicePrimaryCtxRetain = "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain";
    primary_ctx_release: cuDevicePrimaryCtxRelease = "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2";
    primary_ctx_reset: cuDevicePrimaryCtxRelease = "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2";
    ctx_set_current: cuCtxSetCurrent = "cuCtxSetCurrent", "cuCtxSetCurrent";
    ctx_get_current: cuCtxGetCurrent = "cuCtxGetCurrent", "cuCtxGetCurrent";
    ctx_synchronize: cuCtxSynchronize = "cuCtxSynchronize", "cuCtxSynchronize";
    mem_get_info: cuMemGetInfo = "cuMemGetInfo", "cuMemGetInfo_v2";
    module_load_data_ex: cuModuleLoadDataEx = "cuModuleLoadDataEx", "cuModuleLoadDataEx";
    module_unload: cuModuleUnload = "cuModuleUnload", "cuModuleUnload";
    module_get_function: cuModuleGetFunction = "cuModuleGetFunction", "cuModuleGetFunction";
    mem_alloc: cuMemAlloc = "cuMemAlloc", "cuMemAlloc_v2";
    mem_free: cuMemFree = "cuMemFree", "cuMemFree_v2";
    memset_d8: cuMemsetD8 = "cuMemsetD8", "cuMemsetD8_v2";
    memset_d32: cuMemsetD32 = "cuMemsetD32", "cuMemsetD32_v2";
    memset_d8_async: cuMemsetD8Async = "cuMemsetD8Async", "cuMemsetD8Async";
    memset_d16: cuMemsetD16 = "cuMemsetD16", "cuMemsetD16_v2";
    memset_d16_async: cuMemsetD16Async = "cuMemsetD16Async", "cuMemsetD16Async";
    ctx_create: cuCtxCreate = "cuCtxCreate", "cuCtxCreate_v3";
    ctx_destroy: cuCtxDestroy = "cuCtxDestroy", "cuCtxDestroy_v2";
    memset_d32_async: cuMemsetD32Async = "cuMemsetD32Async", "cuMemsetD32Async";
    memcpy_htod: cuMemcpyHtoD = "cuMemcpyHtoD", "cuMemcpyHtoD_v2";
    memcpy_dtoh: cuMemcpyDtoH = "cuMemcpyDtoH", "cuMemcpyDtoH_v2";
    memcpy_dtod: cuMemcpyDtoD = "cuMemcpyDtoD", "cuMemcpyDtoD_v2";
    memcpy_htod_async: cuMemcpyHtoDAsync = "cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2";
    memcpy_dtoh_async: cuMemcpyDtoHAsync = "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2";
    memcpy_dtod_async: cuMemcpyDtoDAsync = "cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2";
    mem_host_alloc: cuMemHostAlloc = "cuMemHostAlloc", "cuMemHostAlloc";
    mem_free_host: cuMemFreeHost = "cuMemFreeHost", "cuMemFreeHost";
    mem_host_register: cuMemHostRegister = "cuMemHostRegister", "cuMemHostRegister_v2";
    mem_host_unregister: cuMemHostUnregister = "cuMemHostUnregister", "cuMemHostUnregister";
    stream_create: cuStreamCreate = "cuStreamCreate", "cuStreamCreate";
    stream_synchronize: cuStreamOp = "cuStreamSynchronize", "cuStreamSynchronize";
    stream_query: cuStreamOp = "cuStreamQuery", "cuStreamQuery";
    stream_destroy: cuStreamOp = "cuStreamDestroy", "cuStreamDestroy_v2";
    stream_wait_event: cuStreamWaitEvent = "cuStreamWaitEvent", "cuStreamWaitEvent";
    event_create: cuEventCreate = "cuEventCreate", "cuEventCreate";
    event_record: cuEventRecord = "cuEventRecord", "cuEventRecord";
    event_synchronize: cuEventOp = "cuEventSynchronize", "cuEventSynchronize";
    event_query: cuEventOp = "cuEventQuery", "cuEventQuery";
    event_elapsed_time: cuEventElapsedTime = "cuEventElapsedTime", "cuEventElapsedTime";
    event_destroy: cuEventOp = "cuEventDestroy", "cuEventDestroy_v2";
    func_set_attribute: cuFuncSetAttribute = "cuFuncSetAttribute", "cuFuncSetAttribute";
    func_get_attribute: cuFuncGetAttribute = "cuFuncGetAttribute", "cuFuncGetAttribute";
    module_get_global: cuModuleGetGlobal = "cuModuleGetGlobal", "cuModuleGetGlobal_v2";
    launch_kernel: cuLaunchKernel = "cuLaunchKernel", "cuLaunchKernel";
    launch_cooperative_kernel: cuLaunchCooperativeKernel = "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel";
}

fn cstr(s: &'static str) -> Result<&'static CStr, DriverError> {
    CStr::from_bytes_with_nul(s.as_bytes()).map_err(|e| DriverError::InvalidArgument {
        operation: "resolving a driver entry point",
        reason: format!("bad symbol name {s:?}: {e}"),
    })
}

/// How the entry points were resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// Through `cuGetProcAddress_v2` with this CUDA version and these flags.
    ProcAddress {
        /// The CUDA version asked for, e.g. 12000.
        cuda_version: i32,
        /// The `CU_GET_PROC_ADDRESS_*` flags.
        flags: u64,
    },
    /// With `dlsym` of the versioned names (a driver older than CUDA 12.0).
    Dlsym,
}

/// Options for [`Driver::load`].
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The library to open; `None`: `VMGPU_LIBCUDA`, else `libcuda.so.1`.
    pub path: Option<PathBuf>,
    /// The CUDA version whose ABI is asked for.
    pub cuda_version: i32,
    /// Resolve the per-thread-default-stream variants (`_ptsz`/`_ptds`) instead of the
    /// legacy ones.
    pub per_thread_default_stream: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            path: None,
            cuda_version: sys::REQUESTED_CUDA_VERSION,
            per_thread_default_stream: false,
        }
    }
}

impl LoadOptions {
    /// The library [`Driver::load`] opens: the option's path, else `VMGPU_LIBCUDA`,
    /// else `libcuda.so.1`.
    pub fn library_path(&self) -> PathBuf {
        self.library_path_with(std::env::var_os(LIBCUDA_ENV))
    }

    fn library_path_with(&self, env: Option<std::ffi::OsString>) -> PathBuf {
        match (&self.path, env) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_LIBCUDA),
        }
    }
}

/// The loaded driver library and its entry points. Not initialised: see
/// [`Driver::init`].
#[derive(Debug)]
pub struct Driver {
    api: DriverApi,
    path: String,
    resolution: Resolution,
    // Declared last: dropped after nothing can call through `api` any more.
    lib: libloading::Library,
}

impl Driver {
    /// Opens the library and resolves every entry point of [`ENTRY_POINTS`].
    pub fn load(options: &LoadOptions) -> Result<Driver, DriverError> {
        let first = options.library_path();
        // Only the default name falls back to the driver's usual places: a path named by
        // the caller or VMGPU_LIBCUDA is the only one tried.
        let candidates: Vec<PathBuf> = if first == Path::new(DEFAULT_LIBCUDA) {
            std::iter::once(first)
                .chain(FALLBACK_PATHS.iter().map(PathBuf::from))
                .collect()
        } else {
            vec![first]
        };
        let mut failures = Vec::new();
        let mut opened = None;
        for candidate in &candidates {
            // SAFETY: opening a shared library runs its initialisers. The library is the
            // CUDA driver (or what the operator named in its place): a vendor library
            // meant to be dlopened by any process, whose initialisers have no
            // preconditions on us.
            match unsafe { libloading::Library::new(candidate) } {
                Ok(lib) => {
                    opened = Some((candidate.display().to_string(), lib));
                    break;
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        let Some((path, lib)) = opened else {
            return Err(DriverError::LibraryNotFound {
                library: LIBRARY_CUDA,
                path: candidates[0].display().to_string(),
                reason: failures.join("; "),
                hint: "install the NVIDIA driver, or point VMGPU_LIBCUDA at its libcuda.so.1",
            });
        };

        // SAFETY: `cuGetProcAddress_v2` has, when present, exactly the prototype
        // `sys::cuGetProcAddress_v2` (cuda.h 12.x); the symbol is only copied out as a
        // function pointer, which stays valid while `lib` is loaded (it lives in `Driver`).
        let gpa: Option<sys::cuGetProcAddress_v2> =
            unsafe { lib.get::<sys::cuGetProcAddress_v2>(b"cuGetProcAddress_v2\0") }
                .ok()
                .map(|s| *s);

        let flags = if options.per_thread_default_stream {
            sys::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            sys::CU_GET_PROC_ADDRESS_LEGACY_STREAM
        };
        let (api, resolution) = match gpa {
            Some(gpa) => {
                let version = options.cuda_version;
                let mut lookup = |name: &'static CStr, _versioned: &'static CStr| {
                    let mut p: *mut c_void = std::ptr::null_mut();
                    let mut status: c_int = -1;
                    // SAFETY: `gpa` is the driver's cuGetProcAddress_v2; `name` is a
                    // NUL-terminated string alive for the call; `p` and `status` are
                    // valid, writable locals of the types the prototype names.
                    let r = unsafe { gpa(name.as_ptr(), &mut p, version, flags, &mut status) };
                    if r != sys::CUDA_SUCCESS || p.is_null() {
                        let why = match status {
                            sys::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND => "symbol not found",
                            sys::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT => {
                                "the driver's version of it is newer than the one asked for"
                            }
                            _ => "no address returned",
                        };
                        return Err(DriverError::SymbolMissing {
                            library: LIBRARY_CUDA,
                            path: path.clone(),
                            symbol: name.to_string_lossy().into_owned(),
                            reason: format!(
                                "cuGetProcAddress_v2(version {version}, flags {flags}) returned \
                                 {} ({r}), status {status}: {why}",
                                builtin_text(r).0
                            ),
                        });
                    }
                    Ok(p)
                };
                (
                    DriverApi::resolve(&mut lookup)?,
                    Resolution::ProcAddress {
                        cuda_version: version,
                        flags,
                    },
                )
            }
            None => {
                let mut lookup = |name: &'static CStr, versioned: &'static CStr| {
                    // SAFETY: the symbol is only read as an address (`*mut c_void`);
                    // it is converted to its prototype by `DriverApi::resolve`.
                    let sym = unsafe { lib.get::<*mut c_void>(versioned.to_bytes_with_nul()) };
                    match sym {
                        Ok(s) if !s.is_null() => Ok(*s),
                        Ok(_) => Err("null address".to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                    .map_err(|e| DriverError::SymbolMissing {
                        library: LIBRARY_CUDA,
                        path: path.clone(),
                        symbol: versioned.to_string_lossy().into_owned(),
                        reason: format!(
                            "the library has no cuGetProcAddress_v2 (driver older than CUDA \
                             12.0 or not a CUDA driver) and dlsym of {} failed: {e}",
                            name.to_string_lossy()
                        ),
                    })
                };
                (DriverApi::resolve(&mut lookup)?, Resolution::Dlsym)
            }
        };
        log::debug!("loaded CUDA driver {path}, entry points resolved by {resolution:?}");
        Ok(Driver {
            api,
            path,
            resolution,
            lib,
        })
    }

    /// The entry points.
    pub fn api(&self) -> &DriverApi {
        &self.api
    }

    /// The library's path or name as opened.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How the entry points were resolved.
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// The address `dlsym` gives for `symbol` (for checking what `cuGetProcAddress_v2`
    /// resolved against the exported versioned names), or `None`.
    pub fn dlsym_address(&self, symbol: &str) -> Option<usize> {
        let mut name = symbol.as_bytes().to_vec();
        if name.contains(&0) {
            return None;
        }
        name.push(0);
        // SAFETY: the symbol is only read as an address, never called or dereferenced.
        let sym = unsafe { self.lib.get::<*mut c_void>(&name) }.ok()?;
        Some(*sym as usize)
    }

    /// Calls `cuInit(0)`, then returns the driver version and the device count. A
    /// failing `cuInit` is a [`DriverError::Cuda`] (with `CUDA_ERROR_NO_DEVICE` when the
    /// driver finds no GPU); a count of 0 is [`DriverError::NoDevice`].
    pub fn init(&self) -> Result<(i32, u32), DriverError> {
        // SAFETY: cuInit takes flags by value (0 is the only valid value).
        let r = unsafe { (self.api.init)(0) };
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid, writable c_int.
        let vr = unsafe { (self.api.driver_get_version)(&mut version) };
        if vr != sys::CUDA_SUCCESS {
            version = 0;
        }
        if r != sys::CUDA_SUCCESS {
            return Err(self.error(r, "cuInit(0)".into(), None, None).into());
        }
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, writable c_int.
        let r = unsafe { (self.api.device_get_count)(&mut count) };
        if r != sys::CUDA_SUCCESS {
            return Err(self.error(r, "cuDeviceGetCount".into(), None, None).into());
        }
        if count <= 0 {
            return Err(DriverError::NoDevice {
                driver_version: version,
            });
        }
        Ok((version, count as u32))
    }

    /// The name and description of a `CUresult`, from the driver, else the built-in
    /// table.
    pub fn error_text(&self, code: i32) -> (String, String) {
        let (bname, bdesc) = builtin_text(code);
        let name = self.text(self.api.get_error_name, code);
        let desc = self.text(self.api.get_error_string, code);
        (
            name.unwrap_or_else(|| bname.to_string()),
            desc.unwrap_or_else(|| bdesc.to_string()),
        )
    }

    fn text(&self, f: sys::cuGetErrorText, code: i32) -> Option<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is a valid, writable pointer slot; the driver writes a pointer to
        // a static NUL-terminated string or returns an error.
        let r = unsafe { f(code, &mut p) };
        if r != sys::CUDA_SUCCESS || p.is_null() {
            return None;
        }
        // SAFETY: on success the driver wrote a pointer to a NUL-terminated string with
        // static storage; it is copied out at once.
        let s = unsafe { CStr::from_ptr(p) };
        Some(s.to_string_lossy().into_owned())
    }

    /// A [`CudaError`] for `code`, with its name and description.
    pub fn error(
        &self,
        code: i32,
        operation: String,
        device: Option<u32>,
        stream: Option<u64>,
    ) -> CudaError {
        let (name, description) = self.error_text(code);
        let mut e = CudaError::builtin(code, operation);
        e.name = name;
        e.description = description;
        e.device = device;
        e.stream = stream;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_path_prefers_the_option_then_the_environment() {
        let default = LoadOptions::default();
        assert_eq!(
            default.library_path_with(None),
            PathBuf::from("libcuda.so.1")
        );
        assert_eq!(
            default.library_path_with(Some("".into())),
            PathBuf::from("libcuda.so.1")
        );
        assert_eq!(
            default.library_path_with(Some("/opt/x/libcuda.so.1".into())),
            PathBuf::from("/opt/x/libcuda.so.1")
        );
        let explicit = LoadOptions {
            path: Some("/a/libcuda.so".into()),
            ..LoadOptions::default()
        };
        assert_eq!(
            explicit.library_path_with(Some("/opt/x/libcuda.so.1".into())),
            PathBuf::from("/a/libcuda.so")
        );
    }

    #[test]
    fn entry_point_names_are_unique_and_versioned_names_extend_them() {
        for (i, (name, versioned)) in ENTRY_POINTS.iter().enumerate() {
            assert!(versioned.starts_with(name), "{name} / {versioned}");
            assert!(
                ENTRY_POINTS[i + 1..].iter().all(|(n, _)| n != name),
                "{name}"
            );
        }
    }
}
