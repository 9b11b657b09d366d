//! The driver API's conformance suite (`conformance/mod.rs`) on `NativeBackend` over
//! NVIDIA's driver (`libcuda.so.1`, or `VMGPU_LIBCUDA`), device 0: the reference the
//! other paths are compared with. Ignored without a GPU (`cargo test -p cuda-guest
//! --test conformance_native -- --ignored` on a machine with one).
//!
//! The check that provokes a sticky fault runs in a child process (this binary run
//! again for that one test): on the driver a sticky error poisons the process for good.

#[macro_use]
mod conformance;

conformance_suite!(
    conformance::native,
    conformance::Faults::ChildProcess,
    #[ignore = "needs an NVIDIA GPU"]
);
