//! Parsing, decoding and launching never panic: a valid-looking module prefix with
//! fuzzed bodies is loaded and its kernels launched (1 block of 32, small budget).
#![no_main]

use cuda_guest::sim::{KernelArg, LaunchConfig, SimConfig, Simulator};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else { return };
    let text = format!(".version 7.0\n.target sm_80\n.address_size 64\n{body}");
    let mut s = Simulator::new(SimConfig {
        threads: 1,
        instruction_budget: 20_000,
        time_limit: Some(Duration::from_millis(200)),
        memory_limit: 1 << 20,
        // A fuzzed kernel's printf goes nowhere.
        output: cuda_guest::sim::Output(std::sync::Arc::new(|_, _| {})),
        devices: 1,
    });
    let Ok(m) = s.load_module("fuzz.ptx", &text) else { return };
    let buf = match s.malloc(4096) {
        Ok(b) => b,
        Err(_) => return,
    };
    for name in m.kernel_names().iter().map(|n| n.to_string()).collect::<Vec<_>>() {
        let k = m.kernel(&name).expect("listed kernel");
        // Pointers for 64-bit parameters, small integers otherwise, raw bytes for arrays.
        let args: Vec<KernelArg> = k
            .params()
            .iter()
            .map(|p| match (p.array, p.size) {
                (Some(_), n) => KernelArg::Bytes(vec![0; n as usize]),
                (None, 8) if p.ty.name() == "f64" => KernelArg::F64(1.5),
                (None, 8) => KernelArg::Ptr(buf),
                (None, 4) if p.ty.name() == "f32" => KernelArg::F32(0.5),
                (None, 4) => KernelArg::U32(7),
                (None, 2) => KernelArg::U16(3),
                (None, _) => KernelArg::U8(1),
            })
            .collect();
        let cfg = LaunchConfig { grid: [2, 1, 1], block: [32, 1, 1], shared_bytes: 64 };
        let _ = s.launch(&m, &name, cfg, &args);
        s.reset();
    }
});
