//! Modules, kernels and launches with arguments checked against the PTX.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use super::memory::{DeviceBuffer, DeviceData, DeviceSlice, DeviceSliceMut, ScalarKind};
use super::{Gpu, GpuFuture, GpuStream};
use crate::driver::{self, DevicePtr, DriverError, LaunchConfig, Result};
use crate::ptx::{self, ScalarType};

#[derive(Debug)]
struct ModuleInner {
    gpu: Gpu,
    module: Option<driver::Module>,
    generation: u64,
    /// Each kernel's parameters from the PTX, when the front end could read it.
    params: Option<HashMap<String, Vec<ptx::Param>>>,
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let Some(m) = self.module.take() else { return };
        if self.gpu.generation() != self.generation || self.gpu.bind().is_err() {
            return;
        }
        // Launches of its kernels may still be queued: let them finish first.
        if let Err(e) = self.gpu.backend().context_synchronize() {
            log::debug!("unloading a module after a failed context: {e}");
        }
        // SAFETY: every `Function` holds this module alive, so none exists any more;
        // the synchronisation above finished their launches.
        if let Err(e) = unsafe { self.gpu.backend().module_unload(m) } {
            log::warn!("unloading a module: {e}");
        }
    }
}

/// A loaded module (PTX JIT compiled by the driver, or decoded by the simulator),
/// unloaded when it and its functions are dropped. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl Module {
    pub(super) fn load(gpu: &Gpu, name: Option<&str>, ptx_text: &str) -> Result<Module> {
        gpu.bind()?;
        let module = match name {
            Some(name) => gpu.backend().module_load_ptx_named(name, ptx_text)?,
            None => gpu.backend().module_load_ptx(ptx_text)?,
        };
        let params = match ptx::linked::parse_any(name.unwrap_or("module.ptx"), ptx_text) {
            Ok(m) => Some(
                m.entries()
                    .map(|f| (f.name.clone(), f.params.clone()))
                    .collect(),
            ),
            Err(e) => {
                log::warn!(
                    "the driver loaded a module that the PTX front end cannot read ({e}); \
                     its kernels' arguments cannot be checked, so only `launch_unchecked` \
                     launches them"
                );
                None
            }
        };
        Ok(Module {
            inner: Arc::new(ModuleInner {
                gpu: gpu.clone(),
                module: Some(module),
                generation: gpu.generation(),
                params,
            }),
        })
    }

    /// The kernel (`.entry`) `name`.
    pub fn function(&self, name: &str) -> Result<Function> {
        let gpu = &self.inner.gpu;
        gpu.enter(self.inner.generation)?;
        let m = self
            .inner
            .module
            .as_ref()
            .ok_or(DriverError::InvalidArgument {
                operation: "Module::function",
                reason: "the module is unloaded".into(),
            })?;
        let function = gpu.backend().module_get_function(m, name)?;
        let params = self
            .inner
            .params
            .as_ref()
            .and_then(|p| p.get(name))
            .cloned();
        Ok(Function {
            module: self.clone(),
            function,
            name: name.into(),
            params,
        })
    }

    /// The kernels' names, as the PTX front end read them (`None` when it could not).
    pub fn kernel_names(&self) -> Option<Vec<String>> {
        self.inner.params.as_ref().map(|p| {
            let mut v: Vec<String> = p.keys().cloned().collect();
            v.sort();
            v
        })
    }
}

/// A kernel of a [`Module`] (which it keeps loaded).
#[derive(Debug, Clone)]
pub struct Function {
    module: Module,
    function: driver::Function,
    name: String,
    params: Option<Vec<ptx::Param>>,
}

/// How a [`KernelArg`] was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ArgKind {
    /// A device address (a buffer, a view, or [`KernelArg::pointer`]).
    Pointer,
    /// An integer scalar.
    Int,
    /// A floating-point scalar.
    Float,
    /// Raw bytes (a by-value struct); only the size is checked.
    Bytes,
}

/// One kernel argument: its bytes and what it is, built safely from a buffer, a view or
/// a scalar (`KernelArg::from(&buf)`, `KernelArg::from(2.0f32)`, or the
/// [`kernel_args!`](crate::kernel_args) macro), and checked against the kernel's PTX
/// parameter before the launch.
#[derive(Debug, Clone)]
pub struct KernelArg<'a> {
    bytes: ArgBytes,
    kind: ArgKind,
    what: &'static str,
    _borrow: PhantomData<&'a ()>,
}

/// An argument's bytes: inline up to 16 (every scalar and pointer, without a heap
/// allocation on the launch path), else on the heap. 8-byte aligned either way.
#[derive(Debug, Clone)]
enum ArgBytes {
    Inline { words: [u64; 2], len: u8 },
    Heap(Vec<u8>),
}

impl ArgBytes {
    fn new(b: &[u8]) -> ArgBytes {
        if b.len() <= 16 {
            let mut words = [0u64; 2];
            for (i, chunk) in b.chunks(8).enumerate() {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                words[i] = u64::from_ne_bytes(w);
            }
            ArgBytes::Inline {
                words,
                len: b.len() as u8,
            }
        } else {
            ArgBytes::Heap(b.to_vec())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            ArgBytes::Inline { words, len } => {
                // SAFETY: `words` is 16 initialised bytes; `len` <= 16; u8 has no
                // alignment requirement; the borrow of `self` covers the slice.
                let all = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 16) };
                &all[..(*len as usize).min(16)]
            }
            ArgBytes::Heap(v) => v,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

impl KernelArg<'static> {
    /// A raw device address (for memory not owned by a [`DeviceBuffer`]).
    pub fn pointer(ptr: DevicePtr) -> KernelArg<'static> {
        KernelArg {
            bytes: ArgBytes::new(&ptr.0.to_le_bytes()),
            kind: ArgKind::Pointer,
            what: "pointer",
            _borrow: PhantomData,
        }
    }
    /// Raw bytes, e.g. a by-value struct (`.param .align 8 .b8 s[16]`).
    pub fn bytes(bytes: Vec<u8>) -> KernelArg<'static> {
        KernelArg {
            bytes: ArgBytes::new(&bytes),
            kind: ArgKind::Bytes,
            what: "bytes",
            _borrow: PhantomData,
        }
    }
    /// A scalar of plain data.
    pub fn scalar<T: DeviceData>(value: T) -> KernelArg<'static> {
        KernelArg {
            bytes: ArgBytes::new(super::memory::as_bytes(std::slice::from_ref(&value))),
            kind: match T::KIND {
                ScalarKind::Int => ArgKind::Int,
                ScalarKind::Float => ArgKind::Float,
                _ => ArgKind::Bytes,
            },
            what: T::NAME,
            _borrow: PhantomData,
        }
    }
}

impl KernelArg<'_> {
    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }
    /// What it is.
    pub fn kind(&self) -> ArgKind {
        self.kind
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => {$(
        impl From<$t> for KernelArg<'static> {
            fn from(v: $t) -> Self {
                KernelArg::scalar(v)
            }
        }
    )*};
}
scalar_args!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

fn pointer_arg<'a>(ptr: DevicePtr) -> KernelArg<'a> {
    KernelArg {
        bytes: ArgBytes::new(&ptr.0.to_le_bytes()),
        kind: ArgKind::Pointer,
        what: "device buffer",
        _borrow: PhantomData,
    }
}

impl<'a, T: DeviceData> From<&'a DeviceBuffer<T>> for KernelArg<'a> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        pointer_arg(b.ptr())
    }
}
impl<'a, T: DeviceData> From<&'a mut DeviceBuffer<T>> for KernelArg<'a> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        pointer_arg(b.ptr())
    }
}
impl<'a, T: DeviceData> From<&'a DeviceSlice<'_, T>> for KernelArg<'a> {
    fn from(b: &'a DeviceSlice<'_, T>) -> Self {
        pointer_arg(b.ptr())
    }
}
impl<'a, T: DeviceData> From<DeviceSlice<'a, T>> for KernelArg<'a> {
    fn from(b: DeviceSlice<'a, T>) -> Self {
        pointer_arg(b.ptr())
    }
}
impl<'a, T: DeviceData> From<DeviceSliceMut<'a, T>> for KernelArg<'a> {
    fn from(b: DeviceSliceMut<'a, T>) -> Self {
        pointer_arg(b.ptr())
    }
}
impl<'a, T: DeviceData> From<&'a mut DeviceSliceMut<'_, T>> for KernelArg<'a> {
    fn from(b: &'a mut DeviceSliceMut<'_, T>) -> Self {
        pointer_arg(b.ptr())
    }
}

/// Builds an array of [`KernelArg`]s: `kernel_args![&x, &mut y, 2.0f32, n]`.
#[macro_export]
macro_rules! kernel_args {
    ($($a:expr),* $(,)?) => {
        [$($crate::driver::safe::KernelArg::from($a)),*]
    };
}

/// Checks `args` against `params` (from the PTX of kernel `kernel`): count, size and
/// kind (a pointer for a 64-bit integer parameter, a float for a float parameter, an
/// integer for an integer one; raw bytes by size only).
pub fn check_args(kernel: &str, params: &[ptx::Param], args: &[KernelArg<'_>]) -> Result<()> {
    let bad = |index: usize, reason: String| DriverError::BadKernelArgument {
        kernel: kernel.into(),
        index,
        param: params.get(index).map_or("-".into(), |p| p.name.clone()),
        reason,
    };
    if args.len() != params.len() {
        let index = args.len().min(params.len());
        return Err(bad(
            index,
            format!(
                "the kernel takes {} parameter(s), {} argument(s) given",
                params.len(),
                args.len()
            ),
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let ty = p.ty;
        let float = matches!(
            ty,
            ScalarType::F16
                | ScalarType::Bf16
                | ScalarType::F32
                | ScalarType::F64
                | ScalarType::F16x2
        );
        let untyped = matches!(
            ty,
            ScalarType::B8 | ScalarType::B16 | ScalarType::B32 | ScalarType::B64 | ScalarType::B128
        );
        let scalar = p.array.is_none();
        let kind_ok = match a.kind {
            ArgKind::Bytes => true,
            ArgKind::Pointer => {
                scalar && matches!(ty, ScalarType::U64 | ScalarType::S64 | ScalarType::B64)
            }
            ArgKind::Float => scalar && (float || untyped),
            ArgKind::Int => scalar && !float && ty != ScalarType::Pred,
        };
        let describe = || {
            format!(
                ".{}{} ({} bytes)",
                ty.name(),
                p.array.map(|n| format!("[{n}]")).unwrap_or_default(),
                p.size
            )
        };
        if !kind_ok {
            return Err(bad(
                i,
                format!("the parameter is {}, the argument a {}", describe(), a.what),
            ));
        }
        if a.bytes.len() != p.size as usize {
            return Err(bad(
                i,
                format!(
                    "the parameter is {}, the argument a {} of {} bytes",
                    describe(),
                    a.what,
                    a.bytes.len()
                ),
            ));
        }
    }
    Ok(())
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its parameters from the PTX (`None` when the front end could not read the module).
    pub fn params(&self) -> Option<&[ptx::Param]> {
        self.params.as_deref()
    }

    /// The module it belongs to.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// Lets launches use up to `bytes` of dynamic shared memory (beyond the default
    /// 48 KiB in all, up to the device's opt-in limit).
    pub fn set_max_dynamic_shared_memory(&self, bytes: u32) -> Result<()> {
        let gpu = &self.module.inner.gpu;
        gpu.enter(self.module.inner.generation)?;
        gpu.backend()
            .function_set_max_dynamic_shared(&self.function, bytes)
    }

    /// Checks `args` against the kernel's PTX parameters without launching.
    pub fn check_args(&self, args: &[KernelArg<'_>]) -> Result<()> {
        match &self.params {
            Some(p) => check_args(&self.name, p, args),
            None => Err(DriverError::InvalidArgument {
                operation: "Function::check_args",
                reason: format!(
                    "the parameters of kernel `{}` are unknown (the PTX front end could not \
                     read its module); use launch_unchecked",
                    self.name
                ),
            }),
        }
    }

    /// Launches the kernel on `stream` after checking `args` against its PTX parameters
    /// (a wrong count, size or kind is [`DriverError::BadKernelArgument`], and nothing
    /// is launched). Errors of the kernel itself come back at the next synchronising
    /// call.
    ///
    /// # Safety
    /// The kernel's code is arbitrary: the caller guarantees that every memory it
    /// reaches is device memory, or host memory (mapped through unified addressing) that
    /// no Rust reference reads or writes while it runs. A kernel that only accesses its
    /// buffer arguments (even out of their bounds: that is a device fault, reported as
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`) meets this.
    pub unsafe fn launch(
        &self,
        stream: &GpuStream,
        config: LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        self.check_args(args)?;
        // SAFETY: the arguments match the parameters (checked above); the rest is the
        // caller's guarantee.
        unsafe { self.launch_unchecked(stream, config, args) }
    }

    /// [`Function::launch`] that returns a future completing when the stream has run
    /// the kernel (with its error, if it failed). A kernel that faults before the
    /// completion event is recorded makes this call itself return the (sticky) error.
    ///
    /// # Safety
    /// As for [`Function::launch`].
    pub unsafe fn launch_future(
        &self,
        stream: &GpuStream,
        config: LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<GpuFuture<()>> {
        // SAFETY: the caller's guarantees are passed on.
        unsafe { self.launch(stream, config, args) }?;
        match stream.done() {
            // The kernel is queued; a sticky fault that shows before its completion
            // could be recorded (a kernel that faults at once) is the kernel's own
            // failure: it fails the future, not the call.
            Err(e)
                if e.code()
                    .is_some_and(|c| crate::proto::Status(c as u32).is_sticky()) =>
            {
                Ok(super::future::failed(e))
            }
            r => r,
        }
    }

    /// Launches without checking the arguments against the PTX.
    ///
    /// # Safety
    /// As for [`Function::launch`], and `args` matches the kernel's parameters in number
    /// and sizes.
    pub unsafe fn launch_unchecked(
        &self,
        stream: &GpuStream,
        config: LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let gpu = &self.module.inner.gpu;
        gpu.enter(self.module.inner.generation)?;
        stream.check()?;
        let mut inline: [&[u8]; 16] = [&[]; 16];
        let heap: Vec<&[u8]>;
        let raw: &[&[u8]] = if args.len() <= inline.len() {
            for (slot, a) in inline.iter_mut().zip(args) {
                *slot = a.bytes.as_slice();
            }
            &inline[..args.len()]
        } else {
            heap = args.iter().map(|a| a.bytes.as_slice()).collect();
            &heap
        };
        // SAFETY: the function is alive (this value keeps its module loaded and the
        // generation check above refuses it after a reset); the caller guarantees the
        // arguments and what the kernel reaches; module unloading synchronises first.
        unsafe {
            gpu.backend()
                .launch(&self.function, &config, stream.raw(), raw)
        }
    }
}

impl Gpu {
    /// Loads a module from PTX text. A failure is the driver's (or simulator's) error
    /// with the JIT log ([`crate::driver::CudaError::jit_log`]).
    pub fn load_ptx(&self, ptx_text: &str) -> Result<Module> {
        Module::load(self, None, ptx_text)
    }

    /// [`Gpu::load_ptx`] under `name` (e.g. the file the text came from): the
    /// simulator's JIT log and fault reports say `name:LINE` instead of `moduleN.ptx`
    /// ([`crate::driver::Backend::module_load_ptx_named`]).
    pub fn load_ptx_named(&self, name: &str, ptx_text: &str) -> Result<Module> {
        Module::load(self, Some(name), ptx_text)
    }

    /// Loads a module from a PTX file.
    pub fn load_ptx_file(&self, path: impl AsRef<std::path::Path>) -> Result<Module> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| DriverError::InvalidArgument {
            operation: "Gpu::load_ptx_file",
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        self.load_ptx_named(&path.display().to_string(), &text)
    }

    /// Compiles CUDA C++ `source` with NVRTC (loaded at run time, see
    /// [`crate::driver::nvrtc`]) for this device's compute capability and loads it.
    /// Without NVRTC this is the loader's error; a compilation error carries NVRTC's log.
    pub fn compile_cuda(&self, source: &str, name: &str, options: &[&str]) -> Result<Module> {
        let nvrtc = driver::nvrtc::Nvrtc::load()?;
        let (major, minor) = self.backend().compute_capability(self.device())?;
        let arch = format!("--gpu-architecture=compute_{major}{minor}");
        let mut opts: Vec<&str> = Vec::with_capacity(options.len() + 1);
        if !options
            .iter()
            .any(|o| o.starts_with("--gpu-architecture") || o.starts_with("-arch"))
        {
            opts.push(&arch);
        }
        opts.extend_from_slice(options);
        let compiled = nvrtc.compile(source, name, &opts)?;
        self.load_ptx(&compiled.ptx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<ptx::Param> {
        let m = ptx::parse(
            "t.ptx",
            ".version 7.0\n.target sm_80\n.address_size 64\n\
             .visible .entry k(.param .align 8 .b8 s[24], .param .f64 d, .param .u32 n, \
             .param .u64 p, .param .b32 raw)\n{ ret; }\n",
        )
        .unwrap();
        m.entry("k").unwrap().params.clone()
    }

    #[test]
    fn arguments_are_checked_by_count_size_and_kind() {
        let p = params();
        let ok = [
            KernelArg::bytes(vec![1; 24]),
            KernelArg::from(2.5f64),
            KernelArg::from(3u32),
            KernelArg::pointer(DevicePtr(0x1000)),
            KernelArg::from(1.0f32),
        ];
        check_args("k", &p, &ok).unwrap();
        assert_eq!(ok[0].as_bytes(), [1; 24]);
        assert_eq!(ok[1].as_bytes(), 2.5f64.to_le_bytes());
        assert_eq!(ok[3].as_bytes(), 0x1000u64.to_le_bytes());
        let cases: [(usize, KernelArg<'static>, &str); 6] = [
            (0, KernelArg::bytes(vec![0; 23]), "23 bytes"),
            (
                1,
                KernelArg::from(2.5f32),
                ".f64 (8 bytes), the argument a f32",
            ),
            (1, KernelArg::from(7i64), "the argument a i64"),
            (
                2,
                KernelArg::pointer(DevicePtr(1)),
                ".u32 (4 bytes), the argument a pointer",
            ),
            (3, KernelArg::from(1.0f64), "the argument a f64"),
            (4, KernelArg::from(1u16), "of 2 bytes"),
        ];
        for (index, arg, what) in cases {
            let mut args = ok.clone();
            args[index] = arg;
            let err = check_args("k", &p, &args).unwrap_err();
            match &err {
                DriverError::BadKernelArgument {
                    index: i, param, ..
                } => {
                    assert_eq!(*i, index, "{err}");
                    assert_eq!(param, &p[index].name);
                }
                other => panic!("{other}"),
            }
            assert!(err.to_string().contains(what), "{err}");
        }
        let err = check_args("k", &p, &ok[..2]).unwrap_err();
        assert!(
            err.to_string()
                .contains("takes 5 parameter(s), 2 argument(s)"),
            "{err}"
        );
    }
}
