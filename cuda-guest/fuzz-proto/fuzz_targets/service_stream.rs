//! Fuzzes the service's Unix socket transport: a guest connection whose byte stream the
//! fuzzer chooses (after a prologue that sets up a context, modules, a stream and an
//! event; handles by placeholder), written in fuzzer-chosen pieces, ended by a drop, a
//! half-close, an idle read or `Goodbye`. Driven by `harness/stream.rs` (shared with the
//! test `stream_fuzz_seeds` of `cuda-guest/tests/service_socket.rs`), which checks the
//! replies' order and form and that everything is released when the guest is gone.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../harness/stream.rs"]
mod stream;

extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
}

fn env() -> &'static stream::Env {
    static E: OnceLock<stream::Env> = OnceLock::new();
    E.get_or_init(|| {
        // Writes to a connection the server closed must fail, not kill the process
        // (libFuzzer's `main` does not ignore SIGPIPE as Rust's does).
        // SAFETY: SIG_IGN (1) for SIGPIPE (13), set once before any socket is used.
        unsafe { signal(13, 1) };
        let path = std::env::temp_dir().join(format!("vmgpu-fuzz-{}.sock", std::process::id()));
        stream::Env::start(path)
    })
}

fuzz_target!(|data: &[u8]| {
    stream::run(env(), data);
});
