//! `vmgpu cuda` on the simulator: the documented virtual device, kernels of the PTX
//! corpus run from the command line with their outputs checked exactly, argument
//! errors naming the parameter, fault reports, exit codes, and the benchmark's fields.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn ptx(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/ptx")
        .join(name)
}

/// `vmgpu ARGS` with the simulator forced through the environment and no driver to
/// find, whatever the host has.
fn vmgpu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(args)
        .env("VMGPU_CUDA_BACKEND", "sim")
        .env("VMGPU_LIBCUDA", "/nonexistent/libcuda.so.1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(out), stderr(out)))
}

fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
    assert!(!stderr(out).contains("panicked"), "{}", stderr(out));
}

fn f32s(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn devices_json_reports_the_documented_virtual_device() {
    let out = vmgpu(&["cuda", "devices", "--json"]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["backend"]["kind"], "sim");
    assert_eq!(v["backend"]["requested"], "sim");
    assert_eq!(v["backend"]["source"], "VMGPU_CUDA_BACKEND");
    assert_eq!(v["backend"]["driver_version"], 13000);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d["ordinal"], 0);
    assert_eq!(d["name"], "vmgpu PTX simulator (virtual sm_80)");
    assert_eq!(d["uuid"], "GPU-766d6770-752d-7369-6d2d-6465762d3030");
    assert_eq!(d["pci_bus_id"], "0000:ff:00.0");
    assert_eq!(d["pci_address"], "0000:ff:00.0");
    assert_eq!(d["compute_capability"]["major"], 8);
    assert_eq!(d["compute_capability"]["minor"], 0);
    assert_eq!(d["total_memory"], 16u64 << 30);
    assert_eq!(d["free_memory"], 16u64 << 30);
    assert_eq!(d["multiprocessors"], 108);
    assert_eq!(d["max_threads_per_block"], 1024);
    assert_eq!(d["max_threads_per_multiprocessor"], 2048);
    assert_eq!(d["max_block"], serde_json::json!([1024, 1024, 64]));
    assert_eq!(
        d["max_grid"],
        serde_json::json!([2147483647u32, 65535, 65535])
    );
    assert_eq!(d["shared_memory_per_block"], 49152);
    assert_eq!(d["shared_memory_per_block_optin"], 166912);
    assert_eq!(d["shared_memory_per_multiprocessor"], 167936);
    assert_eq!(d["constant_memory"], 65536);
    assert_eq!(d["registers_per_block"], 65536);
    assert_eq!(d["warp_size"], 32);
    assert_eq!(d["clock_khz"], 1_410_000);
    assert_eq!(d["memory_clock_khz"], 1_215_000);
    assert_eq!(d["memory_bus_width"], 5120);
    assert_eq!(d["l2_cache_bytes"], 40 << 20);
    assert_eq!(d["ecc"], false);
    assert_eq!(d["unified_addressing"], true);
    assert_eq!(d["integrated"], false);
    assert_eq!(d["concurrent_kernels"], true);
    assert_eq!(d["async_engines"], 1);
    assert_eq!(d["host_register"], true);

    let text = stdout(&vmgpu(&["cuda", "devices"]));
    assert!(
        text.starts_with("backend: sim (requested sim by VMGPU_CUDA_BACKEND)"),
        "{text}"
    );
    assert!(
        text.contains("device 0: vmgpu PTX simulator (virtual sm_80)"),
        "{text}"
    );
    assert!(text.contains("0000:ff:00.0"), "{text}");
}

#[test]
fn auto_falls_back_to_the_simulator_saying_why_and_native_fails() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_vmgpu"))
            .args(args)
            .env_remove("VMGPU_CUDA_BACKEND")
            .env("VMGPU_LIBCUDA", "/nonexistent/libcuda.so.1")
            .output()
            .unwrap()
    };
    let out = run(&["cuda", "devices", "--json"]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["backend"]["kind"], "sim");
    assert_eq!(v["backend"]["requested"], "auto");
    assert_eq!(v["backend"]["source"], "default");
    let reason = v["backend"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("native driver is not usable")
            && reason.contains("/nonexistent/libcuda.so.1"),
        "{reason}"
    );
    // --backend wins over the environment.
    let out = vmgpu(&["cuda", "devices", "--json", "--backend", "auto"]);
    assert_eq!(json_of(&out)["backend"]["source"], "--backend");

    let out = run(&["cuda", "devices", "--backend", "native"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.starts_with("vmgpu: error: "), "{err}");
    assert!(err.contains("/nonexistent/libcuda.so.1"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
        .args(["cuda", "devices"])
        .env("VMGPU_CUDA_BACKEND", "gpu-please")
        .output()
        .unwrap();
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("VMGPU_CUDA_BACKEND"),
        "{}",
        stderr(&out)
    );
}

/// Runs vector_add over iota inputs (n = 1000 in blocks of 128, a partial last block).
fn vector_add(file: &str, extra: &[&str]) {
    let dir = tmp();
    let c = dir.path().join("c.bin");
    let out_arg = format!("buf:f32:1000,out={}", c.display());
    let module = ptx(file);
    let mut args = vec![
        "cuda",
        "run",
        module.to_str().unwrap(),
        "vector_add",
        "--grid",
        "8",
        "--block",
        "128",
        "buf:f32:1000=iota",
        "buf:f32:1000=iota",
        &out_arg,
        "u32:1000",
    ];
    args.extend_from_slice(extra);
    let out = vmgpu(&args);
    assert_code(&out, 0);
    let want: Vec<f32> = (0..1000).map(|i| (2 * i) as f32).collect();
    assert_eq!(f32s(&c), want, "{file}");
    let text = stdout(&out);
    assert!(text.contains("backend: sim"), "{text}");
    assert!(text.contains("launch: ok"), "{text}");
    assert!(
        text.contains(&format!(
            "wrote {}: 4000 bytes (arg 2, 1000 x f32)",
            c.display()
        )),
        "{text}"
    );
}

#[test]
fn run_vector_add_from_both_compilers_writes_the_exact_sums() {
    vector_add("vector_add.clang.ptx", &[]);
    vector_add("vector_add.nvrtc.ptx", &[]);
    vector_add("vector_add.nvrtc.ptx", &["--sim-threads", "2"]);
}

#[test]
fn run_json_reports_the_launch_and_show_prints_values() {
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("vector_add.clang.ptx").to_str().unwrap(),
        "vector_add",
        "--grid",
        "1",
        "--block",
        "32",
        "--json",
        "buf:f32:5=iota",
        "buf:f32:5=fill:0.5",
        "buf:f32:5,show",
        "i32:5",
    ]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["backend"]["kind"], "sim");
    assert_eq!(v["kernel"], "vector_add");
    assert_eq!(v["grid"], serde_json::json!([1, 1, 1]));
    assert_eq!(v["block"], serde_json::json!([32, 1, 1]));
    assert_eq!(v["shared_bytes"], 0);
    assert!(v["kernel_ms"].as_f64().unwrap() >= 0.0);
    assert!(v["wall_ms"].as_f64().unwrap() > 0.0);
    let args = v["args"].as_array().unwrap();
    assert_eq!(args.len(), 4);
    assert_eq!(args[0]["param"], "vector_add_param_0");
    assert_eq!(args[0]["param_type"], "u64");
    assert_eq!(args[0]["kind"], "buffer");
    assert_eq!(args[0]["elem"], "f32");
    assert_eq!(args[0]["len"], 5);
    assert_eq!(args[0]["bytes"], 20);
    assert_eq!(args[3]["kind"], "scalar");
    assert_eq!(args[3]["spec"], "i32:5");
    assert_eq!(args[3]["bytes"], 4);
    assert_eq!(
        v["shown"],
        serde_json::json!([{ "index": 2, "values": ["0.5", "1.5", "2.5", "3.5", "4.5"] }])
    );
    assert_eq!(v["error"], Value::Null);
}

#[test]
fn run_saxpy_takes_an_f32_scalar_and_updates_in_place() {
    for file in ["saxpy.clang.ptx", "saxpy.nvrtc.ptx"] {
        let dir = tmp();
        let y = dir.path().join("y.bin");
        let y_arg = format!("buf:f32:1000=fill:1,out={}", y.display());
        // 2 blocks of 64: the grid-stride loop covers 1000 elements in 8 passes.
        let out = vmgpu(&[
            "cuda",
            "run",
            ptx(file).to_str().unwrap(),
            "saxpy",
            "--grid",
            "2",
            "--block",
            "64",
            "f32:2.5",
            "buf:f32:1000=iota",
            &y_arg,
            "u32:1000",
        ]);
        assert_code(&out, 0);
        let want: Vec<f32> = (0..1000).map(|i| 2.5f32.mul_add(i as f32, 1.0)).collect();
        assert_eq!(f32s(&y), want, "{file}");
    }
}

#[test]
fn run_dynamic_shared_memory_reverses_each_block() {
    let dir = tmp();
    let o = dir.path().join("out.bin");
    let o_arg = format!("buf:f32:100,out={}", o.display());
    // 8 bytes of dynamic shared memory per thread, blocks of 32 over n = 100.
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("dyn_shared.nvrtc.ptx").to_str().unwrap(),
        "dyn_shared",
        "--grid",
        "4",
        "--block",
        "32",
        "--shared",
        "256",
        "buf:f32:100=iota",
        &o_arg,
        "buf:i32:100",
        "u32:100",
    ]);
    assert_code(&out, 0);
    let want: Vec<f32> = (0..100)
        .map(|i: usize| {
            let base = i / 32 * 32;
            let count = (100 - base).min(32);
            (base + count - 1 - (i - base)) as f32
        })
        .collect();
    assert_eq!(f32s(&o), want);
}

#[test]
fn dynamic_shared_memory_beyond_48_kib_is_opted_in_and_the_limit_refused() {
    let run = |shared: &str| {
        vmgpu(&[
            "cuda",
            "run",
            ptx("dyn_shared.clang.ptx").to_str().unwrap(),
            "dyn_shared",
            "--grid",
            "1",
            "--block",
            "32",
            "--shared",
            shared,
            "buf:f32:32=iota",
            "buf:f32:32,show",
            "buf:i32:32",
            "u32:32",
        ])
    };
    let out = run("65536");
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("arg 1: [31.0, 30.0, 29.0, 28.0,"),
        "{}",
        stdout(&out)
    );
    // More than the device's opt-in limit (166912 bytes on the virtual device).
    let out = run("200000");
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--shared 200000"), "{}", stderr(&out));
}

#[test]
fn file_and_random_inputs_round_trip() {
    let dir = tmp();
    let input = dir.path().join("in.bin");
    let data: Vec<u8> = [3.0f32, -1.5, 8.25]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    std::fs::write(&input, &data).unwrap();
    let a = format!("buf:f32=file:{}", input.display());
    let c = dir.path().join("c.bin");
    let c_arg = format!("buf:f32:3,out={}", c.display());
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("vector_add.nvrtc.ptx").to_str().unwrap(),
        "vector_add",
        "--grid",
        "1",
        "--block",
        "32",
        &a,
        "buf:f32:3=zeros",
        &c_arg,
        "u32:3",
    ]);
    assert_code(&out, 0);
    assert_eq!(f32s(&c), [3.0, -1.5, 8.25]);

    // A seeded random buffer is the same in every run, and floats lie in [0, 1).
    let mut runs = vec![];
    for k in 0..2 {
        let r = dir.path().join(format!("r{k}.bin"));
        let r_arg = format!("buf:f32:64,out={}", r.display());
        let out = vmgpu(&[
            "cuda",
            "run",
            ptx("vector_add.nvrtc.ptx").to_str().unwrap(),
            "vector_add",
            "--grid",
            "1",
            "--block",
            "64",
            "buf:f32:64=random:42",
            "buf:f32:64",
            &r_arg,
            "u32:64",
        ]);
        assert_code(&out, 0);
        runs.push(f32s(&r));
    }
    assert_eq!(runs[0], runs[1]);
    assert!(runs[0].iter().all(|x| (0.0..1.0).contains(x)));
    assert!(runs[0].windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn wrong_arguments_name_the_parameter_with_exit_2() {
    let module = ptx("saxpy.clang.ptx");
    let m = module.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["cuda", "run", m, "saxpy", "--grid", "1", "--block", "32"];
        all.extend_from_slice(args);
        vmgpu(&all)
    };
    // A u32 where the kernel takes an f32.
    let out = run(&["u32:2", "buf:f32:4", "buf:f32:4", "u32:4"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("argument 0 (parameter `saxpy_param_0`)") && err.contains("given `u32:2`"),
        "{err}"
    );
    assert!(
        err.contains(
            "saxpy(.f32 saxpy_param_0, .u64 saxpy_param_1, .u64 saxpy_param_2, .u32 saxpy_param_3)"
        ),
        "{err}"
    );
    // Too few.
    let out = run(&["f32:2", "buf:f32:4", "buf:f32:4"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("parameter `saxpy_param_3`") && err.contains("4 parameter(s), 3 argument(s)"),
        "{err}"
    );
    // Too many.
    let out = run(&["f32:2", "buf:f32:4", "buf:f32:4", "u32:4", "u32:5"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("5 argument(s)"), "{}", stderr(&out));
    // A buffer where the kernel takes an f32; a 64-bit integer for a 32-bit one.
    let out = run(&["buf:f32:4", "buf:f32:4", "buf:f32:4", "u32:4"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("parameter `saxpy_param_0`"),
        "{}",
        stderr(&out)
    );
    let out = run(&["f32:2", "buf:f32:4", "buf:f32:4", "u64:4"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("parameter `saxpy_param_3`"),
        "{}",
        stderr(&out)
    );
    // An argument that is no argument at all, an unknown kernel, a missing module.
    let out = run(&["f32:two"]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("f32:two"), "{}", stderr(&out));
    let out = vmgpu(&["cuda", "run", m, "daxpy", "--grid", "1", "--block", "1"]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("no kernel `daxpy`; its kernels: saxpy"),
        "{}",
        stderr(&out)
    );
    let out = vmgpu(&[
        "cuda",
        "run",
        "/nonexistent.ptx",
        "k",
        "--grid",
        "1",
        "--block",
        "1",
    ]);
    assert_code(&out, 2);
    // A block larger than the device allows.
    let out = run(&["--block", "2048"]);
    assert_code(&out, 2);
}

/// Runs oob_write with n = 1000 in 8 blocks of 128: thread 1000 writes out[1000].
fn oob(file: &str, json: bool) -> Output {
    let module = ptx(file);
    let mut args = vec![
        "cuda",
        "run",
        module.to_str().unwrap(),
        "oob_write",
        "--grid",
        "8",
        "--block",
        "128",
        "buf:f32:1000",
        "u32:1000",
    ];
    if json {
        args.push("--json");
    }
    vmgpu(&args)
}

#[test]
fn an_out_of_bounds_kernel_prints_its_fault_report_and_exits_1() {
    for file in ["oob_write.clang.ptx", "oob_write.nvrtc.ptx"] {
        let out = oob(file, false);
        assert_code(&out, 1);
        let text = stdout(&out);
        assert!(text.contains("launch: FAILED"), "{text}");
        assert!(text.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{text}");
        assert!(text.contains("out-of-bounds 4-byte global store"), "{text}");
        assert!(text.contains("  kernel   oob_write\n"), "{text}");
        assert!(text.contains("  block    (7,0,0)\n"), "{text}");
        assert!(text.contains("  thread   (104,0,0)\n"), "{text}");
        assert!(text.contains("st.global.f32"), "{text}");
        assert!(
            text.contains("nearest  arg 0 (oob_write_param_0, `buf:f32:1000`)")
                && text.contains("4000 bytes; the address is at offset 4000, 0 bytes past its end"),
            "{text}"
        );
        let err = stderr(&out);
        assert!(
            err.starts_with("vmgpu: error: kernel `oob_write` failed: ")
                && err.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{err}"
        );
        // Nothing is freed into the failed context.
        assert!(!err.contains("WARN"), "{err}");

        let out = oob(file, true);
        assert_code(&out, 1);
        let v = json_of(&out);
        assert_eq!(v["status"], "failed");
        let e = &v["error"];
        assert_eq!(e["cuda_name"], "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert_eq!(e["code"], 700);
        let f = &e["fault"];
        assert_eq!(f["kind"], "out-of-bounds");
        assert_eq!(f["access"], "store");
        assert_eq!(f["space"], "global");
        assert_eq!(f["size"], 4);
        assert_eq!(f["kernel"], "oob_write");
        assert_eq!(f["block"], serde_json::json!([7, 0, 0]));
        assert_eq!(f["thread"], serde_json::json!([104, 0, 0]));
        assert!(f["ptx_text"].as_str().unwrap().starts_with("st.global.f32"));
        let base = u64::from_str_radix(
            v["args"][0]["device_address"]
                .as_str()
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert_eq!(f["address"], format!("{:#x}", base + 4000));
        let n = &f["nearest"];
        assert_eq!(n["argument"], 0);
        assert_eq!(n["param"], "oob_write_param_0");
        assert_eq!(n["base"], format!("{base:#x}"));
        assert_eq!(n["size"], 4000);
        assert_eq!(n["offset"], 4000);
        assert_eq!(n["freed"], false);
    }
}

#[test]
fn a_misaligned_load_is_reported_inside_its_buffer() {
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("misaligned.clang.ptx").to_str().unwrap(),
        "misaligned",
        "--grid",
        "2",
        "--block",
        "64",
        "--json",
        "buf:u8:404",
        "buf:i32:100",
        "u32:100",
    ]);
    assert_code(&out, 1);
    let v = json_of(&out);
    assert_eq!(v["error"]["cuda_name"], "CUDA_ERROR_MISALIGNED_ADDRESS");
    let f = &v["error"]["fault"];
    assert_eq!(f["kind"], "misaligned");
    assert_eq!(f["access"], "load");
    assert_eq!(f["size"], 4);
    assert_eq!(f["block"], serde_json::json!([0, 0, 0]));
    assert_eq!(f["thread"], serde_json::json!([0, 0, 0]));
    assert!(
        f["ptx_text"].as_str().unwrap().starts_with("ld.global.u32"),
        "{f}"
    );
    assert_eq!(f["nearest"]["argument"], 0);
    assert_eq!(f["nearest"]["offset"], 1);
    assert_eq!(f["nearest"]["size"], 404);
}

#[test]
fn a_runaway_kernel_times_out_with_exit_1() {
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("infinite_loop.nvrtc.ptx").to_str().unwrap(),
        "infinite_loop",
        "--grid",
        "1",
        "--block",
        "32",
        "--timeout",
        "0.3",
        "buf:u32:1",
        "buf:u32:32",
    ]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("CUDA_ERROR_LAUNCH_TIMEOUT"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_malformed_module_is_reported_at_its_line_and_column() {
    let dir = tmp();
    let bad = dir.path().join("bad.ptx");
    std::fs::write(
        &bad,
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n  mov.u32 %r1, ;\n}\n",
    )
    .unwrap();
    let out = vmgpu(&[
        "cuda",
        "run",
        bad.to_str().unwrap(),
        "k",
        "--grid",
        "1",
        "--block",
        "1",
        "u64:0",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}:6:16: error in instruction `mov.u32`",
            bad.display()
        )),
        "{err}"
    );
    // Not text at all.
    std::fs::write(&bad, [0xff, 0xfe, 0]).unwrap();
    let out = vmgpu(&[
        "cuda",
        "run",
        bad.to_str().unwrap(),
        "k",
        "--grid",
        "1",
        "--block",
        "1",
    ]);
    assert_code(&out, 2);
}

/// Issue 12: a module of 200,000 nested blocks (400 KB) overflowed the main thread's
/// stack (SIGABRT); now the parser's nesting limit refuses it at its line, exit 1.
#[test]
fn deeply_nested_blocks_are_refused_at_their_line_not_by_a_crash() {
    let dir = tmp();
    let deep = dir.path().join("deep.ptx");
    let n = 200_000;
    let mut text =
        String::from(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{");
    text.push_str(&"{".repeat(n));
    text.push_str("ret;");
    text.push_str(&"}".repeat(n + 1));
    assert!(text.len() > 400_000, "{}", text.len());
    std::fs::write(&deep, &text).unwrap();
    let out = vmgpu(&[
        "cuda",
        "run",
        deep.to_str().unwrap(),
        "k",
        "--grid",
        "1",
        "--block",
        "1",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    let limit = cuda_guest::ptx::MAX_NESTING;
    // The body opens line 5; the first block one level too deep is at column 2 + limit.
    assert!(
        err.contains(&format!(
            "{}:5:{}: error in body of k: blocks nested deeper than {limit}",
            deep.display(),
            2 + limit
        )),
        "{err}"
    );
}

#[test]
fn bench_quick_json_has_every_figure_with_its_baseline() {
    let out = vmgpu(&["cuda", "bench", "--quick", "--json"]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["backend"]["kind"], "sim");
    assert_eq!(v["quick"], true);
    assert_eq!(v["native"], Value::Null);
    let sim = &v["sim"];
    assert_eq!(sim["elements"], 1 << 16);
    assert_eq!(sim["matrix"], 64);
    assert_eq!(sim["threads"], serde_json::json!([1, 2]));
    let results = sim["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    let benches = [
        "vector_add",
        "saxpy",
        "reduce",
        "matmul",
        "transpose",
        "histogram",
    ];
    assert_eq!(names, benches);
    for r in results {
        let native = r["native_ms"].as_f64().unwrap();
        assert!(native > 0.0, "{r}");
        let runs = r["runs"].as_array().unwrap();
        let threads: Vec<u64> = runs
            .iter()
            .map(|x| x["threads"].as_u64().unwrap())
            .collect();
        assert_eq!(threads, [1, 2], "{r}");
        for x in runs {
            let ms = x["ms"].as_f64().unwrap();
            assert!(ms > 0.0, "{x}");
            assert!((x["ratio"].as_f64().unwrap() - ms / native).abs() <= 1e-9 * ms / native);
        }
        let first = runs[0]["ms"].as_f64().unwrap();
        assert_eq!(runs[0]["scaling"].as_f64(), Some(1.0));
        let second = runs[1]["ms"].as_f64().unwrap();
        let scaling = runs[1]["scaling"].as_f64().unwrap();
        assert!((scaling - first / second).abs() <= 1e-9 * scaling, "{r}");
        assert!(r["warp_instructions"].as_u64().unwrap() > 0, "{r}");
        // The JIT runs every kernel of the set (their barriers every thread reaches);
        // each is timed on the interpreter too.
        assert_eq!(r["engine"], "jit", "{r}");
        assert!(r["interpreted_ms"].as_f64().is_some_and(|t| t > 0.0), "{r}");
    }
    let figures = v["figures"].as_array().unwrap();
    let names: Vec<&str> = figures
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let want: Vec<String> = results
        .iter()
        .flat_map(|r| {
            let b = r["name"].as_str().unwrap();
            let jit = (r["engine"] == "jit").then(|| format!("{b}_jit_1t"));
            // (vector_add's plain loop on each count too: the machine's scaling.)
            let native = (b == "vector_add").then(|| format!("{b}_native_scaling_2t"));
            [format!("{b}_1t"), format!("{b}_2t")]
                .into_iter()
                .chain(jit)
                .chain([format!("{b}_scaling_2t")])
                .chain(native)
        })
        .collect();
    assert_eq!(names, want);
    for f in figures {
        assert_eq!(f["set"], "sim");
        let scaling = f["name"].as_str().unwrap().contains("scaling");
        assert_eq!(f["unit"], if scaling { "x" } else { "ms" }, "{f}");
        for k in ["value", "baseline", "ratio"] {
            assert!(f[k].as_f64().unwrap() > 0.0, "{k}: {f}");
        }
        let ratio = f["value"].as_f64().unwrap() / f["baseline"].as_f64().unwrap();
        assert!((f["ratio"].as_f64().unwrap() - ratio).abs() <= 1e-9 * ratio);
    }
    // Issue 16's goals: the one-thread ratios of the four first, scaling on every one.
    let goal = |name: &str| {
        let f = figures.iter().find(|f| f["name"] == name).unwrap();
        assert_eq!(f["goal_met"].is_boolean(), !f["goal"].is_null(), "{f}");
        f["goal"].clone()
    };
    assert_eq!(goal("vector_add_1t"), "<= 2");
    assert_eq!(goal("saxpy_1t"), "<= 2.5");
    assert_eq!(goal("reduce_1t"), "<= 8");
    assert_eq!(goal("matmul_1t"), "<= 4");
    assert_eq!(goal("transpose_1t"), Value::Null);
    assert_eq!(goal("vector_add_2t"), Value::Null);
    assert_eq!(goal("histogram_scaling_2t"), ">= 0.75");
    let scaling = figures
        .iter()
        .find(|f| f["name"] == "vector_add_scaling_2t")
        .unwrap();
    assert_eq!(scaling["baseline"], 2.0);
    assert_eq!(goal("vector_add_jit_1t"), Value::Null);
    assert_eq!(goal("vector_add_native_scaling_2t"), Value::Null);
}

#[test]
fn bench_runs_on_the_thread_counts_asked_for() {
    let out = vmgpu(&["cuda", "bench", "--quick", "--json", "--threads", "3,1"]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["sim"]["threads"], serde_json::json!([3, 1]));
    let runs = v["sim"]["results"][0]["runs"].as_array().unwrap();
    assert_eq!(runs[0]["threads"], 3);
    // The scaling is against the first count: no goal for a start above 1.
    let f = v["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "vector_add_scaling_1t")
        .unwrap()
        .clone();
    assert_eq!(f["goal"], Value::Null, "{f}");
    let out = vmgpu(&["cuda", "bench", "--quick", "--threads", "0"]);
    assert_code(&out, 2);
}

#[test]
fn a_closed_pipe_ends_cuda_commands_quietly() {
    let module = ptx("vector_add.clang.ptx");
    for args in [
        vec!["cuda", "devices"],
        vec!["cuda", "devices", "--json"],
        vec![
            "cuda",
            "run",
            module.to_str().unwrap(),
            "vector_add",
            "--grid",
            "1",
            "--block",
            "32",
            "buf:f32:4",
            "buf:f32:4",
            "buf:f32:4",
            "u32:4",
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_vmgpu"))
            .args(&args)
            .env("VMGPU_CUDA_BACKEND", "sim")
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[test]
fn odd_inputs_never_panic() {
    // Each ends with 0 (empty buffers are fine), 1 or 2; never 101 or a signal.
    let dir = tmp();
    let empty = dir.path().join("empty.ptx");
    std::fs::write(&empty, "").unwrap();
    let va = ptx("vector_add.nvrtc.ptx");
    let va = va.to_str().unwrap();
    let e = empty.to_str().unwrap();
    let d = dir.path().to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["cuda"],
        vec!["cuda", "run"],
        vec!["cuda", "run", e, "k", "--grid", "1", "--block", "1"],
        vec!["cuda", "run", d, "k", "--grid", "1", "--block", "1"],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1,1,1,1",
            "--block",
            "1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "99999999999",
            "--block",
            "1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "--shared",
            "4000000000",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "--timeout",
            "-1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:f32:0",
            "buf:f32:0",
            "buf:f32:0",
            "u32:0",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:f32:99999999999999999999",
            "buf:f32:1",
            "buf:f32:1",
            "u32:1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:f32:4611686018427387904",
            "buf:f32:1",
            "buf:f32:1",
            "u32:1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:f32=file:/nonexistent",
            "buf:f32:1",
            "buf:f32:1",
            "u32:1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:f32:1,out=/nonexistent/dir/x",
            "buf:f32:1",
            "buf:f32:1",
            "u32:1",
        ],
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "1",
            "buf:q:1",
            ":",
            "buf:",
            "buf:f32:1=fill:",
            "u8:",
        ],
        // A pointer argument that is no allocation: the kernel faults, not the command.
        vec![
            "cuda",
            "run",
            va,
            "vector_add",
            "--grid",
            "1",
            "--block",
            "32",
            "u64:0",
            "u64:0",
            "u64:0",
            "u32:32",
        ],
        vec!["cuda", "bench", "--backend", "nonsense"],
    ];
    for args in cases {
        let out = vmgpu(&args);
        let code = out.status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "{args:?}: {code:?}\n{}\n{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
#[ignore = "needs libnvrtc (set VMGPU_LIBNVRTC; run with --ignored)"]
fn run_compiles_cuda_c_with_nvrtc_for_the_device() {
    let dir = tmp();
    let y = dir.path().join("y.bin");
    let y_arg = format!("buf:f32:300=fill:1,out={}", y.display());
    // saxpy.cu includes vmgpu_cuda.h from its own directory.
    let out = vmgpu(&[
        "cuda",
        "run",
        ptx("saxpy.cu").to_str().unwrap(),
        "saxpy",
        "--grid",
        "2",
        "--block",
        "64",
        "f32:-0.75",
        "buf:f32:300=iota",
        &y_arg,
        "u32:300",
    ]);
    assert_code(&out, 0);
    let want: Vec<f32> = (0..300)
        .map(|i| (-0.75f32).mul_add(i as f32, 1.0))
        .collect();
    assert_eq!(f32s(&y), want);

    let bad = dir.path().join("bad.cu");
    std::fs::write(
        &bad,
        "extern \"C\" __global__ void k(int *p) { p[0] = nope; }\n",
    )
    .unwrap();
    let out = vmgpu(&[
        "cuda",
        "run",
        bad.to_str().unwrap(),
        "k",
        "--grid",
        "1",
        "--block",
        "1",
        "buf:i32:1",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("NVRTC_ERROR_COMPILATION") && err.contains("bad.cu(1): error"),
        "{err}"
    );
}

/// Builds cuda-guest's fake `libcuda.so.1` (needs `cc`) with `defines`.
fn fake_libcuda(dir: &Path, defines: &[&str]) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fake-libcuda/fake_cuda.c");
    let path = dir.join("libcuda.so.1");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&path)
        .arg(&src);
    for d in defines {
        cc.arg(format!("-D{d}"));
    }
    let out = cc
        .output()
        .expect("run cc (a C compiler is needed for this test)");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

#[test]
fn a_driver_without_devices_or_queries_is_an_error_never_a_crash() {
    let dir = tmp();
    let none = dir.path().join("none");
    let one = dir.path().join("one");
    std::fs::create_dir_all(&none).unwrap();
    std::fs::create_dir_all(&one).unwrap();
    let no_device = fake_libcuda(&none, &["WITH_GPA", "DEVICE_COUNT=0"]);
    // One device whose every query but the name and bus id is CUDA_ERROR_NOT_SUPPORTED.
    let bare = fake_libcuda(&one, &["WITH_GPA"]);
    let run = |lib: &Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_vmgpu"))
            .args(args)
            .env_remove("VMGPU_CUDA_BACKEND")
            .env("VMGPU_LIBCUDA", lib)
            .output()
            .unwrap()
    };
    let out = run(&no_device, &["cuda", "devices", "--json"]);
    assert_code(&out, 0);
    let v = json_of(&out);
    assert_eq!(v["backend"]["kind"], "sim");
    let reason = v["backend"]["reason"].as_str().unwrap();
    assert!(reason.contains("reports no device"), "{reason}");

    let out = run(&no_device, &["cuda", "devices", "--backend", "native"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("reports no device"),
        "{}",
        stderr(&out)
    );

    let va = ptx("vector_add.nvrtc.ptx");
    for args in [
        vec!["cuda", "devices"],
        vec!["cuda", "bench", "--quick"],
        vec![
            "cuda",
            "run",
            va.to_str().unwrap(),
            "vector_add",
            "--grid",
            "1",
            "--block",
            "32",
            "buf:f32:4",
            "buf:f32:4",
            "buf:f32:4",
            "u32:4",
        ],
    ] {
        let out = run(&bare, &args);
        assert_code(&out, 1);
        let err = stderr(&out);
        assert!(err.starts_with("vmgpu: error: "), "{args:?}: {err}");
        assert!(err.contains("CUDA_ERROR_NOT_SUPPORTED"), "{args:?}: {err}");
    }
}

#[test]
fn bytes_pass_a_struct_by_value_checked_by_size() {
    let dir = tmp();
    let module = dir.path().join("pair.ptx");
    std::fs::write(
        &module,
        r#".version 7.0
.target sm_80
.address_size 64
.visible .entry pair_sum(.param .align 4 .b8 pair[8], .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u32 %r1, [pair];
    ld.param.u32 %r2, [pair+4];
    add.s32 %r3, %r1, %r2;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r3;
    ret;
}
"#,
    )
    .unwrap();
    let m = module.to_str().unwrap();
    let out = vmgpu(&[
        "cuda",
        "run",
        m,
        "pair_sum",
        "--grid",
        "1",
        "--block",
        "1",
        "bytes:05000000_25000000",
        "buf:u32:1,show",
    ]);
    assert_code(&out, 0);
    assert!(stdout(&out).contains("arg 1: [42]"), "{}", stdout(&out));
    let out = vmgpu(&[
        "cuda",
        "run",
        m,
        "pair_sum",
        "--grid",
        "1",
        "--block",
        "1",
        "bytes:0500",
        "buf:u32:1",
    ]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("parameter `pair`"),
        "{}",
        stderr(&out)
    );
}
