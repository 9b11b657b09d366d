//! Device memory operations of the simulator against a plain byte-vector model:
//! host/device copies at every alignment, device-to-device copies (overlapping ones
//! behave as `memmove`), memsets, fallible huge allocations and the byte count.

use cuda_guest::sim::{DevicePtr, LaunchConfig, SimConfig, SimError, Simulator};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(s: &mut Simulator, p: DevicePtr, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    s.memcpy_dtoh(&mut v, p).unwrap();
    v
}

const N: usize = 301;

#[test]
fn htod_dtoh_every_alignment() {
    let mut s = Simulator::new(SimConfig::default());
    let p = s.malloc(N as u64).unwrap();
    let mut model = vec![0u8; N];
    for off in 0..9 {
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 13, 64, N - off] {
            let data = pattern(len, (off * 7 + len) as u8);
            s.memcpy_htod(p.offset(off as u64), &data).unwrap();
            model[off..off + len].copy_from_slice(&data);
            assert_eq!(read(&mut s, p, N), model, "write at {off} len {len}");
            let mut part = vec![0u8; len];
            s.memcpy_dtoh(&mut part, p.offset(off as u64)).unwrap();
            assert_eq!(part, model[off..off + len], "read at {off} len {len}");
        }
    }
}

#[test]
fn dtod_between_buffers_every_alignment() {
    let mut s = Simulator::new(SimConfig::default());
    let (a, b) = (s.malloc(N as u64).unwrap(), s.malloc(N as u64).unwrap());
    let src = pattern(N, 5);
    s.memcpy_htod(a, &src).unwrap();
    for so in 0..6 {
        for d in 0..6 {
            for len in [0, 1, 3, 4, 9, 100, N - so.max(d)] {
                let mut model = pattern(N, 77);
                s.memcpy_htod(b, &model).unwrap();
                s.memcpy_dtod(b.offset(d as u64), a.offset(so as u64), len as u64)
                    .unwrap();
                model[d..d + len].copy_from_slice(&src[so..so + len]);
                assert_eq!(read(&mut s, b, N), model, "src {so} dst {d} len {len}");
            }
        }
    }
}

#[test]
fn dtod_overlapping_is_memmove() {
    let mut s = Simulator::new(SimConfig::default());
    let n = 20_000usize; // several chunks of the unaligned path
    let p = s.malloc(n as u64).unwrap();
    for (so, d, len) in [
        (0, 4, 12_000),
        (4, 0, 12_000),
        (0, 1, 12_000),
        (1, 0, 12_000),
        (3, 4100, 9_000),
        (4100, 3, 9_000),
        (8, 9, 7),
        (9, 8, 7),
        (100, 100, 50),
    ] {
        let mut model = pattern(n, 9);
        s.memcpy_htod(p, &model).unwrap();
        s.memcpy_dtod(p.offset(d), p.offset(so), len).unwrap();
        model.copy_within(so as usize..(so + len) as usize, d as usize);
        assert_eq!(read(&mut s, p, n), model, "src {so} dst {d} len {len}");
    }
}

#[test]
fn dtod_rejects_ranges_past_the_end() {
    let mut s = Simulator::new(SimConfig::default());
    let (a, b) = (s.malloc(64).unwrap(), s.malloc(32).unwrap());
    assert!(matches!(
        s.memcpy_dtod(b, a, 64),
        Err(SimError::InvalidPointer { .. })
    ));
    assert!(matches!(
        s.memcpy_dtod(a.offset(8), b, 57),
        Err(SimError::InvalidPointer { .. })
    ));
}

#[test]
fn memsets() {
    let mut s = Simulator::new(SimConfig::default());
    let p = s.malloc(N as u64).unwrap();
    let mut model = vec![0u8; N];
    for off in 0..6 {
        for len in [0, 1, 2, 3, 5, 8, 33, N - off] {
            let v = (off * 16 + len) as u8 | 1;
            s.memset_d8(p.offset(off as u64), v, len as u64).unwrap();
            model[off..off + len].fill(v);
            assert_eq!(read(&mut s, p, N), model, "d8 at {off} len {len}");
        }
    }
    for off in [0usize, 4, 8] {
        for count in [0usize, 1, 2, 7, (N - off) / 4] {
            let v = 0xa1b2_c3d4u32.wrapping_add((off + count) as u32);
            s.memset_d32(p.offset(off as u64), v, count as u64).unwrap();
            for k in 0..count {
                model[off + 4 * k..off + 4 * k + 4].copy_from_slice(&v.to_le_bytes());
            }
            assert_eq!(read(&mut s, p, N), model, "d32 at {off} count {count}");
        }
    }
    assert!(s.memset_d32(p.offset(2), 0, 1).is_err());
    assert!(s.memset_d32(p, 0, N as u64).is_err());
    assert!(s.memset_d8(p.offset(1), 0, N as u64).is_err());
}

fn host_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    };
    Some((field("MemTotal:")? + field("SwapTotal:")?) * 1024)
}

/// An allocation under the configured limit but larger than the host's memory is an
/// `OutOfMemory` error, not an abort. Where the kernel overcommits without limit
/// (`vm.overcommit_memory = 1`) the host would hand out the pages and the zero fill
/// would exhaust them, so the check only runs where the host refuses (mode 0 refuses a
/// single request larger than memory plus swap, mode 2 refuses past its commit limit).
#[test]
fn huge_allocation_is_out_of_memory() {
    let request: u64 = 768 << 30; // inside one simulator's 1 TiB address range
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").ok();
    let host = host_memory_bytes();
    match (mode.as_deref().map(str::trim), host) {
        (Some("0" | "2"), Some(h)) if h < request => {}
        _ => {
            eprintln!("skipped: host overcommit mode {mode:?}, memory {host:?} bytes");
            return;
        }
    }
    let mut s = Simulator::new(SimConfig {
        memory_limit: 1 << 40,
        ..SimConfig::default()
    });
    let small = s.malloc(1024).unwrap();
    match s.malloc(request) {
        Err(SimError::OutOfMemory {
            requested,
            in_use,
            limit,
        }) => {
            assert_eq!((requested, in_use, limit), (request, 1024, 1 << 40));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // Still usable, nothing counted for the failed request.
    assert_eq!(s.bytes_in_use(), 1024);
    s.memset_d8(small, 7, 1024).unwrap();
    assert_eq!(read(&mut s, small, 1024), vec![7u8; 1024]);
    let again = s.malloc(4096).unwrap();
    s.free(again).unwrap();
}

#[test]
fn bytes_in_use_counts_module_variables() {
    let ptx = r#"
.version 7.0
.target sm_80
.address_size 64
.global .align 4 .b8 table[1000];
.const .align 8 .f64 coef[3] = {1.0, 2.0, 3.0};
.visible .entry k()
{
    ret;
}
"#;
    let mut s = Simulator::new(SimConfig::default());
    assert_eq!(s.bytes_in_use(), 0);
    let p = s.malloc(100).unwrap();
    assert_eq!(s.bytes_in_use(), 100);
    let _m = s.load_module("vars.ptx", ptx).unwrap();
    assert_eq!(s.bytes_in_use(), 100 + 1000 + 24);
    assert_eq!(s.bytes_allocated(), s.bytes_in_use());
    s.free(p).unwrap();
    assert_eq!(s.bytes_in_use(), 1024);
    // Module variables count against the limit too.
    let mut t = Simulator::new(SimConfig {
        memory_limit: 1100,
        ..SimConfig::default()
    });
    let _m = t.load_module("vars.ptx", ptx).unwrap();
    assert!(matches!(t.malloc(100), Err(SimError::OutOfMemory { .. })));
    assert!(t.malloc(76).is_ok());
}

const GLOBALS: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
.visible .global .align 4 .b8 big[1000000];\n.visible .const .align 4 .u32 k[4] = {1, 2, 3, 4};\n\n\
.visible .entry noop()\n{\n\tret;\n}\n";

#[test]
fn module_variables_are_device_memory_until_unloaded() {
    let mut s = Simulator::new(SimConfig {
        memory_limit: 1_500_000,
        ..SimConfig::default()
    });
    let before = s.bytes_in_use();
    let m = s.load_module("g.ptx", GLOBALS).unwrap();
    assert_eq!(m.global_bytes(), 1_000_016);
    assert_eq!(s.bytes_in_use(), before + 1_000_016);
    // A second copy is over the limit, and leaves nothing allocated.
    assert!(matches!(
        s.load_module("g2.ptx", GLOBALS),
        Err(SimError::OutOfMemory { .. })
    ));
    assert_eq!(s.bytes_in_use(), before + 1_000_016);
    let big = m.global("big").unwrap();
    s.unload_module(&m).unwrap();
    assert_eq!(s.bytes_in_use(), before);
    // Its variables are freed memory now.
    assert!(s.memcpy_htod(big, &[1]).is_err());
    let m = s.load_module("g3.ptx", GLOBALS).unwrap();
    assert_eq!(s.bytes_in_use(), before + 1_000_016);
    s.unload_module(&m).unwrap();
}

/// nvcc's PTX for `__managed__ int x = 7; __managed__ int arr[8];`, a plain `__device__`
/// variable and a kernel that updates the managed ones.
const MANAGED: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\n\
.global .attribute(.managed) .align 4 .u32 x = 7;\n\
.global .attribute(.managed) .align 4 .b8 arr[32];\n\
.global .align 4 .u32 plain;\n\n\
.visible .entry bump()\n{\n\t.reg .b32 %r<6>;\n\t.reg .b64 %rd<4>;\n\
\tatom.global.add.u32 %r1, [x], 1;\n\
\tmov.u32 %r3, %tid.x;\n\tmul.wide.u32 %rd1, %r3, 4;\n\tmov.u64 %rd2, arr;\n\
\tadd.s64 %rd3, %rd2, %rd1;\n\tld.global.u32 %r4, [%rd3];\n\tshl.b32 %r5, %r4, 1;\n\
\tst.global.u32 [%rd3], %r5;\n\tret;\n}\n";

#[test]
fn a_managed_module_variable_is_host_memory_at_its_address() {
    let mut s = Simulator::new(SimConfig::default());
    let m = s.load_module("managed.ptx", MANAGED).unwrap();
    let (x, xn) = m.variable("x").unwrap();
    let (arr, an) = m.variable("arr").unwrap();
    assert_eq!((xn, an), (4, 32));
    // Managed variables count as device memory, like the plain one.
    assert_eq!(s.bytes_in_use(), 4 + 32 + 4);
    let (hx, harr) = (x.0 as usize as *mut u32, arr.0 as usize as *mut u32);
    // SAFETY: the simulator placed the managed variables in host memory at these
    // addresses (4 and 32 bytes, 4-aligned), alive until the module is unloaded; no
    // kernel runs while the host touches them.
    unsafe {
        assert_eq!(hx.read(), 7, "the initialiser is in the host's memory");
        hx.write(40);
        for i in 0..8 {
            harr.add(i).write(i as u32 + 1);
        }
    }
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [8, 1, 1],
        shared_bytes: 0,
    };
    s.launch(&m, "bump", cfg, &[]).unwrap();
    // Eight threads added 1 to x; each doubled its own element.
    // SAFETY: as above; the launch has returned.
    let (vx, varr): (u32, Vec<u32>) =
        unsafe { (hx.read(), (0..8).map(|i| harr.add(i).read()).collect()) };
    assert_eq!(vx, 48);
    assert_eq!(varr, [2, 4, 6, 8, 10, 12, 14, 16]);
    // The device's copies see what the host sees.
    assert_eq!(read(&mut s, arr, 8), [2, 0, 0, 0, 4, 0, 0, 0]);
    assert!(
        !s.host_mapped(x.0),
        "managed, not mapped page-locked memory"
    );
    s.unload_module(&m).unwrap();
    assert_eq!(s.bytes_in_use(), 0);
}

#[test]
fn a_module_that_fails_to_decode_keeps_no_memory() {
    let mut s = Simulator::new(SimConfig::default());
    // The variable is placed before the kernel is decoded; the kernel calls a function
    // with no body in the module, which the simulator refuses at decode.
    let bad = ".version 7.0\n.target sm_80\n.address_size 64\n\n\
.visible .global .align 4 .b8 buf[4096];\n\n\
.extern .func elsewhere();\n\n\
.visible .entry t()\n{\n\tcall elsewhere, ();\n\tret;\n}\n";
    let before = s.bytes_in_use();
    let e = s.load_module("bad.ptx", bad).unwrap_err();
    assert!(
        matches!(&e, SimError::Unsupported { message, .. } if message.contains("no body")),
        "{e}"
    );
    assert_eq!(s.bytes_in_use(), before);
}
