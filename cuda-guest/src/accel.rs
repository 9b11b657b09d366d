//! Choosing the backend: the NVIDIA driver when it loads and reports a device, else
//! the PTX simulator; the same [`Gpu`] API above either.
//!
//! The choice comes from [`AcceleratorBuilder::backend`] when it is called, else from
//! `VMGPU_CUDA_BACKEND` (`native`, `sim` or `auto`), else `auto`. `auto` loads the
//! native driver (`VMGPU_LIBCUDA` or [`AcceleratorBuilder::libcuda`], else
//! `libcuda.so.1`) and takes it when it reports a device; otherwise it takes the
//! simulator. `native` fails when the driver does not load (never falls back); `sim`
//! never touches the driver. The choice and why are logged (`log::info!`) and kept in
//! [`Accelerator::selection`].
//!
//! ```
//! use cuda_guest::accel::{Accelerator, Choice};
//! use cuda_guest::driver::BackendKind;
//! # fn main() -> Result<(), cuda_guest::driver::DriverError> {
//! let acc = Accelerator::builder().backend(Choice::Sim).build()?;
//! assert_eq!(acc.kind(), BackendKind::Simulator);
//! let gpu = acc.gpu(0)?;
//! let props = gpu.properties()?;
//! assert_eq!((props.compute_capability, props.warp_size), ((8, 0), 32));
//! let a = gpu.htod(&[1.5f32, 2.5])?;
//! let mut b = gpu.alloc_zeroed::<f32>(2)?;
//! b.copy_from_device(&a)?;
//! assert_eq!(b.to_vec()?, [1.5, 2.5]);
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use crate::driver::safe::{DeviceProperties, Gpu};
use crate::driver::{
    Backend, BackendKind, Device, DriverError, LoadOptions, NativeBackend, Result, SimBackend,
};
use crate::sim::SimConfig;

/// The environment variable that picks the backend: `native`, `sim` or `auto`.
pub const BACKEND_ENV: &str = "VMGPU_CUDA_BACKEND";

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Choice {
    /// The native driver when it loads and reports a device, else the simulator.
    #[default]
    Auto,
    /// The native driver, or an error.
    Native,
    /// The simulator.
    Sim,
}

impl std::str::FromStr for Choice {
    type Err = DriverError;
    fn from_str(s: &str) -> Result<Choice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Choice::Auto),
            "native" | "cuda" | "gpu" => Ok(Choice::Native),
            "sim" | "simulator" | "mock" => Ok(Choice::Sim),
            other => Err(DriverError::NoBackend {
                reason: format!("unknown backend {other:?} (expected native, sim or auto)"),
            }),
        }
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Choice::Auto => "auto",
            Choice::Native => "native",
            Choice::Sim => "sim",
        })
    }
}

/// What was chosen and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Selection {
    /// What was asked for.
    pub requested: Choice,
    /// Where the request came from: `builder`, `VMGPU_CUDA_BACKEND` or `default`.
    pub source: &'static str,
    /// The backend in use.
    pub kind: BackendKind,
    /// Why, in words (e.g. the native driver's error when auto fell back).
    pub reason: String,
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (requested {} by {}): {}",
            self.kind, self.requested, self.source, self.reason
        )
    }
}

/// Builds an [`Accelerator`].
#[derive(Debug, Clone, Default)]
pub struct AcceleratorBuilder {
    choice: Option<Choice>,
    libcuda: Option<PathBuf>,
    sim_config: Option<SimConfig>,
    ignore_env: bool,
}

impl AcceleratorBuilder {
    /// Picks the backend (overrides `VMGPU_CUDA_BACKEND`).
    pub fn backend(mut self, choice: Choice) -> Self {
        self.choice = Some(choice);
        self
    }
    /// The driver library to load (overrides `VMGPU_LIBCUDA`).
    pub fn libcuda(mut self, path: impl Into<PathBuf>) -> Self {
        self.libcuda = Some(path.into());
        self
    }
    /// The simulator's settings (threads, budgets, memory size).
    pub fn sim_config(mut self, config: SimConfig) -> Self {
        self.sim_config = Some(config);
        self
    }
    /// Ignores `VMGPU_CUDA_BACKEND` (for tests that must not depend on the environment).
    pub fn ignore_env(mut self) -> Self {
        self.ignore_env = true;
        self
    }

    /// Chooses and starts the backend.
    pub fn build(self) -> Result<Accelerator> {
        let env = if self.ignore_env {
            None
        } else {
            std::env::var(BACKEND_ENV).ok()
        };
        let (requested, source) = match (self.choice, env) {
            (Some(c), _) => (c, "builder"),
            (None, Some(v)) => (v.parse()?, BACKEND_ENV),
            (None, None) => (Choice::Auto, "default"),
        };
        let options = LoadOptions {
            path: self.libcuda.clone(),
            ..LoadOptions::default()
        };
        let sim = |reason: String| -> Result<(Arc<dyn Backend>, String)> {
            let config = self.sim_config.clone().unwrap_or_default();
            let b: Arc<dyn Backend> = Arc::new(SimBackend::new(config)?);
            Ok((b, reason))
        };
        let (backend, reason): (Arc<dyn Backend>, String) = match requested {
            Choice::Sim => sim("the simulator was asked for".into())?,
            Choice::Native => match NativeBackend::with_options(&options) {
                Ok(n) => {
                    let reason = native_reason(&n);
                    (Arc::new(n), reason)
                }
                Err(e) => {
                    return Err(DriverError::NoBackend {
                        reason: format!("the native backend was asked for and failed: {e}"),
                    })
                }
            },
            Choice::Auto => match NativeBackend::with_options(&options) {
                Ok(n) => {
                    let reason = native_reason(&n);
                    (Arc::new(n), reason)
                }
                Err(e) => sim(format!("the native driver is not usable ({e})"))?,
            },
        };
        let selection = Selection {
            requested,
            source,
            kind: backend.kind(),
            reason,
        };
        log::info!("CUDA backend: {selection}");
        Ok(Accelerator { backend, selection })
    }
}

fn native_reason(n: &NativeBackend) -> String {
    let v = n.driver_version().unwrap_or(0);
    format!(
        "the NVIDIA driver loaded from {} (CUDA {}.{}) reports {} device(s)",
        n.driver().path(),
        v / 1000,
        v % 1000 / 10,
        n.device_count().unwrap_or(0)
    )
}

/// A chosen backend and what the choice was.
#[derive(Debug, Clone)]
pub struct Accelerator {
    backend: Arc<dyn Backend>,
    selection: Selection,
}

impl Accelerator {
    /// A builder.
    pub fn builder() -> AcceleratorBuilder {
        AcceleratorBuilder::default()
    }

    /// The backend chosen by `VMGPU_CUDA_BACKEND` (or auto).
    pub fn new() -> Result<Accelerator> {
        Self::builder().build()
    }

    /// An accelerator over a backend made elsewhere.
    pub fn from_backend(backend: Arc<dyn Backend>, reason: impl Into<String>) -> Accelerator {
        let selection = Selection {
            requested: match backend.kind() {
                BackendKind::Native => Choice::Native,
                _ => Choice::Sim,
            },
            source: "builder",
            kind: backend.kind(),
            reason: reason.into(),
        };
        Accelerator { backend, selection }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Native driver or simulator.
    pub fn kind(&self) -> BackendKind {
        self.selection.kind
    }

    /// What was chosen and why.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// How many devices there are.
    pub fn device_count(&self) -> Result<u32> {
        self.backend.device_count()
    }

    /// Device `ordinal` with its primary context retained and current on this thread.
    pub fn gpu(&self, ordinal: u32) -> Result<Gpu> {
        Gpu::new(self.backend.clone(), Device::new(ordinal))
    }

    /// Every device's properties.
    pub fn devices(&self) -> Result<Vec<DeviceProperties>> {
        (0..self.device_count()?)
            .map(|i| self.gpu(i)?.properties())
            .collect()
    }
}
