//! The fault model: the corpus's broken kernels and small hand-written PTX produce
//! precise reports (kernel, block, thread, PTX line, address, size, nearest
//! allocation), runaway launches time out, and failures are sticky until reset.

mod common;

use common::reference::{load_ptx, Compiler};
use cuda_guest::sim::{
    DevicePtr, FaultKind, KernelArg, LaunchConfig, SimConfig, SimError, Simulator,
};
use std::time::Duration;

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

fn sim(threads: usize) -> Simulator {
    Simulator::new(SimConfig {
        threads,
        instruction_budget: 10_000_000,
        time_limit: Some(Duration::from_secs(20)),
        ..SimConfig::default()
    })
}

/// PTX line of the first line containing `needle`.
fn line_of(ptx: &str, needle: &str) -> u32 {
    ptx.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1
}

#[test]
fn oob_write_reports_like_memcheck() {
    for c in Compiler::ALL {
        for threads in [1, 2] {
            let ptx = load_ptx("oob_write", c);
            let mut s = sim(threads);
            let m = s.load_module("oob_write.ptx", &ptx).unwrap();
            let _before = s.malloc(64).unwrap();
            let out = s.malloc(4000).unwrap();
            let err = s
                .launch(
                    &m,
                    "oob_write",
                    cfg(8, 128),
                    &[KernelArg::Ptr(out), KernelArg::I32(1000)],
                )
                .unwrap_err();
            let SimError::MemoryFault(f) = &err else {
                panic!("{err}")
            };
            assert_eq!(f.kind, FaultKind::OutOfBounds);
            assert!(f.write);
            assert_eq!(f.space, "global");
            assert_eq!(f.size, 4);
            assert_eq!(f.address, out.0 + 4000);
            assert_eq!(f.at.kernel, "oob_write");
            assert_eq!(f.at.block, [7, 0, 0]);
            assert_eq!(f.at.thread, [104, 0, 0]);
            assert_eq!(f.at.line, line_of(&ptx, "st.global.f32"));
            let n = f.nearest.as_ref().unwrap();
            assert_eq!(
                (n.id, n.base, n.size, n.offset, n.freed),
                (2, out, 4000, 4000, false)
            );
            let text = err.to_string();
            assert!(
                text.starts_with("invalid out-of-bounds write of size 4 at global address"),
                "{text}"
            );
            assert!(
                text.contains("kernel oob_write block (7,0,0) thread (104,0,0) at PTX line"),
                "{text}"
            );
            assert!(
                text.ends_with(&format!(
                    "0 bytes after the end of allocation #2 at {out} of 4000 bytes"
                )),
                "{text}"
            );
            // Every in-bounds store before the fault landed.
            s.reset();
            let mut b = vec![0u8; 4000];
            s.memcpy_dtoh(&mut b, out).unwrap();
            let got: Vec<f32> = b
                .chunks(4)
                .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                .collect();
            assert_eq!(got, common::reference::broken::oob_write::partial_out());
        }
    }
}

#[test]
fn use_after_free_names_the_freed_allocation() {
    for c in Compiler::ALL {
        let ptx = load_ptx("use_after_free", c);
        let mut s = sim(1);
        let m = s.load_module("use_after_free.ptx", &ptx).unwrap();
        let input = s.malloc(4 * 256).unwrap();
        let out = s.malloc(4 * 256).unwrap();
        s.free(input).unwrap();
        let err = s
            .launch(
                &m,
                "use_after_free",
                cfg(4, 64),
                &[
                    KernelArg::Ptr(input),
                    KernelArg::Ptr(out),
                    KernelArg::I32(256),
                ],
            )
            .unwrap_err();
        let SimError::MemoryFault(f) = &err else {
            panic!("{err}")
        };
        assert_eq!(f.kind, FaultKind::UseAfterFree);
        assert!(!f.write);
        assert_eq!((f.address, f.size), (input.0, 4));
        assert_eq!((f.at.block, f.at.thread), ([0, 0, 0], [0, 0, 0]));
        assert_eq!(f.at.line, line_of(&ptx, "ld.global.f32"));
        let n = f.nearest.as_ref().unwrap();
        assert_eq!((n.id, n.offset, n.freed), (1, 0, true));
        assert!(
            err.to_string()
                .contains("0 bytes inside freed allocation #1"),
            "{err}"
        );
        // Freeing twice is refused.
        s.reset();
        assert!(matches!(
            s.free(input),
            Err(SimError::InvalidPointer { .. })
        ));
    }
}

#[test]
fn divergent_barrier_is_reported_not_hung() {
    for c in Compiler::ALL {
        let ptx = load_ptx("divergent_barrier", c);
        let mut s = sim(1);
        let m = s.load_module("divergent_barrier.ptx", &ptx).unwrap();
        let data = s.malloc(4 * 64).unwrap();
        let err = s
            .launch(
                &m,
                "divergent_barrier",
                cfg(1, 64),
                &[KernelArg::Ptr(data), KernelArg::I32(64)],
            )
            .unwrap_err();
        let SimError::BarrierDivergence { at, message } = &err else {
            panic!("{err}")
        };
        assert_eq!(at.block, [0, 0, 0]);
        assert_eq!(at.thread, [1, 0, 0]);
        assert_eq!(at.line, line_of(&ptx, "bar.sync"));
        assert!(
            message.starts_with(
                "lanes 0xaaaaaaaa of warp 0 wait at bar.sync while live lanes 0x55555555"
            ),
            "{message}"
        );
    }
}

#[test]
fn infinite_loop_times_out_and_failure_is_sticky() {
    for c in Compiler::ALL {
        let ptx = load_ptx("infinite_loop", c);
        // By instruction budget.
        let mut s = Simulator::new(SimConfig {
            threads: 1,
            instruction_budget: 200_000,
            time_limit: None,
            ..SimConfig::default()
        });
        let m = s.load_module("infinite_loop.ptx", &ptx).unwrap();
        let flag = s.malloc(4).unwrap();
        let spins = s.malloc(4 * 32).unwrap();
        let args = [KernelArg::Ptr(flag), KernelArg::Ptr(spins)];
        let err = s
            .launch(&m, "infinite_loop", cfg(1, 32), &args)
            .unwrap_err();
        let SimError::Timeout {
            kernel,
            warp_instructions,
            reason,
            line,
            ..
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(
            (kernel.as_str(), *reason),
            ("infinite_loop", "instruction budget")
        );
        assert!(
            *warp_instructions > 200_000 && *warp_instructions <= 200_000 + 4096,
            "{warp_instructions}"
        );
        assert!(*line > 0);
        // Sticky: everything fails until reset, naming the first error.
        let again = s.malloc(16).unwrap_err();
        let SimError::Sticky(first) = &again else {
            panic!("{again}")
        };
        assert!(matches!(**first, SimError::Timeout { .. }));
        assert!(matches!(
            s.launch(&m, "infinite_loop", cfg(1, 32), &args),
            Err(SimError::Sticky(_))
        ));
        s.reset();
        // With the flag set the same kernel finishes.
        s.memcpy_htod(flag, &1u32.to_le_bytes()).unwrap();
        s.launch(&m, "infinite_loop", cfg(1, 32), &args).unwrap();
        // By wall time, on two threads with several blocks.
        let mut s = Simulator::new(SimConfig {
            threads: 2,
            instruction_budget: 0,
            time_limit: Some(Duration::from_millis(100)),
            ..SimConfig::default()
        });
        let m = s.load_module("infinite_loop.ptx", &ptx).unwrap();
        let flag = s.malloc(4).unwrap();
        let spins = s.malloc(4 * 128).unwrap();
        let err = s
            .launch(
                &m,
                "infinite_loop",
                cfg(4, 32),
                &[KernelArg::Ptr(flag), KernelArg::Ptr(spins)],
            )
            .unwrap_err();
        let SimError::Timeout {
            reason, elapsed, ..
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(*reason, "time limit");
        assert!(*elapsed >= Duration::from_millis(100));
    }
}

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

fn one_kernel(body: &str, params: &str) -> String {
    format!("{HEADER}.visible .entry k({params})\n{{\n{body}\n}}\n")
}

#[test]
fn misaligned_null_and_foreign_pointers_fault() {
    let ptx = one_kernel(
        "  .reg .b64 %rd<4>;\n  .reg .f32 %f<2>;\n  ld.param.u64 %rd1, [p];\n  ld.param.u64 %rd2, [off];\n  add.s64 %rd3, %rd1, %rd2;\n  ld.global.f32 %f1, [%rd3];\n  ret;",
        ".param .u64 p, .param .u64 off",
    );
    let mut s = sim(1);
    let m = s.load_module("t.ptx", &ptx).unwrap();
    let buf = s.malloc(64).unwrap();
    let run = |s: &mut Simulator, p: DevicePtr, off: u64| {
        let r = s.launch(
            &m,
            "k",
            cfg(1, 1),
            &[KernelArg::Ptr(p), KernelArg::U64(off)],
        );
        s.reset();
        r
    };
    run(&mut s, buf, 60).unwrap();
    let e = run(&mut s, buf, 2).unwrap_err();
    let SimError::MemoryFault(f) = e else {
        panic!()
    };
    assert_eq!(
        (f.kind, f.address, f.size, f.at.line),
        (
            FaultKind::Misaligned,
            buf.0 + 2,
            4,
            line_of(&ptx, "ld.global.f32")
        )
    );
    let e = run(&mut s, DevicePtr(0), 0).unwrap_err();
    let SimError::MemoryFault(f) = e else {
        panic!()
    };
    assert_eq!((f.kind, f.address), (FaultKind::NullPointer, 0));
    let e = run(&mut s, buf, 64).unwrap_err();
    let SimError::MemoryFault(f) = e else {
        panic!()
    };
    assert_eq!(f.kind, FaultKind::OutOfBounds);
    assert_eq!(f.nearest.unwrap().offset, 64);
    // A pointer of another simulator is not in this one's address space.
    let mut other = sim(1);
    let foreign = other.malloc(64).unwrap();
    let e = run(&mut s, foreign, 0).unwrap_err();
    let SimError::MemoryFault(f) = e else {
        panic!()
    };
    assert_eq!(f.kind, FaultKind::OutOfBounds);
    // Host copies are checked too.
    assert!(matches!(
        s.memcpy_htod(buf.offset(60), &[0u8; 8]),
        Err(SimError::InvalidPointer { .. })
    ));
    assert!(matches!(
        s.memcpy_htod(foreign, &[0u8; 4]),
        Err(SimError::InvalidPointer { .. })
    ));
}

#[test]
fn shared_and_local_out_of_bounds() {
    let ptx = one_kernel(
        "  .reg .b32 %r<3>;\n  .shared .align 4 .b8 sm[64];\n  mov.u32 %r1, %tid.x;\n  shl.b32 %r2, %r1, 2;\n  st.shared.u32 [%r2], %r1;\n  ret;",
        "",
    );
    let mut s = sim(1);
    let m = s.load_module("t.ptx", &ptx).unwrap();
    s.launch(&m, "k", cfg(1, 16), &[]).unwrap();
    let e = s.launch(&m, "k", cfg(2, 17), &[]).unwrap_err();
    let SimError::MemoryFault(f) = e else {
        panic!()
    };
    assert_eq!(
        (f.kind, f.space, f.address, f.at.block, f.at.thread),
        (
            FaultKind::SharedOutOfBounds,
            "shared",
            64,
            [0, 0, 0],
            [16, 0, 0]
        )
    );
}

#[test]
fn argument_checks() {
    let ptx = one_kernel(
        "ret;",
        ".param .u64 p, .param .f32 x, .param .align 8 .b8 s[12]",
    );
    let mut s = sim(1);
    let m = s.load_module("t.ptx", &ptx).unwrap();
    let p = s.malloc(4).unwrap();
    let ok = [
        KernelArg::Ptr(p),
        KernelArg::F32(1.0),
        KernelArg::Bytes(vec![0; 12]),
    ];
    s.launch(&m, "k", cfg(1, 1), &ok).unwrap();
    let e = s.launch(&m, "k", cfg(1, 1), &ok[..2]).unwrap_err();
    assert!(matches!(e, SimError::BadArgument { index: 2, .. }), "{e}");
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[
                KernelArg::U32(1),
                KernelArg::F32(1.0),
                KernelArg::Bytes(vec![0; 12]),
            ],
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "kernel k: argument 0: parameter p is .u64 (8 bytes), got 32-bit integer (4 bytes)"
    );
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[
                KernelArg::Ptr(p),
                KernelArg::I32(1),
                KernelArg::Bytes(vec![0; 12]),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, SimError::BadArgument { index: 1, .. }), "{e}");
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[
                KernelArg::Ptr(p),
                KernelArg::F32(1.0),
                KernelArg::Bytes(vec![0; 8]),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, SimError::BadArgument { index: 2, .. }), "{e}");
    assert!(matches!(
        s.launch(&m, "nope", cfg(1, 1), &ok),
        Err(SimError::UnknownKernel { .. })
    ));
    assert!(matches!(
        s.launch(&m, "k", cfg(1, 1025), &ok),
        Err(SimError::InvalidLaunch { .. })
    ));
    assert!(matches!(
        s.launch(&m, "k", cfg(0, 1), &ok),
        Err(SimError::InvalidLaunch { .. })
    ));
    // Argument errors are not sticky.
    s.launch(&m, "k", cfg(1, 1), &ok).unwrap();
}

#[test]
fn warps_at_different_barriers_are_reported() {
    // Warp 0 syncs inside a branch, warp 1 at the end: a barrier not every live thread
    // reaches (each warp on its own, lanes agree within a warp).
    let ptx = one_kernel(
        "  .reg .b32 %r<3>;\n  .reg .pred %p<2>;\n  mov.u32 %r1, %tid.x;\n  setp.ge.u32 %p1, %r1, 32;\n  @%p1 bra L;\n  bar.sync 0;\nL:\n  bar.sync 0;\n  ret;",
        "",
    );
    let mut s = sim(1);
    let m = s.load_module("t.ptx", &ptx).unwrap();
    // One warp: both barriers are reached in turn, no error.
    s.launch(&m, "k", cfg(1, 32), &[]).unwrap();
    let e = s.launch(&m, "k", cfg(1, 64), &[]).unwrap_err();
    let SimError::BarrierDivergence { at, message } = &e else {
        panic!("{e}")
    };
    assert_eq!(
        (at.block, at.thread, at.line),
        ([0, 0, 0], [0, 0, 0], line_of(&ptx, "bar.sync"))
    );
    assert_eq!(message, &format!("warp 0 waits at bar.sync on PTX line {} while warp 1 waits at another bar.sync on PTX line {}", line_of(&ptx, "bar.sync"), line_of(&ptx, "bar.sync") + 2));
    // Threads that exited early do not hold a barrier up.
    let ptx = one_kernel(
        "  .reg .b32 %r<3>;\n  .reg .pred %p<2>;\n  mov.u32 %r1, %tid.x;\n  setp.ge.u32 %p1, %r1, 40;\n  @%p1 ret;\n  bar.sync 0;\n  ret;",
        "",
    );
    s.reset();
    let m = s.load_module("t2.ptx", &ptx).unwrap();
    s.launch(&m, "k", cfg(1, 128), &[]).unwrap();
}

#[test]
fn simulator_and_modules_cross_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Simulator>();
    send_sync::<cuda_guest::sim::Module>();
    send_sync::<SimError>();
    let mut s = sim(1);
    assert_eq!(s.bytes_allocated(), 0);
    let p = s.malloc(1000).unwrap();
    assert_eq!(s.bytes_allocated(), 1000);
    s.free(p).unwrap();
    assert_eq!(s.bytes_allocated(), 0);
}
