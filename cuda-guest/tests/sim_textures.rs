//! Texture and surface instructions on the simulator, with descriptors written by hand
//! (as `libcuda.so.1`'s `cuTexObjectCreate` writes them): sampling, surface loads and
//! stores with their bounds modes, and the faults of bad handles, freed texels and
//! trapping surface accesses. `libcudart`'s `tests/cu/textures.cu` runs the same through
//! the runtime API from an nvcc-built program.

use cuda_guest::sim::{DevicePtr, KernelArg, LaunchConfig, SimConfig, SimError, Simulator};
use vmgpu_cuda_api::texture::{AddressMode, Descriptor, Format};

const HEADER: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

fn sim() -> Simulator {
    Simulator::new(SimConfig {
        threads: 2,
        ..SimConfig::default()
    })
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_bytes: 0,
    }
}

fn upload(s: &mut Simulator, b: &[u8]) -> DevicePtr {
    let p = s.malloc(b.len() as u64).unwrap();
    s.memcpy_htod(p, b).unwrap();
    p
}

fn read_f32(s: &mut Simulator, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; 4 * n];
    s.memcpy_dtoh(&mut b, p).unwrap();
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A descriptor of `width` x `height` (x `depth`) texels of `format` at `base`, rows
/// tight, clamped point sampling of texel coordinates: what each test changes from.
fn plain(base: DevicePtr, width: u64, height: u64, depth: u64, format: Format) -> Descriptor {
    Descriptor {
        base: base.0,
        width,
        height,
        depth,
        pitch: width * format.bytes(),
        format,
        channels: 1,
        dims: 2,
        layered: false,
        linear: false,
        normalized_coords: false,
        normalized_float: false,
        linear_filter: false,
        surface: false,
        cubemap: false,
        address: [AddressMode::Clamp; 3],
        border: [0.0; 4],
    }
}

/// A 4x2 float image (10 * row + column) and its descriptor's object.
fn image(s: &mut Simulator, linear_filter: bool) -> (DevicePtr, DevicePtr) {
    let texels: Vec<u8> = [0.0f32, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let base = upload(s, &texels);
    let d = Descriptor {
        linear_filter,
        ..plain(base, 4, 2, 1, Format::F32)
    };
    (base, upload(s, &d.encode()))
}

/// One sample per thread at (x[tid], y[tid]).
fn tex2d_ptx() -> String {
    format!(
        "{HEADER}.visible .entry k(.param .u64 t, .param .u64 xs, .param .u64 out)\n{{\n\
         .reg .b32 %r<4>; .reg .f32 %f<8>; .reg .b64 %rd<10>;\n\
         ld.param.u64 %rd1, [t]; ld.param.u64 %rd2, [xs]; ld.param.u64 %rd3, [out];\n\
         mov.u32 %r1, %tid.x; mul.wide.u32 %rd4, %r1, 8; add.s64 %rd5, %rd2, %rd4;\n\
         ld.global.f32 %f1, [%rd5]; ld.global.f32 %f2, [%rd5+4];\n\
         tex.2d.v4.f32.f32 {{%f3, %f4, %f5, %f6}}, [%rd1, {{%f1, %f2}}];\n\
         mul.wide.u32 %rd6, %r1, 4; add.s64 %rd7, %rd3, %rd6; st.global.f32 [%rd7], %f3;\n\
         ret;\n}}\n"
    )
}

fn coords(s: &mut Simulator, xy: &[(f32, f32)]) -> DevicePtr {
    let b: Vec<u8> = xy
        .iter()
        .flat_map(|(x, y)| [x.to_le_bytes(), y.to_le_bytes()].concat())
        .collect();
    upload(s, &b)
}

#[test]
fn tex_samples_the_texel_or_blends_the_nearest_centres() {
    let mut s = sim();
    let m = s.load_module("tex.ptx", &tex2d_ptx()).unwrap();
    let xy = [(0.5, 0.5), (3.9, 1.1), (2.0, 0.5), (2.0, 1.0), (-3.0, 9.0)];
    let c = coords(&mut s, &xy);
    let out = s.malloc(4 * xy.len() as u64).unwrap();
    let (_, point) = image(&mut s, false);
    let args = |t: DevicePtr| [KernelArg::Ptr(t), KernelArg::Ptr(c), KernelArg::Ptr(out)];
    s.launch(&m, "k", cfg(1, xy.len() as u32), &args(point))
        .unwrap();
    assert_eq!(read_f32(&mut s, out, 5), [0.0, 13.0, 2.0, 12.0, 10.0]);
    let (_, linear) = image(&mut s, true);
    s.launch(&m, "k", cfg(1, xy.len() as u32), &args(linear))
        .unwrap();
    // Centres: the texels; (3.9, 1.1): column 3 clamped, 0.6 of the way from row 0 to
    // row 1 in 1/256 steps (154/256); (2, 0.5) halfway between columns 1 and 2; (2, 1)
    // also halfway between the rows; clamped outside.
    let v = 3.0 + 10.0 * (154.0 / 256.0);
    assert_eq!(read_f32(&mut s, out, 5), [0.0, v, 1.5, 6.5, 10.0]);
}

#[test]
fn a_handle_that_is_no_object_or_points_at_freed_texels_stops_the_launch() {
    let mut s = sim();
    let m = s.load_module("tex.ptx", &tex2d_ptx()).unwrap();
    let c = coords(&mut s, &[(0.5, 0.5)]);
    let out = s.malloc(4).unwrap();
    // Zeroed memory is no descriptor.
    let junk = upload(&mut s, &[0u8; 72]);
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[KernelArg::Ptr(junk), KernelArg::Ptr(c), KernelArg::Ptr(out)],
        )
        .unwrap_err();
    let SimError::Texture {
        handle,
        message,
        at,
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!((*handle, at.thread), (junk.0, [0, 0, 0]));
    assert!(message.contains("is not a texture object"), "{message}");
    s.reset();
    // A descriptor whose texels were freed: the texel read faults as a load would.
    let (texels, obj) = image(&mut s, false);
    s.free(texels).unwrap();
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[KernelArg::Ptr(obj), KernelArg::Ptr(c), KernelArg::Ptr(out)],
        )
        .unwrap_err();
    assert!(matches!(e, SimError::MemoryFault(_)), "{e}");
    s.reset();
    // A handle into nothing faults at the descriptor's read.
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 1),
            &[KernelArg::U64(0x10), KernelArg::Ptr(c), KernelArg::Ptr(out)],
        )
        .unwrap_err();
    assert!(matches!(e, SimError::MemoryFault(_)), "{e}");
}

#[test]
fn surface_loads_and_stores_with_zero_clamp_and_trap() {
    let mut s = sim();
    // 4x2 u32 surface; thread t reads word (t % 4, t / 4) with .zero at byte column
    // 4 * t (so threads 4..8 read past the row: 0), stores it + 100 with .clamp.
    let words: Vec<u8> = (0u32..8).flat_map(|v| v.to_le_bytes()).collect();
    let base = upload(&mut s, &words);
    let d = Descriptor {
        surface: true,
        ..plain(base, 4, 2, 1, Format::U32)
    };
    let obj = upload(&mut s, &d.encode());
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 sf, .param .u64 out, .param .u32 trap)\n{{\n\
         .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p1;\n\
         ld.param.u64 %rd1, [sf]; ld.param.u64 %rd2, [out]; ld.param.u32 %r7, [trap];\n\
         mov.u32 %r1, %tid.x; shl.b32 %r2, %r1, 2; mov.u32 %r3, 0;\n\
         suld.b.2d.b32.zero {{%r4}}, [%rd1, {{%r2, %r3}}];\n\
         mul.wide.u32 %rd3, %r1, 4; add.s64 %rd4, %rd2, %rd3; st.global.u32 [%rd4], %r4;\n\
         add.u32 %r5, %r4, 100;\n\
         sust.b.2d.b32.clamp [%rd1, {{%r2, %r3}}], {{%r5}};\n\
         setp.ne.u32 %p1, %r7, 0;\n\
         @%p1 sust.b.2d.b32.trap [%rd1, {{%r2, %r3}}], {{%r5}};\n\
         ret;\n}}\n"
    );
    let m = s.load_module("surf.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 8).unwrap();
    s.launch(
        &m,
        "k",
        cfg(1, 8),
        &[KernelArg::Ptr(obj), KernelArg::Ptr(out), KernelArg::U32(0)],
    )
    .unwrap();
    let mut b = [0u8; 32];
    s.memcpy_dtoh(&mut b, out).unwrap();
    let read: Vec<u32> = b
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(read, [0, 1, 2, 3, 0, 0, 0, 0]);
    s.memcpy_dtoh(&mut b, base).unwrap();
    let surf: Vec<u32> = b
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Row 0 got each word + 100; the clamped stores past the row land on its last word
    // (100, from the .zero reads), row 1 untouched.
    assert_eq!(surf, [100, 101, 102, 100, 4, 5, 6, 7]);
    let e = s
        .launch(
            &m,
            "k",
            cfg(1, 8),
            &[KernelArg::Ptr(obj), KernelArg::Ptr(out), KernelArg::U32(1)],
        )
        .unwrap_err();
    let SimError::Texture { message, at, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(at.thread, [4, 0, 0]);
    assert!(
        message.contains("outside the 4x2x1 surface") && message.contains(".trap"),
        "{message}"
    );
}

#[test]
fn what_is_not_supported_is_named_at_load() {
    let mut s = sim();
    for (decl, body, want) in [
        (
            "",
            "tld4.r.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];",
            "tld4.r.2d.v4.f32.f32",
        ),
        (
            "",
            "tex.2dms.v4.f32.s32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6, %f5, %f6}];",
            "geometries",
        ),
        (
            "",
            "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd9, {%f5, %f6}];",
            "%rd9",
        ),
        // Texture references (CUDA 11's texture<> API): named at their declaration.
        (".global .texref tr;", "ret;", ".texref"),
    ] {
        let ptx = format!(
            "{HEADER}{decl}\n.visible .entry k(.param .u64 t)\n{{\n\
             .reg .f32 %f<8>; .reg .b64 %rd<2>;\n ld.param.u64 %rd1, [t];\n {body}\n ret;\n}}\n"
        );
        let e = s.load_module("bad.ptx", &ptx).unwrap_err();
        assert!(e.to_string().contains(want), "{body}: {e}");
    }
}

#[test]
fn tex_cube_reads_the_face_a_direction_points_at() {
    let mut s = sim();
    // Six 1x1 faces holding 10 * face.
    let texels: Vec<u8> = (0..6)
        .flat_map(|f| (10.0f32 * f as f32).to_le_bytes())
        .collect();
    let base = upload(&mut s, &texels);
    let d = Descriptor {
        layered: true,
        cubemap: true,
        ..plain(base, 1, 1, 6, Format::F32)
    };
    let obj = upload(&mut s, &d.encode());
    // Thread t samples direction t: +x, -x, +y, -y, +z, -z.
    let dirs: Vec<u8> = [
        [1.0f32, 0.1, 0.2],
        [-1.0, 0.1, 0.2],
        [0.1, 1.0, 0.2],
        [0.1, -1.0, 0.2],
        [0.1, 0.2, 1.0],
        [0.1, 0.2, -1.0],
    ]
    .iter()
    .flat_map(|v| v.iter().flat_map(|c| c.to_le_bytes()))
    .collect();
    let dv = upload(&mut s, &dirs);
    let ptx = format!(
        "{HEADER}.visible .entry k(.param .u64 t, .param .u64 dirs, .param .u64 out)\n{{\n\
         .reg .b32 %r<4>; .reg .f32 %f<12>; .reg .b64 %rd<10>;\n\
         ld.param.u64 %rd1, [t]; ld.param.u64 %rd2, [dirs]; ld.param.u64 %rd3, [out];\n\
         mov.u32 %r1, %tid.x; mul.wide.u32 %rd4, %r1, 12; add.s64 %rd5, %rd2, %rd4;\n\
         ld.global.f32 %f1, [%rd5]; ld.global.f32 %f2, [%rd5+4]; ld.global.f32 %f3, [%rd5+8];\n\
         tex.cube.v4.f32.f32 {{%f4, %f5, %f6, %f7}}, [%rd1, {{%f1, %f2, %f3, %f3}}];\n\
         mul.wide.u32 %rd6, %r1, 4; add.s64 %rd7, %rd3, %rd6; st.global.f32 [%rd7], %f4;\n\
         ret;\n}}\n"
    );
    let m = s.load_module("cube.ptx", &ptx).unwrap();
    let out = s.malloc(4 * 6).unwrap();
    s.launch(
        &m,
        "k",
        cfg(1, 6),
        &[KernelArg::Ptr(obj), KernelArg::Ptr(dv), KernelArg::Ptr(out)],
    )
    .unwrap();
    assert_eq!(
        read_f32(&mut s, out, 6),
        [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    );
}
