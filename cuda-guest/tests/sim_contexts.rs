//! CUDA's contexts on the simulator backend: `cuCtxCreate` makes a context of its own
//! (its own memory, modules and streams, current on the calling thread), the device's
//! memory is shared by all its contexts, `cuCtxDestroy` frees everything made in one,
//! and a handle of one context is refused in another.

use cuda_guest::driver::{Backend, Device, SimBackend, StreamFlags};
use cuda_guest::sim::SimConfig;

const VECTOR_ADD: &str = include_str!("../../fixtures/ptx/vector_add.nvrtc.ptx");

#[test]
fn a_created_context_is_separate_and_its_destruction_frees_it() {
    let sim = SimBackend::new(SimConfig {
        memory_limit: 64 << 20,
        ..SimConfig::default()
    })
    .unwrap();
    let dev = Device::new(0);
    let primary = sim.primary_context_retain(dev).unwrap();
    sim.context_set_current(&primary).unwrap();
    let p = sim.mem_alloc(1 << 20).unwrap();
    let in_primary = sim.mem_get_info().unwrap();
    assert_eq!(in_primary.free, (64 << 20) - (1 << 20));

    // cuCtxCreate: a new context, current now.
    let ctx = sim.context_create(dev).unwrap();
    assert_ne!(ctx, primary);
    let q = sim.mem_alloc(8 << 20).unwrap();
    assert_ne!(p, q);
    let m = sim.module_load_ptx(VECTOR_ADD).unwrap();
    let f = sim.module_get_function(&m, "vector_add").unwrap();
    let s = sim.stream_create(StreamFlags::default()).unwrap();
    // The device's memory is shared by its contexts.
    assert_eq!(sim.mem_get_info().unwrap().free, (64 << 20) - (9 << 20));
    // The primary context's memory is not this context's (copies are checked against
    // the current context's allocations).
    // SAFETY: a refused copy touches nothing.
    assert!(unsafe { sim.memcpy_htod(p, &[1; 16]) }.is_err());

    // Back in the primary context: the other context's handles are refused.
    sim.context_set_current(&primary).unwrap();
    assert!(sim.stream_synchronize(&s).is_err());
    assert!(sim.module_get_function(&m, "vector_add").is_err());
    assert!(sim.function_params(&f).is_err());
    // SAFETY: the copy lies inside the primary context's allocation.
    unsafe { sim.memcpy_htod(p, &[1; 16]).unwrap() };

    // Destroying the created context frees what it held; its handle is dead.
    // SAFETY: nothing of the context is used afterwards.
    unsafe { sim.context_destroy(ctx).unwrap() };
    assert_eq!(sim.mem_get_info().unwrap(), in_primary);
    let again = Backend::context_set_current(&sim, &ctx);
    assert_eq!(again.unwrap_err().status().0, 201);
    // The primary context is released, never destroyed.
    // SAFETY: refused before anything happens.
    assert!(unsafe { sim.context_destroy(primary) }.is_err());
    sim.mem_free(p).unwrap();
    sim.primary_context_release(primary).unwrap();
}

#[test]
fn each_thread_has_its_own_current_context() {
    let sim = std::sync::Arc::new(SimBackend::new(SimConfig::default()).unwrap());
    let dev = Device::new(0);
    let a = sim.context_create(dev).unwrap();
    let other = {
        let sim = sim.clone();
        std::thread::spawn(move || {
            // Nothing is current on a new thread.
            assert_eq!(sim.mem_alloc(16).unwrap_err().status().0, 201);
            let b = sim.context_create(dev).unwrap();
            let p = sim.mem_alloc(16).unwrap();
            sim.mem_free(p).unwrap();
            b
        })
        .join()
        .unwrap()
    };
    assert_ne!(a, other);
    // This thread's current context is still `a`.
    let p = sim.mem_alloc(16).unwrap();
    sim.mem_free(p).unwrap();
    sim.context_set_current(&other).unwrap();
    // SAFETY: nothing of either context is used afterwards.
    unsafe {
        sim.context_destroy(other).unwrap();
        sim.context_destroy(a).unwrap();
    }
}
