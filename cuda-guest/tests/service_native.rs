//! The service on the native driver: each guest in a context of its own
//! (`cuCtxCreate_v2`), device memory back to its level once the guests are gone.

mod service_support;

use std::sync::Arc;

use cuda_guest::driver::{Backend, Device, NativeBackend};
use cuda_guest::proto::{DevAddr, HostDest, Request, Status};
use cuda_guest::service::{BackendChoice, ServiceConfig};
use service_support::*;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn two_guests_on_the_gpu_in_their_own_contexts() {
    let be = Arc::new(NativeBackend::new().expect("a CUDA driver and a device"));
    let probe = be.primary_context_retain(Device::new(0)).unwrap();
    be.context_set_current(&probe).unwrap();
    let before = be.mem_get_info().unwrap();
    let shared: Arc<dyn Backend> = be.clone();
    let server = Server::start_with(BackendChoice::Shared(shared), ServiceConfig::default());
    let mut a = server.client();
    let mut b = server.client();
    a.context();
    b.context();
    let fa = {
        let m = a.load(VECTOR_ADD);
        a.function(m, "vector_add")
    };
    let fb = {
        let m = b.load(VECTOR_ADD);
        b.function(m, "vector_add")
    };
    let x: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..4096).map(|i| (i * 3) as f32).collect();
    let c = vector_add(&mut a, &fa, &x, &y);
    assert!(c.iter().enumerate().all(|(i, v)| *v == (4 * i) as f32));
    let c = vector_add(&mut b, &fb, &y, &x);
    assert!(c.iter().enumerate().all(|(i, v)| *v == (4 * i) as f32));
    // B's allocation is not A's.
    let pb = b.alloc(1 << 20);
    let r = a.call(Request::MemcpyDtoH {
        src: DevAddr(pb.0),
        bytes: 16,
        dst: HostDest::Inline,
        stream: None,
    });
    assert_eq!(r.status, Status::ERROR_INVALID_VALUE);
    a.alloc(64 << 20);
    drop(a);
    drop(b);
    server.wait_idle();
    be.context_set_current(&probe).unwrap();
    let after = be.mem_get_info().unwrap();
    let slack = 8 << 20;
    assert!(
        after.free + slack >= before.free,
        "device memory not back: {} free before, {} after",
        before.free,
        after.free
    );
    be.primary_context_release(probe).unwrap();
}
