//! A kernel parameter's address (`tests/ptx/param_struct.cu`, NVRTC): a 2 KB struct
//! passed by value and indexed at run time is read through its address, as NVRTC
//! compiles cudarc's test_launch_arrays; the parameters stay read-only and bounded.

use cuda_guest::sim::{FaultKind, KernelArg, LaunchConfig, SimConfig, SimError, Simulator};

const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

#[test]
fn a_struct_parameter_is_read_through_its_address() {
    let ptx = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx/param_struct.nvrtc.ptx"),
    )
    .unwrap();
    let mut s = Simulator::new(SimConfig::default());
    let m = s.load_module("param_struct.ptx", &ptx).unwrap();
    let n = 200u64;
    let mut meta = n.to_le_bytes().to_vec();
    for v in 0..255u64 {
        meta.extend_from_slice(&(v * v + 7).to_le_bytes());
    }
    let index: Vec<i32> = (0..n as i32).map(|i| (i * 37) % 255).collect();
    let di = s.malloc(4 * n).unwrap();
    s.memcpy_htod(
        di,
        &index
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let out = s.malloc(8 * n).unwrap();
    s.launch(
        &m,
        "gather",
        cfg(2, 128),
        &[
            KernelArg::Bytes(meta),
            KernelArg::Ptr(di),
            KernelArg::Ptr(out),
        ],
    )
    .unwrap();
    let mut b = vec![0u8; 8 * n as usize];
    s.memcpy_dtoh(&mut b, out).unwrap();
    let got: Vec<u64> = b
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<u64> = index.iter().map(|&i| (i as u64) * (i as u64) + 7).collect();
    assert_eq!(got, want);
}

/// Kernel `k(.param .align 8 .b8 p[16])` whose body is `body` (%rd1 holds p's address).
fn run_body(body: &str) -> Result<u64, SimError> {
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .align 8 .b8 p[16], .param .u64 out)\n{{\n\
         .reg .b64 %rd<6>;\n mov.b64 %rd1, p;\n ld.param.u64 %rd2, [out];\n{body}\n\
         st.global.u64 [%rd2], %rd3;\n ret;\n}}\n"
    );
    let mut s = Simulator::new(SimConfig::default());
    let m = s.load_module("p.ptx", &ptx).unwrap();
    let out = s.malloc(8).unwrap();
    let p: Vec<u8> = (1..=16).collect();
    s.launch(
        &m,
        "k",
        cfg(1, 1),
        &[KernelArg::Bytes(p), KernelArg::Ptr(out)],
    )?;
    let mut b = [0u8; 8];
    s.memcpy_dtoh(&mut b, out).unwrap();
    Ok(u64::from_le_bytes(b))
}

#[test]
fn the_address_works_in_param_space_and_generic() {
    let want = u64::from_le_bytes([9, 10, 11, 12, 13, 14, 15, 16]);
    assert_eq!(run_body(" ld.param.u64 %rd3, [%rd1+8];").unwrap(), want);
    assert_eq!(
        run_body(" cvta.param.u64 %rd4, %rd1;\n ld.u64 %rd3, [%rd4+8];").unwrap(),
        want
    );
}

#[test]
fn the_parameters_are_read_only_and_bounded() {
    let e = run_body(" mov.u64 %rd3, 0;\n cvta.param.u64 %rd4, %rd1;\n st.u64 [%rd4], %rd3;")
        .unwrap_err();
    let SimError::MemoryFault(f) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (f.kind, f.write, f.space),
        (FaultKind::ReadOnly, true, "param")
    );
    let e = run_body(" ld.param.u64 %rd3, [%rd1+24];").unwrap_err();
    let SimError::MemoryFault(f) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (f.kind, f.write, f.space),
        (FaultKind::OutOfBounds, false, "param")
    );
}

/// `.maxnreg` (and the linker's `CU_JIT_MAX_REGISTERS`, which a linked image turns
/// into it) caps the registers a kernel reports, as ptxas spills to meet it.
#[test]
fn maxnreg_caps_the_registers_a_kernel_reports() {
    let body = " .reg .b64 %rd<40>;\n ret;\n}\n";
    let plain = format!("{HEADER}.visible .entry k(.param .u64 out)\n{{\n{body}");
    let capped = format!("{HEADER}.visible .entry k(.param .u64 out)\n.maxnreg 16\n{{\n{body}");
    let mut s = Simulator::new(SimConfig::default());
    let regs = |s: &mut Simulator, ptx: &str| {
        s.load_module("r.ptx", ptx)
            .unwrap()
            .kernel("k")
            .unwrap()
            .registers()
    };
    assert!(regs(&mut s, &plain) > 16);
    assert_eq!(regs(&mut s, &capped), 16);
    // Hundreds of virtual registers report what fits a block of 1024 threads.
    let many = format!(
        "{HEADER}.visible .entry k(.param .u64 out)\n{{\n .reg .b64 %rd<400>;\n ret;\n}}\n"
    );
    assert_eq!(regs(&mut s, &many), cuda_guest::sim::MAX_REGISTERS);
    assert_eq!(cuda_guest::sim::MAX_REGISTERS, 64);
    let image = cuda_guest::ptx::linked::encode_with([("r.ptx", plain.as_str())], Some(12));
    assert_eq!(regs(&mut s, &image), 12);
}
