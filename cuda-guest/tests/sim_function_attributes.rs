//! The simulator's answers to `cuFuncGetAttribute`/`cuFuncSetAttribute` and
//! `cuModuleGetGlobal` through the `Backend` trait: every attribute has an answer that
//! follows from the kernel's PTX, and a module's variables are found by name.

use cuda_guest::driver::{Backend, Device, FunctionAttribute, SimBackend};
use cuda_guest::sim::SimConfig;

const PTX: &str = ".version 7.8\n.target sm_86\n.address_size 64\n\n\
.visible .global .align 4 .u32 counter[3] = {7, 8, 9};\n\
.visible .const .align 8 .f64 coeffs[4];\n\n\
.visible .entry tiled(.param .u64 out)\n{\n\t.reg .b32 %r<4>;\n\t.reg .b64 %rd<4>;\n\
\t.shared .align 4 .b8 tile[1024];\n\t.local .align 4 .b8 scratch[64];\n\
\tld.param.u64 %rd1, [out];\n\tmov.u32 %r1, 5;\n\tst.global.u32 [%rd1], %r1;\n\tret;\n}\n";

fn backend() -> SimBackend {
    let sim = SimBackend::new(SimConfig::default()).unwrap();
    let ctx = sim.primary_context_retain(Device::new(0)).unwrap();
    sim.context_set_current(&ctx).unwrap();
    sim
}

fn status(e: cuda_guest::driver::DriverError) -> u32 {
    e.status().0
}

#[test]
fn every_function_attribute_has_an_answer() {
    let sim = backend();
    let m = sim.module_load_ptx(PTX).unwrap();
    let f = sim.module_get_function(&m, "tiled").unwrap();
    use FunctionAttribute as F;
    let get = |a| sim.function_attribute(&f, a).unwrap();
    assert_eq!(get(F::MaxThreadsPerBlock), 1024);
    assert_eq!(get(F::SharedSizeBytes), 1024);
    assert_eq!(get(F::ConstSizeBytes), 32);
    assert_eq!(get(F::LocalSizeBytes), 64);
    assert!((1..=255).contains(&get(F::NumRegs)));
    assert_eq!(
        get(F::PtxVersion),
        86,
        "the virtual architecture of .target"
    );
    assert_eq!(get(F::BinaryVersion), 80, "the virtual device is an sm_80");
    assert_eq!(get(F::MaxDynamicSharedSizeBytes), 48 * 1024 - 1024);
    assert_eq!(get(F::PreferredSharedMemoryCarveout), -1);
    for a in FunctionAttribute::ALL {
        sim.function_attribute(&f, *a)
            .unwrap_or_else(|e| panic!("{a:?}: {e}"));
    }
    // Settable ones, within their bounds.
    sim.function_set_attribute(&f, F::MaxDynamicSharedSizeBytes, 100_000)
        .unwrap();
    assert_eq!(get(F::MaxDynamicSharedSizeBytes), 100_000);
    sim.function_set_attribute(&f, F::PreferredSharedMemoryCarveout, 50)
        .unwrap();
    assert_eq!(get(F::PreferredSharedMemoryCarveout), 50);
    for (a, v) in [
        (F::MaxDynamicSharedSizeBytes, 1 << 30),
        (F::MaxDynamicSharedSizeBytes, -1),
        (F::PreferredSharedMemoryCarveout, 101),
        (F::NumRegs, 32),
    ] {
        let e = sim.function_set_attribute(&f, a, v).unwrap_err();
        assert_eq!(status(e), 1, "{a:?} = {v}");
    }
}

#[test]
fn module_variables_by_name() {
    let sim = backend();
    let m = sim.module_load_ptx(PTX).unwrap();
    let (p, size) = sim.module_get_global(&m, "counter").unwrap();
    assert_eq!(size, 12);
    let mut back = [0u8; 12];
    // SAFETY: `p..p+12` is the module's variable, device memory of the simulator.
    unsafe { sim.memcpy_dtoh(&mut back, p).unwrap() };
    assert_eq!(back, [7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0]);
    let (c, csize) = sim.module_get_global(&m, "coeffs").unwrap();
    assert_eq!(csize, 32);
    assert_ne!(c, p);
    // A variable is reached by copies, but is no allocation to free.
    assert_eq!(status(sim.mem_free(p).unwrap_err()), 1);
    let e = sim.module_get_global(&m, "tiled").unwrap_err();
    assert_eq!(
        status(e),
        500,
        "a kernel is no variable: CUDA_ERROR_NOT_FOUND"
    );
    let e = sim.module_get_global(&m, "nothing").unwrap_err();
    assert_eq!(status(e), 500);
    // SAFETY: nothing of the module is in use.
    unsafe { sim.module_unload(m).unwrap() };
    // Unloaded, its variables are gone.
    // SAFETY: a copy into a freed range is refused before it is made.
    let e = unsafe { sim.memcpy_htod(p, &[0; 4]).unwrap_err() };
    assert_eq!(status(e), 1);
}
