//! The driver's linker (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`,
//! `cuLinkComplete`, `cuLinkDestroy`) for PTX inputs: the units are checked and joined
//! into one linked image (`vmgpu_ptx::linked`), which `cuModuleLoadData` takes as it
//! takes PTX, on the simulator and forwarded alike; the backend links it when it loads.
//! A fatbin input adds its PTX; a host object (`nvcc -rdc=true -c`) or a library of
//! them (`ar`, such as libcudadevrt.a) adds the PTX of every fatbin inside. Other input
//! kinds (cubin, LTO IR), and objects with machine code only, are what this library
//! cannot run: `CUDA_ERROR_NOT_SUPPORTED`, naming the input.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

use crate::fail::{Fail, R};
use crate::ffi::*;

/// `CU_JIT_INPUT_PTX`.
const CU_JIT_INPUT_PTX: c_int = 1;
/// `CU_JIT_INPUT_FATBINARY`.
const CU_JIT_INPUT_FATBINARY: c_int = 2;
/// `CU_JIT_INPUT_OBJECT`.
const CU_JIT_INPUT_OBJECT: c_int = 3;
/// `CU_JIT_INPUT_LIBRARY`.
const CU_JIT_INPUT_LIBRARY: c_int = 4;
/// `CU_JIT_MAX_REGISTERS`.
const CU_JIT_MAX_REGISTERS: c_int = 0;

/// The names `CUjitInputType` gives its kinds, for messages.
fn input_name(kind: c_int) -> String {
    match kind {
        0 => "CU_JIT_INPUT_CUBIN".into(),
        1 => "CU_JIT_INPUT_PTX".into(),
        2 => "CU_JIT_INPUT_FATBINARY".into(),
        3 => "CU_JIT_INPUT_OBJECT".into(),
        4 => "CU_JIT_INPUT_LIBRARY".into(),
        5 => "CU_JIT_INPUT_NVVM".into(),
        k => format!("input type {k}"),
    }
}

/// One link in progress.
#[derive(Debug)]
pub(crate) struct Linker {
    /// The options given to `cuLinkCreate`, kept for their log buffers (cuda.h: they
    /// stay valid for the life of the link state when output options are used).
    options: (c_uint, *mut c_int, *mut *mut c_void),
    /// The index and value of `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES` at `cuLinkCreate`.
    error_log_size: Option<(usize, usize)>,
    /// `CU_JIT_MAX_REGISTERS` (0: none), carried in the image for the kernels.
    max_registers: Option<u32>,
    units: Vec<(String, String)>,
    /// The image `cuLinkComplete` made (NUL-terminated), owned until `cuLinkDestroy`.
    image: Option<Vec<u8>>,
}

/// The live link states, so that a stale or made-up handle is refused, not followed.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a link; the handle is a `Box<Linker>` given to the program.
///
/// # Safety
/// `options` is `(n, options, values)` with `options` and `values` null or holding `n`
/// entries each, valid for the link state's life (cuda.h).
pub(crate) unsafe fn create(options: (c_uint, *mut c_int, *mut *mut c_void)) -> usize {
    let (n, opts, vals) = options;
    let (error_log_size, max_registers) = if n == 0 || opts.is_null() || vals.is_null() {
        (None, None)
    } else {
        // SAFETY: the caller guarantees `n` entries in each array.
        let (o, v) = unsafe {
            (
                std::slice::from_raw_parts(opts, n as usize),
                std::slice::from_raw_parts(vals, n as usize),
            )
        };
        let size = o
            .iter()
            .position(|x| *x == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            .map(|i| (i, v[i] as usize));
        // An unsigned int in the value slot itself (cuda.h, CUjit_option).
        let regs = o
            .iter()
            .position(|x| *x == CU_JIT_MAX_REGISTERS)
            .map(|i| v[i] as usize as u32)
            .filter(|r| *r > 0);
        (size, regs)
    };
    let l = Box::into_raw(Box::new(Linker {
        options,
        error_log_size,
        max_registers,
        units: vec![],
        image: None,
    })) as usize;
    live().get_or_insert_with(HashSet::new).insert(l);
    l
}

/// Runs `f` on the link state `h` names.
pub(crate) fn with<T>(h: usize, f: impl FnOnce(&mut Linker) -> R<T>) -> R<T> {
    let guard = live();
    if !guard.as_ref().is_some_and(|s| s.contains(&h)) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_HANDLE,
            format!("link state {h:#x} is not a live cuLinkCreate state"),
        ));
    }
    // SAFETY: `h` came from `create` (Box::into_raw) and is still in LIVE, so it has not
    // been freed; the LIVE lock is held, so no other thread uses or frees it meanwhile.
    let l = unsafe { &mut *(h as *mut Linker) };
    f(l)
}

/// Ends a link: the state and its image are freed.
pub(crate) fn destroy(h: usize) -> R<()> {
    let mut guard = live();
    if !guard.as_mut().is_some_and(|s| s.remove(&h)) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_HANDLE,
            format!("link state {h:#x} is not a live cuLinkCreate state"),
        ));
    }
    // SAFETY: `h` came from `create` and was live until just now; removed under the
    // lock, nobody else can reach it any more.
    drop(unsafe { Box::from_raw(h as *mut Linker) });
    Ok(())
}

impl Linker {
    /// Adds one input of `kind`, `data` (its bytes), named `name`.
    pub(crate) fn add(&mut self, kind: c_int, data: &[u8], name: &str) -> R<()> {
        if self.image.is_some() {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!("{name}: the link is complete already"),
            ));
        }
        let from_fatbin;
        let data = match kind {
            CU_JIT_INPUT_PTX => data,
            // A fatbin's PTX links as PTX does.
            CU_JIT_INPUT_FATBINARY => {
                from_fatbin =
                    crate::driver::fatbin_ptx(data, name).inspect_err(|f| self.log(&f.detail))?;
                from_fatbin.as_bytes()
            }
            // A host object (`nvcc -rdc=true -c`) or an archive of them (libcudadevrt.a):
            // the PTX of each fatbin inside, one unit each.
            CU_JIT_INPUT_OBJECT | CU_JIT_INPUT_LIBRARY => {
                let fatbins = vmgpu_ptx::fatbin::embedded(data);
                let units: Vec<String> = fatbins
                    .iter()
                    .filter_map(|f| vmgpu_ptx::fatbin::best_ptx(f).ok())
                    .map(|e| e.ptx)
                    .collect();
                if units.is_empty() {
                    let (code, why) = if fatbins.is_empty() {
                        (
                            CUDA_ERROR_INVALID_IMAGE,
                            format!("{name}: no device code in this {}", input_name(kind)),
                        )
                    } else {
                        (
                            CUDA_ERROR_NO_BINARY_FOR_GPU,
                            format!(
                                "{name}: the device code of this {} is machine code only \
                                 (build it with -gencode arch=compute_XX,code=compute_XX to \
                                 embed PTX)",
                                input_name(kind)
                            ),
                        )
                    };
                    self.log(&why);
                    return Err(Fail::new(code, why));
                }
                for (k, u) in units.iter().enumerate() {
                    self.add_text(&format!("{name}#{k}"), u.as_bytes())?;
                }
                return Ok(());
            }
            _ => {
                let why = format!(
                    "{name}: {} is machine code or IR this library cannot run; only PTX inputs \
                     (alone or in a fatbin) link here",
                    input_name(kind)
                );
                self.log(&why);
                return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, why));
            }
        };
        self.add_text(name, data)
    }

    /// Adds one PTX unit (its text, up to a NUL if there is one), checked now, as the
    /// driver's linker compiles each input as it is added.
    fn add_text(&mut self, name: &str, data: &[u8]) -> R<()> {
        let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
        let text = std::str::from_utf8(&data[..end]).map_err(|e| {
            let why = format!("{name}: the PTX is not UTF-8 text ({e})");
            self.log(&why);
            Fail::new(CUDA_ERROR_INVALID_PTX, why)
        })?;
        // Checked now, as the driver's linker compiles each input as it is added.
        if let Err(e) = vmgpu_ptx::parse(name, text) {
            let why = e.to_string();
            self.log(&why);
            return Err(Fail::new(CUDA_ERROR_INVALID_PTX, why));
        }
        self.units.push((name.to_string(), text.to_string()));
        Ok(())
    }

    /// Links the inputs: the image and its size (the NUL included, as a C string).
    pub(crate) fn complete(&mut self) -> R<(*const c_void, usize)> {
        if self.image.is_none() {
            if self.units.is_empty() {
                return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "nothing to link"));
            }
            let text = vmgpu_ptx::linked::encode_with(
                self.units.iter().map(|(n, t)| (n.as_str(), t.as_str())),
                self.max_registers,
            );
            if let Err(e) = vmgpu_ptx::linked::parse_any("linked image", &text) {
                let why = e.to_string();
                self.log(&why);
                return Err(Fail::new(CUDA_ERROR_INVALID_PTX, why));
            }
            let mut bytes = text.into_bytes();
            bytes.push(0);
            self.image = Some(bytes);
            // Done: the logs the program gave are written (empty), as after a load, so
            // that none is left as it was allocated.
            self.log("");
        }
        let image = self.image.as_ref().expect("made above");
        Ok((image.as_ptr().cast(), image.len()))
    }

    /// Writes `why` into the error log buffer given to `cuLinkCreate` (its whole size
    /// each time: the size option, which a write sets to the bytes written, is put
    /// back to the size given at `cuLinkCreate` first).
    fn log(&self, why: &str) {
        let (n, options, values) = self.options;
        if let Some((i, size)) = self.error_log_size {
            // SAFETY: `values` holds `n > i` entries (checked at create) and stays valid
            // for the link state's life (cuda.h).
            unsafe { *values.add(i) = size as *mut c_void };
        }
        // SAFETY: the arrays are the ones the program gave `cuLinkCreate` with `n`
        // entries each, which cuda.h requires to stay valid for the link state's life.
        unsafe { crate::api::write_jit_logs(n, options, values, why) };
    }
}

/// Reads the file `cuLinkAddFile` names.
pub(crate) fn read_input(path: &str) -> R<Vec<u8>> {
    std::fs::read(path).map_err(|e| Fail::new(CUDA_ERROR_FILE_NOT_FOUND, format!("{path}: {e}")))
}

/// `name` as the program gave it, or a placeholder.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
pub(crate) unsafe fn input_label(name: *const c_char, fallback: &str) -> String {
    if name.is_null() {
        return fallback.to_string();
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}
