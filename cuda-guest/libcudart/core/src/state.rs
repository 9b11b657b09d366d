//! The runtime's state over the driver: the driver (loaded and initialised once), each
//! device's primary context (retained at its first use, as the runtime does), the
//! calling thread's device, last error and launch configurations, and what the
//! program's fatbins registered: kernels and variables by their host address, each
//! fatbin's PTX loaded as a module per device when first needed.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::driver::{self, CUdeviceptr, Driver, Handle};
use crate::errors::*;
use crate::fatbin;

/// A failed call: the `cudaError_t` and why (logged at debug level).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The error.
    pub code: CudaError,
    /// Why.
    pub detail: String,
}

impl Fail {
    /// A failure with `code` and a reason.
    pub fn new(code: CudaError, detail: impl Into<String>) -> Fail {
        Fail {
            code,
            detail: detail.into(),
        }
    }
}

/// Results of the runtime.
pub type R<T> = Result<T, Fail>;

/// Calls a driver entry point: its `CUresult` as the runtime's error, naming the call.
macro_rules! cu {
    ($d:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        // SAFETY: the arguments are what cuda.h's prototype of this entry point takes,
        // prepared by the caller from the program's arguments.
        let r = unsafe { ($d.$name)($($arg),*) };
        if r == 0 {
            Ok(())
        } else {
            Err($crate::state::Fail::new(
                $crate::errors::from_driver(r),
                format!("{} returned {}", stringify!($name), r),
            ))
        }
    }};
}
pub(crate) use cu;

/// The `<<<grid, block, shared, stream>>>` of a launch being made.
#[derive(Debug, Clone, Copy)]
pub struct CallConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: usize,
    pub stream: Handle,
}

thread_local! {
    /// The device of this thread (`cudaSetDevice`).
    static DEVICE: Cell<i32> = const { Cell::new(0) };
    /// The last error of this thread (`cudaGetLastError`).
    static LAST: Cell<CudaError> = const { Cell::new(0) };
    /// Launch configurations pushed by `<<<...>>>`, popped by the kernel's stub.
    static CONFIGS: RefCell<Vec<CallConfig>> = const { RefCell::new(Vec::new()) };
    /// The context this thread's runtime calls use ([`Runtime::bind`]).
    static BOUND: Cell<usize> = const { Cell::new(0) };
}

/// Records `e` as this thread's last error (a sticky error stays).
pub fn set_last(e: CudaError) {
    if e != cudaSuccess {
        LAST.with(|l| {
            if !is_sticky(l.get()) {
                l.set(e)
            }
        });
    }
}

/// This thread's last error, reset to success unless it is sticky.
pub fn take_last() -> CudaError {
    LAST.with(|l| {
        let e = l.get();
        if !is_sticky(e) {
            l.set(cudaSuccess);
        }
        e
    })
}

/// This thread's last error, kept.
pub fn peek_last() -> CudaError {
    LAST.with(|l| l.get())
}

/// This thread's device.
pub fn device() -> i32 {
    DEVICE.with(|d| d.get())
}

/// Sets this thread's device.
pub fn set_device(d: i32) {
    DEVICE.with(|c| c.set(d))
}

/// Pushes a launch configuration (`__cudaPushCallConfiguration`).
pub fn push_config(c: CallConfig) {
    CONFIGS.with(|s| s.borrow_mut().push(c))
}

/// Pops the launch configuration of the launch being made.
pub fn pop_config() -> Option<CallConfig> {
    CONFIGS.with(|s| s.borrow_mut().pop())
}

/// A registered fatbin's device code once read.
#[derive(Debug)]
struct Fatbin {
    image: Option<Result<Image, Fail>>,
}

/// What a module is loaded from: a fatbin's PTX, or relocatable PTX units to link
/// (`-rdc=true`).
#[derive(Debug, Clone)]
enum Image {
    Ptx(CString),
    Units(Vec<CString>),
}

/// A registered kernel or variable: its fatbin and device-side name.
#[derive(Debug, Clone)]
struct Symbol {
    fatbin: usize,
    name: CString,
    size: usize,
}

/// A registered `__managed__` variable: the program's pointer to it
/// (`hostVarPtrAddress`, null until [`Runtime::init_module`] points it at the device's
/// copy) and the variable.
#[derive(Debug, Clone)]
struct Managed {
    pointer: usize,
    sym: Symbol,
    /// The device whose module holds it and its address, once the pointer is set.
    at: Option<(i32, CUdeviceptr)>,
}

#[derive(Debug, Default)]
struct Registry {
    fatbins: Vec<Fatbin>,
    kernels: HashMap<usize, Symbol>,
    /// `__device__`/`__constant__` variables by their host shadow's address, and
    /// `__managed__` ones by their address (what the program's host code names them by
    /// once [`Runtime::init_module`] has run).
    vars: HashMap<usize, Symbol>,
    managed: Vec<Managed>,
    /// (context, fatbin) to its module.
    modules: HashMap<(usize, usize), usize>,
    /// (context, host function) to its `CUfunction`.
    functions: HashMap<(usize, usize), usize>,
    /// Each device's primary context.
    contexts: HashMap<i32, usize>,
}

/// The runtime.
#[derive(Debug)]
pub struct Runtime {
    pub d: Driver,
    pub devices: i32,
    registry: Mutex<Registry>,
}

static RUNTIME: OnceLock<Result<Runtime, Fail>> = OnceLock::new();
/// Registered fatbins: the fatbin, and the relocatable fatbins of a program built with
/// `-rdc=true` (`__cudaPrelinkedFatbins`, whose PTX is linked at load).
static PENDING: Mutex<Vec<(usize, Vec<usize>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The runtime, started at the first call that needs the device (the driver loaded and
/// `cuInit` called once).
pub fn runtime() -> R<&'static Runtime> {
    let r = RUNTIME.get_or_init(|| {
        let d = driver::load().map_err(|e| Fail::new(cudaErrorInsufficientDriver, e))?;
        cu!(d, cuInit(0))?;
        let mut n = 0;
        cu!(d, cuDeviceGetCount(&mut n))?;
        if n == 0 {
            return Err(Fail::new(cudaErrorNoDevice, "the driver has no device"));
        }
        Ok(Runtime {
            d,
            devices: n,
            registry: Mutex::new(Registry::default()),
        })
    });
    r.as_ref().map_err(Fail::clone)
}

/// Registers a fatbin before the runtime starts (`__cudaRegisterFatBinary` runs in the
/// program's constructors): its number.
pub fn register_fatbin(data: usize, relocatable: Vec<usize>) -> usize {
    let mut p = lock(&PENDING);
    p.push((data, relocatable));
    p.len() - 1
}

/// Registers kernel `host` of fatbin `fatbin` with device-side name `name`.
pub fn register_kernel(fatbin: usize, host: usize, name: CString) {
    lock(&REGISTERED).kernels.insert(
        host,
        Symbol {
            fatbin,
            name,
            size: 0,
        },
    );
}

/// Registers variable `host` of fatbin `fatbin` (`size` bytes) named `name`.
pub fn register_var(fatbin: usize, host: usize, name: CString, size: usize) {
    lock(&REGISTERED)
        .vars
        .insert(host, Symbol { fatbin, name, size });
}

/// Registers `__managed__` variable `name` (`size` bytes) of fatbin `fatbin`, whose
/// address the program reads from its pointer at `pointer` (`hostVarPtrAddress`).
pub fn register_managed_var(fatbin: usize, pointer: usize, name: CString, size: usize) {
    lock(&REGISTERED).managed.push(Managed {
        pointer,
        sym: Symbol { fatbin, name, size },
        at: None,
    });
}

/// The names of fatbin `fatbin`'s `__managed__` variables.
pub fn managed_names(fatbin: usize) -> Vec<String> {
    lock(&REGISTERED)
        .managed
        .iter()
        .filter(|m| m.sym.fatbin == fatbin)
        .map(|m| m.sym.name.to_string_lossy().into_owned())
        .collect()
}

/// What the program registered (kept apart from the runtime, which starts later).
static REGISTERED: std::sync::LazyLock<Mutex<Registry>> =
    std::sync::LazyLock::new(|| Mutex::new(Registry::default()));

impl Runtime {
    /// Chooses the context of this thread's runtime calls and makes it current: a
    /// context the program made current through the driver API (`cuCtxCreate`,
    /// `cuCtxSetCurrent`), as CUDA's runtime picks it up; else this thread's device's
    /// primary context (retained at its first use).
    pub fn bind(&self) -> R<()> {
        let primary = self.context_of(device())?;
        let mut cur: Handle = std::ptr::null_mut();
        cu!(self.d, cuCtxGetCurrent(&mut cur))?;
        let own = !cur.is_null()
            && cur != primary
            && !lock(&self.registry)
                .contexts
                .values()
                .any(|&c| c == cur as usize);
        let ctx = if own { cur } else { primary };
        if ctx != cur {
            cu!(self.d, cuCtxSetCurrent(ctx))?;
        }
        BOUND.with(|b| b.set(ctx as usize));
        Ok(())
    }

    /// Makes this thread's device's primary context current, whatever was (`cudaSetDevice`).
    pub fn bind_primary(&self) -> R<()> {
        let primary = self.context_of(device())?;
        cu!(self.d, cuCtxSetCurrent(primary))?;
        BOUND.with(|b| b.set(primary as usize));
        Ok(())
    }

    /// Device `dev`'s primary context (retained at its first use).
    pub fn context_of(&self, dev: i32) -> R<Handle> {
        if !(0..self.devices).contains(&dev) {
            return Err(Fail::new(
                cudaErrorInvalidDevice,
                format!("device {dev} of {}", self.devices),
            ));
        }
        let mut reg = lock(&self.registry);
        if let Some(&c) = reg.contexts.get(&dev) {
            return Ok(c as Handle);
        }
        let mut c: Handle = std::ptr::null_mut();
        cu!(self.d, cuDevicePrimaryCtxRetain(&mut c, dev))?;
        reg.contexts.insert(dev, c as usize);
        Ok(c)
    }

    /// The module of fatbin `fatbin` in the bound context ([`Runtime::bind`]), loaded
    /// when first needed.
    fn module(&self, fatbin: usize) -> R<Handle> {
        let ctx = BOUND.with(|b| b.get());
        let mut reg = lock(&self.registry);
        if let Some(&m) = reg.modules.get(&(ctx, fatbin)) {
            return Ok(m as Handle);
        }
        let image = {
            let (data, relocatable) = lock(&PENDING).get(fatbin).cloned().ok_or_else(|| {
                Fail::new(cudaErrorInvalidResourceHandle, format!("fatbin {fatbin}"))
            })?;
            while reg.fatbins.len() <= fatbin {
                reg.fatbins.push(Fatbin { image: None });
            }
            // The device-side names the program registered for this fatbin, which choose
            // the relocatable units to link.
            let roots: Vec<String> = {
                let r = lock(&REGISTERED);
                r.kernels
                    .values()
                    .chain(r.vars.values())
                    .chain(r.managed.iter().map(|m| &m.sym))
                    .filter(|s| s.fatbin == fatbin)
                    .map(|s| s.name.to_string_lossy().into_owned())
                    .collect()
            };
            reg.fatbins[fatbin]
                .image
                .get_or_insert_with(|| read_image(data, &relocatable, &roots))
                .clone()?
        };
        // A kernel image that does not load fails every launch of its kernels; said
        // once at warning level, since `<<<>>>` launches return no error to check.
        self.load(&image)
            .inspect_err(|e| {
                crate::log::warn_once(
                    &format!("module {fatbin}"),
                    &format!(
                        "the kernels of fatbin {fatbin} cannot be loaded: {} ({})",
                        e.detail, e.code
                    ),
                )
            })
            .inspect(|&m| {
                reg.modules.insert((ctx, fatbin), m as usize);
            })
    }

    /// Loads `image` as a module of the current context: PTX as it is, relocatable units
    /// through the driver's linker.
    fn load(&self, image: &Image) -> R<Handle> {
        let mut m: Handle = std::ptr::null_mut();
        // The driver's error log (CU_JIT_ERROR_LOG_BUFFER and its size), to say why a
        // module does not load or a link fails (the simulator names the PTX line).
        let mut log = vec![0u8; 4096];
        let mut options: [c_int; 2] = [5, 6];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let loaded = match image {
            Image::Ptx(ptx) => cu!(
                self.d,
                cuModuleLoadDataEx(
                    &mut m,
                    ptx.as_ptr().cast(),
                    2,
                    options.as_mut_ptr(),
                    values.as_mut_ptr()
                )
            ),
            Image::Units(units) => {
                let mut state: Handle = std::ptr::null_mut();
                let none = std::ptr::null_mut();
                cu!(
                    self.d,
                    cuLinkCreate_v2(2, options.as_mut_ptr(), values.as_mut_ptr(), &mut state)
                )?;
                let linked = (|| {
                    for (i, u) in units.iter().enumerate() {
                        let name = CString::new(format!("relocatable-{i}.ptx")).expect("no NUL");
                        // CU_JIT_INPUT_PTX (1), with its NUL.
                        cu!(
                            self.d,
                            cuLinkAddData_v2(
                                state,
                                1,
                                u.as_ptr() as *mut c_void,
                                u.as_bytes_with_nul().len(),
                                name.as_ptr(),
                                0,
                                none,
                                none.cast()
                            )
                        )?;
                    }
                    let (mut img, mut size): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
                    cu!(self.d, cuLinkComplete(state, &mut img, &mut size))?;
                    // The image lives until the link state is destroyed, after the load.
                    cu!(self.d, cuModuleLoadData(&mut m, img))
                })();
                let _ = cu!(self.d, cuLinkDestroy(state));
                linked
            }
        };
        loaded.map_err(|mut f| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            if !text.trim().is_empty() {
                f.detail = format!("{}: {}", f.detail, text.trim());
            }
            f
        })?;
        Ok(m)
    }

    /// The `CUfunction` of the kernel whose host stub is `host`, in the bound context.
    pub fn function(&self, host: usize) -> R<Handle> {
        let ctx = BOUND.with(|b| b.get());
        if let Some(&f) = lock(&self.registry).functions.get(&(ctx, host)) {
            return Ok(f as Handle);
        }
        let sym = lock(&REGISTERED)
            .kernels
            .get(&host)
            .cloned()
            .ok_or_else(|| {
                Fail::new(
                    cudaErrorInvalidDeviceFunction,
                    format!("{host:#x} is not a registered kernel"),
                )
            })?;
        let m = self.module(sym.fatbin)?;
        let mut f: Handle = std::ptr::null_mut();
        cu!(self.d, cuModuleGetFunction(&mut f, m, sym.name.as_ptr()))?;
        lock(&self.registry)
            .functions
            .insert((ctx, host), f as usize);
        Ok(f)
    }

    /// The device address and size of the variable whose host shadow is `host`.
    pub fn symbol(&self, host: usize) -> R<(CUdeviceptr, usize)> {
        let sym = lock(&REGISTERED).vars.get(&host).cloned().ok_or_else(|| {
            Fail::new(
                cudaErrorInvalidSymbol,
                format!(
                    "{host:#x} is not a registered __device__, __constant__ or (initialised) \
                     __managed__ variable"
                ),
            )
        })?;
        let m = self.module(sym.fatbin)?;
        let (mut p, mut n) = (0u64, 0usize);
        cu!(
            self.d,
            cuModuleGetGlobal_v2(&mut p, &mut n, m, sym.name.as_ptr())
        )?;
        Ok((p, if n == 0 { sym.size } else { n }))
    }

    /// `__cudaInitModule`: loads fatbin `fatbin`'s module on this thread's device (bound)
    /// and points each of its `__managed__` variables' program pointers at the
    /// variable's device address, which the driver makes the host's too (managed
    /// memory), so the host's accesses reach what kernels use. The variables are then
    /// known by that address (`cudaMemcpyToSymbol`, `cudaGetSymbolAddress`).
    pub fn init_module(&self, fatbin: usize) -> R<()> {
        let m = self.module(fatbin)?;
        let mut reg = lock(&REGISTERED);
        let Registry { managed, vars, .. } = &mut *reg;
        for v in managed
            .iter_mut()
            .filter(|v| v.sym.fatbin == fatbin && v.at.is_none())
        {
            let (mut p, mut n) = (0u64, 0usize);
            cu!(
                self.d,
                cuModuleGetGlobal_v2(&mut p, &mut n, m, v.sym.name.as_ptr())
            )
            .map_err(|f| {
                Fail::new(
                    f.code,
                    format!(
                        "__managed__ variable {}: {}",
                        v.sym.name.to_string_lossy(),
                        f.detail
                    ),
                )
            })?;
            let at = usize::try_from(p).map_err(|_| {
                Fail::new(
                    cudaErrorInvalidSymbol,
                    format!(
                        "__managed__ variable {} is at {p:#x}",
                        v.sym.name.to_string_lossy()
                    ),
                )
            })?;
            // SAFETY: `pointer` is the program's `hostVarPtrAddress` given to
            // `__cudaRegisterManagedVar`: its writable static pointer to the variable.
            unsafe { (v.pointer as *mut *mut c_void).write_unaligned(at as *mut c_void) };
            v.at = Some((device(), p));
            vars.insert(at, v.sym.clone());
        }
        Ok(())
    }

    /// Forgets this thread's device's modules and functions (its primary context was
    /// reset), and points the `__managed__` variables that were in them at fresh copies
    /// (their modules loaded again, the values their initialisers'): nvcc's code
    /// initialises them once, so the runtime must keep the pointers valid.
    pub fn forget_device(&self) -> R<()> {
        let dev = device();
        {
            let mut reg = lock(&self.registry);
            let primary = reg.contexts.get(&dev).copied();
            reg.modules.retain(|(c, _), _| Some(*c) != primary);
            reg.functions.retain(|(c, _), _| Some(*c) != primary);
        }
        let mut fatbins = vec![];
        {
            let mut reg = lock(&REGISTERED);
            let Registry { managed, vars, .. } = &mut *reg;
            for v in managed.iter_mut() {
                if let Some((d, p)) = v.at {
                    if d == dev {
                        vars.remove(&(p as usize));
                        v.at = None;
                        fatbins.push(v.sym.fatbin);
                    }
                }
            }
        }
        fatbins.sort_unstable();
        fatbins.dedup();
        if !fatbins.is_empty() {
            self.bind()?;
        }
        for f in fatbins {
            self.init_module(f)?;
        }
        Ok(())
    }
}

/// The device code of a registered fatbin: its PTX, or, when it has none and the
/// program was built with `-rdc=true`, the PTX units of its relocatable fatbins.
fn read_image(data: usize, relocatable: &[usize], roots: &[String]) -> R<Image> {
    match read_ptx(data) {
        Ok(p) => Ok(Image::Ptx(p)),
        Err(e) if !relocatable.is_empty() && e.code == cudaErrorNoKernelImageForDevice => {
            // The relocatable fatbins holding PTX (libcudadevrt's hold machine code only).
            let units: Vec<CString> = relocatable
                .iter()
                .filter_map(|&r| read_ptx(r).ok())
                .collect();
            if units.is_empty() {
                return Err(e);
            }
            let texts: Vec<&str> = units.iter().map(|u| u.to_str().unwrap_or("")).collect();
            let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
            let keep = crate::units::needed(&texts, &roots);
            Ok(Image::Units(
                keep.into_iter().map(|i| units[i].clone()).collect(),
            ))
        }
        Err(e) => Err(e),
    }
}

/// The PTX of the fatbin whose wrapper or fatbin is at `data`, NUL-terminated.
fn read_ptx(data: usize) -> R<CString> {
    let bad = |e: fatbin::FatbinError| {
        let code = match e {
            // Machine code only, for a real GPU: the runtime's "no image for this device".
            fatbin::FatbinError::NoPtx { .. } | fatbin::FatbinError::Empty => {
                cudaErrorNoKernelImageForDevice
            }
            _ => cudaErrorInvalidKernelImage,
        };
        Fail::new(code, format!("the program's fatbin at {data:#x}: {e}"))
    };
    // SAFETY: `data` is the fatbin nvcc embedded in the program (given to
    // `__cudaRegisterFatBinary`): its 16-byte header is readable, and it is as long as
    // the header says, in the program's read-only data for the process's life.
    let bytes = unsafe { fatbin::in_memory(data as *const u8) }.map_err(bad)?;
    let e = fatbin::best_ptx(bytes).map_err(bad)?;
    CString::new(e.ptx).map_err(|_| {
        Fail::new(
            cudaErrorInvalidPtx,
            format!("the PTX for sm_{} holds a NUL byte", e.sm),
        )
    })
}

/// The relocatable fatbins a version-2 wrapper lists (`-rdc=true`: its third field is
/// the NULL-terminated `__cudaPrelinkedFatbins`, filled before registration).
///
/// # Safety
/// `p` is a `__fatBinC_Wrapper_t` nvcc's registration code passes.
pub unsafe fn relocatable_of(p: *const c_void) -> Vec<usize> {
    if p.is_null() {
        return vec![];
    }
    // SAFETY: a wrapper: magic, version (u32 at 4), fatbin (at 8), list (at 16).
    let (magic, version, list) = unsafe {
        (
            (p as *const u32).read_unaligned(),
            (p as *const u32).add(1).read_unaligned(),
            (p as *const u8)
                .add(16)
                .cast::<*const usize>()
                .read_unaligned(),
        )
    };
    if magic != fatbin::WRAPPER_MAGIC || version != 2 || list.is_null() {
        return vec![];
    }
    let mut out = vec![];
    // A bound against a list that is not NULL-terminated.
    for i in 0..4096 {
        // SAFETY: the NULL-terminated array of the program's link stub.
        let e = unsafe { list.add(i).read_unaligned() };
        if e == 0 {
            break;
        }
        out.push(e);
    }
    out
}

/// The fatbin of a `__fatBinC_Wrapper_t` (or a bare fatbin) at `p`.
///
/// # Safety
/// `p` is what nvcc's registration code passes to `__cudaRegisterFatBinary`.
pub unsafe fn fatbin_of(p: *const c_void) -> R<usize> {
    if p.is_null() {
        return Err(Fail::new(cudaErrorInvalidKernelImage, "a null fatbin"));
    }
    // SAFETY: nvcc's wrapper (16 bytes) or a fatbin, which start with a readable magic.
    unsafe { fatbin::unwrap(p.cast()) }
        .map(|f| f as usize)
        .map_err(|e| {
            Fail::new(
                cudaErrorInvalidKernelImage,
                format!("the fatbin at {p:?}: {e}"),
            )
        })
}
