//! Fuzzes the service's dispatcher through the embedding API, on the simulator, with
//! structured inputs: each input is a header and records of fuzzer-chosen requests,
//! driven by `harness/dispatch.rs` (shared with the test `dispatch_fuzz_seeds` of
//! `cuda-guest/tests/service_embed.rs`), which sets the session up (hello, `Init`, a
//! current primary context), draws handles and addresses from earlier replies, and
//! checks the session's invariants after every request (see that file).
#![no_main]

use std::sync::OnceLock;

use cuda_guest::service::Service;
use libfuzzer_sys::fuzz_target;
use vm_memory::GuestMemoryMmap;

#[path = "../harness/dispatch.rs"]
mod dispatch;

fn shared() -> &'static (Service, GuestMemoryMmap) {
    static S: OnceLock<(Service, GuestMemoryMmap)> = OnceLock::new();
    S.get_or_init(|| (dispatch::service(), dispatch::guest_memory()))
}

fuzz_target!(|data: &[u8]| {
    let (svc, mem) = shared();
    dispatch::run(svc, mem, data);
});
