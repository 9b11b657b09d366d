//! Device `printf`, `assert` and `trap` (`tests/ptx/device_io.cu`, built by NVRTC and
//! clang-14): what a kernel prints reaches the host in thread order when the launch
//! ends; a failed assertion stops the launch with the GPU's line (and, through the
//! driver API, the sticky `CUDA_ERROR_ASSERT`); a trap is an unspecified launch failure.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cuda_guest::sim::{
    KernelArg, LaunchConfig, Output, OutputStream, SimConfig, SimError, Simulator,
};

type Captured = Arc<Mutex<Vec<(OutputStream, String)>>>;

fn sim(threads: usize) -> (Simulator, Captured) {
    let got: Captured = Arc::default();
    let sink = got.clone();
    let s = Simulator::new(SimConfig {
        threads,
        output: Output(Arc::new(move |stream, bytes| {
            sink.lock()
                .unwrap()
                .push((stream, String::from_utf8_lossy(bytes).into_owned()))
        })),
        ..SimConfig::default()
    });
    (s, got)
}

fn ptx(compiler: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ptx")
        .join(format!("device_io.{compiler}.ptx"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

const COMPILERS: [&str; 2] = ["nvrtc", "clang"];

#[test]
fn printf_output_reaches_the_host_in_thread_order() {
    for compiler in COMPILERS {
        for threads in [1, 2] {
            let (mut s, got) = sim(threads);
            let m = s.load_module("device_io.ptx", &ptx(compiler)).unwrap();
            let out = s.malloc(4 * 70).unwrap();
            // 70 threads in blocks of 32: the last block is partial; two launches.
            let args = [KernelArg::Ptr(out), KernelArg::I32(5), KernelArg::F64(0.5)];
            s.launch(&m, "hello", cfg(1, 32), &args).unwrap();
            let args = [KernelArg::Ptr(out), KernelArg::I32(3), KernelArg::F64(-2.0)];
            s.launch(&m, "hello", cfg(1, 32), &args).unwrap();
            let got = got.lock().unwrap().clone();
            let want: Vec<(OutputStream, String)> = [(5, 0.5), (3, -2.0)]
                .iter()
                .map(|&(n, x)| {
                    let text: String = (0..n)
                        .map(|i| {
                            format!(
                                "thread {i} of {n}: x={:.3} ok|1.2e+03|{}|-9000000000\n",
                                x * i as f64,
                                (b'A' + i as u8) as char
                            )
                        })
                        .collect();
                    (OutputStream::Stdout, text)
                })
                .collect();
            assert_eq!(got, want, "{compiler}, {threads} threads");
            // printf's result, as NVIDIA documents it: the number of arguments.
            let mut b = vec![0u8; 12];
            s.memcpy_dtoh(&mut b, out).unwrap();
            let r: Vec<i32> = b
                .chunks(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(r, [7, 7, 7], "{compiler}");
        }
    }
}

#[test]
fn a_failed_assert_stops_the_launch_with_the_gpus_line() {
    for compiler in COMPILERS {
        let (mut s, got) = sim(1);
        let m = s.load_module("device_io.ptx", &ptx(compiler)).unwrap();
        let input: Vec<i32> = (0..64).map(|i| if i == 40 { 7 } else { i % 7 }).collect();
        let p = s.malloc(4 * 64).unwrap();
        let bytes: Vec<u8> = input.iter().flat_map(|x| x.to_le_bytes()).collect();
        s.memcpy_htod(p, &bytes).unwrap();
        // The assertion holds: nothing printed, no error.
        s.launch(
            &m,
            "check",
            cfg(2, 32),
            &[KernelArg::Ptr(p), KernelArg::I32(40)],
        )
        .unwrap();
        assert!(got.lock().unwrap().is_empty());
        let e = s
            .launch(
                &m,
                "check",
                cfg(2, 32),
                &[KernelArg::Ptr(p), KernelArg::I32(64)],
            )
            .unwrap_err();
        let SimError::Assert(a) = &e else {
            panic!("{compiler}: {e:?}");
        };
        let (at, message, file, function) = (&a.at, &a.message, &a.file, &a.function);
        assert_eq!((at.block, at.thread), ([1, 0, 0], [8, 0, 0]), "{compiler}");
        assert_eq!(message, "in[i] != 7", "{compiler}");
        assert!(file.ends_with("device_io.cu"), "{compiler}: {file}");
        assert!(function.contains("check"), "{compiler}: {function}");
        let line = e.to_string();
        assert!(
            line.contains("block: [1,0,0], thread: [8,0,0] Assertion `in[i] != 7` failed."),
            "{line}"
        );
        let printed = got.lock().unwrap().clone();
        assert_eq!(printed.len(), 1, "{compiler}: {printed:?}");
        assert_eq!(printed[0].0, OutputStream::Stderr);
        assert!(printed[0].1.contains("Assertion `in[i] != 7` failed."));
    }
}

#[test]
fn a_trap_is_a_launch_failure_not_an_exit() {
    for compiler in COMPILERS {
        let (mut s, _) = sim(1);
        let m = s.load_module("device_io.ptx", &ptx(compiler)).unwrap();
        let out = s.malloc(4 * 32).unwrap();
        let e = s
            .launch(&m, "boom", cfg(1, 32), &[KernelArg::Ptr(out)])
            .unwrap_err();
        let SimError::Trap { at } = &e else {
            panic!("{compiler}: {e:?}");
        };
        assert_eq!(at.thread, [3, 0, 0], "{compiler}");
        assert!(e.to_string().contains("kernel trapped"), "{e}");
    }
}
