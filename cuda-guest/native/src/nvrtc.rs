//! NVRTC (CUDA C++ to PTX), loaded at run time like the driver: `VMGPU_LIBNVRTC`, else
//! `libnvrtc.so.13`, `libnvrtc.so.12`, `libnvrtc.so`. Needs no GPU. A missing library
//! or entry point is a [`DriverError`]; a failed compilation carries NVRTC's log.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;

use vmgpu_cuda_api::error::{DriverError, LIBRARY_NVRTC};

/// The environment variable naming the NVRTC library to load.
pub const LIBNVRTC_ENV: &str = "VMGPU_LIBNVRTC";
/// The names tried, in order, when [`LIBNVRTC_ENV`] is unset.
pub const DEFAULT_LIBNVRTC: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

type NvrtcProgram = *mut std::ffi::c_void;
type Version = unsafe extern "C" fn(major: *mut c_int, minor: *mut c_int) -> c_int;
type GetErrorString = unsafe extern "C" fn(result: c_int) -> *const c_char;
type CreateProgram = unsafe extern "C" fn(
    prog: *mut NvrtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> c_int;
type CompileProgram = unsafe extern "C" fn(
    prog: NvrtcProgram,
    num_options: c_int,
    options: *const *const c_char,
) -> c_int;
type GetSize = unsafe extern "C" fn(prog: NvrtcProgram, size: *mut usize) -> c_int;
type GetText = unsafe extern "C" fn(prog: NvrtcProgram, out: *mut c_char) -> c_int;
type DestroyProgram = unsafe extern "C" fn(prog: *mut NvrtcProgram) -> c_int;

#[derive(Debug, Clone, Copy)]
struct Api {
    version: Version,
    get_error_string: GetErrorString,
    create_program: CreateProgram,
    compile_program: CompileProgram,
    get_ptx_size: GetSize,
    get_ptx: GetText,
    get_log_size: GetSize,
    get_log: GetText,
    destroy_program: DestroyProgram,
}

/// The NVRTC library, loaded.
#[derive(Debug)]
pub struct Nvrtc {
    api: Api,
    path: String,
    version: (i32, i32),
    // Declared last: unloaded after nothing can call through `api`.
    _lib: libloading::Library,
}

/// The output of a successful compilation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// NVRTC's log (warnings), often empty.
    pub log: String,
}

impl Nvrtc {
    /// Loads NVRTC from `VMGPU_LIBNVRTC`, else the first of [`DEFAULT_LIBNVRTC`] found.
    pub fn load() -> Result<Nvrtc, DriverError> {
        match std::env::var_os(LIBNVRTC_ENV) {
            Some(p) if !p.is_empty() => Self::load_from(&[PathBuf::from(p)]),
            _ => Self::load_from(
                &DEFAULT_LIBNVRTC
                    .iter()
                    .map(PathBuf::from)
                    .collect::<Vec<_>>(),
            ),
        }
    }

    /// Loads NVRTC from the first of `candidates` that opens.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Nvrtc, DriverError> {
        let mut failures = Vec::new();
        for candidate in candidates {
            // SAFETY: opening a shared library runs its initialisers; NVRTC is a vendor
            // library meant to be dlopened, with no preconditions on the caller.
            match unsafe { libloading::Library::new(candidate) } {
                Ok(lib) => return Self::from_library(lib, candidate.display().to_string()),
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(DriverError::LibraryNotFound {
            library: LIBRARY_NVRTC,
            path: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            reason: failures.join("; "),
            hint: "NVRTC ships in the nvidia-cuda-nvrtc wheel and the CUDA toolkit; point \
                   VMGPU_LIBNVRTC at its libnvrtc.so",
        })
    }

    fn from_library(lib: libloading::Library, path: String) -> Result<Nvrtc, DriverError> {
        fn get<T: Copy>(
            lib: &libloading::Library,
            path: &str,
            name: &'static str,
        ) -> Result<T, DriverError> {
            let mut sym = name.as_bytes().to_vec();
            sym.push(0);
            // SAFETY: each `T` used below is the C prototype of the NVRTC entry point
            // `name` (nvrtc.h); the pointer stays valid while the library, held by the
            // returned `Nvrtc`, is loaded.
            unsafe { lib.get::<T>(&sym) }
                .map(|s| *s)
                .map_err(|e| DriverError::SymbolMissing {
                    library: LIBRARY_NVRTC,
                    path: path.to_string(),
                    symbol: name.to_string(),
                    reason: e.to_string(),
                })
        }
        let api = Api {
            version: get(&lib, &path, "nvrtcVersion")?,
            get_error_string: get(&lib, &path, "nvrtcGetErrorString")?,
            create_program: get(&lib, &path, "nvrtcCreateProgram")?,
            compile_program: get(&lib, &path, "nvrtcCompileProgram")?,
            get_ptx_size: get(&lib, &path, "nvrtcGetPTXSize")?,
            get_ptx: get(&lib, &path, "nvrtcGetPTX")?,
            get_log_size: get(&lib, &path, "nvrtcGetProgramLogSize")?,
            get_log: get(&lib, &path, "nvrtcGetProgramLog")?,
            destroy_program: get(&lib, &path, "nvrtcDestroyProgram")?,
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both are valid, writable c_int.
        let r = unsafe { (api.version)(&mut major, &mut minor) };
        let nvrtc = Nvrtc {
            api,
            path,
            version: (major, minor),
            _lib: lib,
        };
        nvrtc.check(r, "nvrtcVersion", None)?;
        log::debug!("NVRTC {major}.{minor} loaded from {}", nvrtc.path);
        Ok(nvrtc)
    }

    /// NVRTC's version (major, minor).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The library's path or name as opened.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn error_name(&self, code: c_int) -> String {
        // SAFETY: nvrtcGetErrorString takes any value and returns a pointer to a static
        // NUL-terminated string (or null).
        let p = unsafe { (self.api.get_error_string)(code) };
        if p.is_null() {
            return format!("NVRTC error {code}");
        }
        // SAFETY: non-null: a static NUL-terminated string, copied at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(
        &self,
        r: c_int,
        operation: &'static str,
        log: Option<String>,
    ) -> Result<(), DriverError> {
        if r == 0 {
            Ok(())
        } else {
            Err(DriverError::Nvrtc {
                operation,
                code: r,
                name: self.error_name(r),
                log,
            })
        }
    }

    /// Compiles CUDA C++ `source` (named `name` in messages) to PTX with NVRTC
    /// `options` (e.g. `--gpu-architecture=compute_90`). A compilation error is
    /// [`DriverError::Nvrtc`] with the log.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[&str],
    ) -> Result<Compiled, DriverError> {
        let nul = |what: &'static str| DriverError::InvalidArgument {
            operation: "nvrtcCreateProgram",
            reason: format!("the {what} holds a NUL byte"),
        };
        let src = CString::new(source).map_err(|_| nul("source"))?;
        let cname = CString::new(name).map_err(|_| nul("program name"))?;
        let opts = options
            .iter()
            .map(|o| CString::new(*o))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| nul("option"))?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let num_options =
            c_int::try_from(opt_ptrs.len()).map_err(|_| DriverError::InvalidArgument {
                operation: "nvrtcCompileProgram",
                reason: "too many options".into(),
            })?;
        let mut prog: NvrtcProgram = std::ptr::null_mut();
        // SAFETY: `src` and `cname` are NUL-terminated and alive for the call; no
        // headers (count 0, null arrays); `prog` is a valid slot.
        let r = unsafe {
            (self.api.create_program)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check(r, "nvrtcCreateProgram", None)?;
        let program = Program { nvrtc: self, prog };
        // SAFETY: `prog` is a live program; `opt_ptrs` holds `num_options` pointers to
        // NUL-terminated strings (`opts`) alive for the call.
        let r = unsafe { (self.api.compile_program)(program.prog, num_options, opt_ptrs.as_ptr()) };
        let log = program.text(self.api.get_log_size, self.api.get_log)?;
        self.check(r, "nvrtcCompileProgram", Some(log.clone()))?;
        let ptx = program.text(self.api.get_ptx_size, self.api.get_ptx)?;
        Ok(Compiled { ptx, log })
    }
}

/// A live NVRTC program, destroyed on drop.
struct Program<'a> {
    nvrtc: &'a Nvrtc,
    prog: NvrtcProgram,
}

impl Program<'_> {
    fn text(&self, size: GetSize, get: GetText) -> Result<String, DriverError> {
        let mut n: usize = 0;
        // SAFETY: `prog` is live; `n` is a valid slot.
        let r = unsafe { size(self.prog, &mut n) };
        self.nvrtc.check(r, "nvrtcGet*Size", None)?;
        let mut buf = vec![0u8; n.max(1)];
        // SAFETY: `buf` holds at least the `n` bytes (terminating NUL included) NVRTC
        // said it writes.
        let r = unsafe { get(self.prog, buf.as_mut_ptr().cast()) };
        self.nvrtc.check(r, "nvrtcGetPTX/ProgramLog", None)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` was created by nvrtcCreateProgram and is destroyed once.
        let r = unsafe { (self.nvrtc.api.destroy_program)(&mut self.prog) };
        if r != 0 {
            log::warn!("nvrtcDestroyProgram: {}", self.nvrtc.error_name(r));
        }
    }
}
