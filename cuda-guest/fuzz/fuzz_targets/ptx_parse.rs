//! The PTX parser never panics: any bytes give a module or a positioned error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = cuda_guest::ptx::parse("fuzz.ptx", text) {
            assert!(e.line >= 1 && e.column >= 1);
        }
    }
});
