//! The differential test of the simulator against a real GPU (issue 14, point 3): one
//! instruction (or a short chain, for carries) per kernel, run over fixed operands on
//! NVIDIA's driver once, the results committed as golden files under
//! `fixtures/isa-goldens/`, and every golden replayed on the simulator in CI.
//!
//! A golden file is self-contained: its operand sets (hex, one lane per line) and, per
//! case, the PTX body, the operand and result types, how results are compared, and the
//! GPU's results. The simulator test needs nothing from the generator below, so a
//! change of the generator cannot silently change what the goldens check.
//!
//! Kernel shape (`kernel`): thread `i` loads `a[i]`, `b[i]`, `c[i]` (8-byte slots) as
//! `%x1 %x2 %x3` of the case's operand type, also as `.u32` (`%s1 %s2 %s3`) and `.u64`
//! (`%v1 %v2 %v3`), runs the body, which writes `%y` of the result type, and stores
//! `%y` to `d[i]` (zero-filled first). Scratch registers: `%t<8>` (.b32), `%u<8>`
//! (.b64), `%p<4>` (.pred), `%h<4>` (.b16), `%f<4>` (.f32), `%g<4>` (.f64).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cuda_guest::driver::{Backend, DevicePtr, LaunchConfig, Stream};

/// Lanes per case: `SPECIALS`² crossed special operands, then random ones.
pub const LANES: usize = 384;
const SPECIALS: usize = 16;

/// One case: a kernel body over operands of class `inputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Unique in its file, e.g. `add.rz.ftz.f32`.
    pub name: String,
    /// Operand memory type (`ld.global.<sty>`), e.g. `f32`, `u8`, `b16`.
    pub sty: String,
    /// Result memory type (`st.global.<dty>`).
    pub dty: String,
    /// How results are compared: `exact`, or tolerance terms (see [`Tolerance`]).
    pub tol: String,
    /// The operand set: `i16 i32 i64 f16 bf16 f32 f64`.
    pub inputs: String,
    /// The PTX body.
    pub body: String,
}

/// What the GPU gave for a case.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// `d[i]` per lane.
    Results(Vec<u64>),
    /// The driver refused the module (ptxas), with its message.
    Rejected(String),
}

/// A golden file: operand sets and cases with the GPU's outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Goldens {
    /// `# ` lines: where and how they were recorded.
    pub header: Vec<String>,
    /// Operand sets by name: `(a, b, c)` per lane.
    pub inputs: BTreeMap<String, Vec<[u64; 3]>>,
    /// The cases, in order, with the GPU's outcome.
    pub cases: Vec<(Case, Outcome)>,
}

/// The register type holding a value of memory type `t`.
fn reg_ty(t: &str) -> &str {
    match t {
        "u8" => "u16",
        "s8" => "s16",
        "b8" => "b16",
        "f16" | "bf16" => "b16",
        other => other,
    }
}

/// The kernel of a case.
pub fn kernel(sty: &str, dty: &str, body: &str) -> String {
    let (sr, dr) = (reg_ty(sty), reg_ty(dty));
    let sty = match sty {
        "f16" | "bf16" => "b16",
        s => s,
    };
    let dty = match dty {
        "f16" | "bf16" => "b16",
        s => s,
    };
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)\n{{\n\
 .reg .b64 %rd<12>; .reg .b32 %r<4>; .reg .{sr} %x<4>; .reg .{dr} %y;\n\
 .reg .u32 %s<4>; .reg .u64 %v<4>; .reg .b32 %t<8>; .reg .b64 %u<8>; .reg .pred %p<4>;\n\
 .reg .b16 %h<4>; .reg .f32 %f<4>; .reg .f64 %g<4>;\n\
 ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u64 %rd4, [pd];\n\
 mov.u32 %r1, %tid.x; mul.wide.u32 %rd5, %r1, 8;\n\
 add.s64 %rd6, %rd1, %rd5; ld.global.{sty} %x1, [%rd6]; ld.global.u32 %s1, [%rd6]; ld.global.u64 %v1, [%rd6];\n\
 add.s64 %rd7, %rd2, %rd5; ld.global.{sty} %x2, [%rd7]; ld.global.u32 %s2, [%rd7]; ld.global.u64 %v2, [%rd7];\n\
 add.s64 %rd8, %rd3, %rd5; ld.global.{sty} %x3, [%rd8]; ld.global.u32 %s3, [%rd8]; ld.global.u64 %v3, [%rd8];\n\
 {body}\n\
 add.s64 %rd9, %rd4, %rd5; st.global.{dty} [%rd9], %y;\n\
 ret;\n}}\n"
    )
}

// ---------------------------------------------------------------------------------
// Operands.

/// splitmix64: the operand sets' random lanes (fixed seeds, so a regenerated file has
/// the same operands).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The special operands of a class: widths' extremes, shift counts at and past the
/// width, signed zeros, subnormals, infinities, quiet and signalling NaNs.
fn specials(class: &str) -> [u64; SPECIALS] {
    match class {
        "i16" => [
            0, 1, 2, 15, 16, 17, 0x7fff, 0x8000, 0xffff, 0xfffe, 0x8001, 0xff, 0x100, 0x1234,
            0xbeef, 33,
        ],
        "i32" => [
            0,
            1,
            2,
            31,
            32,
            33,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0xffff_fffe,
            0x8000_0001,
            0xffff,
            0x1_0000,
            0x1234_5678,
            0xdead_beef,
            65,
        ],
        "i64" => [
            0,
            1,
            2,
            63,
            64,
            65,
            i64::MAX as u64,
            i64::MIN as u64,
            u64::MAX,
            u64::MAX - 1,
            i64::MIN as u64 + 1,
            0xffff_ffff,
            0x1_0000_0000,
            0x0123_4567_89ab_cdef,
            0xdead_beef_cafe_babe,
            31,
        ],
        "f16" => [
            0x0000, 0x8000, 0x3c00, 0xbe00, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfc00, 0x7c00, 0x7e00,
            0xfc01, 0x3555, 0x6401, 0x7800, 0xd801,
        ],
        "bf16" => [
            0x0000, 0x8000, 0x3f80, 0xbfc0, 0x0001, 0x807f, 0x0080, 0x7f7f, 0xff80, 0x7f80, 0x7fc0,
            0xff81, 0x3eab, 0x4b01, 0x4f00, 0xcf01,
        ],
        "f32" => [
            0x0000_0000,
            0x8000_0000,
            0x3f80_0000,
            0xbfc0_0000,
            0x0000_0001,
            0x807f_ffff,
            0x0080_0000,
            0x7f7f_ffff,
            0xff80_0000,
            0x7f80_0000,
            0x7fc0_0000,
            0xff80_0001,
            0x3eaa_aaab,
            0x4b00_0001,
            0x4f00_0000,
            0xcf00_0001,
        ],
        "f64" => [
            0,
            0x8000_0000_0000_0000,
            0x3ff0_0000_0000_0000,
            0xbff8_0000_0000_0000,
            1,
            0x800f_ffff_ffff_ffff,
            0x0010_0000_0000_0000,
            0x7fef_ffff_ffff_ffff,
            0xfff0_0000_0000_0000,
            0x7ff0_0000_0000_0000,
            0x7ff8_0000_0000_0000,
            0xfff0_0000_0000_0001,
            0x3fd5_5555_5555_5555,
            0x4330_0000_0000_0001,
            0x43e0_0000_0000_0000,
            0xc1e0_0000_0020_0000,
        ],
        other => panic!("no operand class {other}"),
    }
}

/// A random operand of a class: raw bits, small magnitudes, and (floats) values with
/// small exponents and few mantissa bits (halves and quarters: rounding ties).
fn random(class: &str, rng: &mut Rng) -> u64 {
    let r = rng.next();
    let pick = rng.next() % 3;
    match class {
        "i16" | "i32" | "i64" => {
            let bits = match class {
                "i16" => 16,
                "i32" => 32,
                _ => 64,
            };
            let v = match pick {
                0 => r,
                1 => r >> (rng.next() % bits as u64 + (64 - bits as u64)),
                _ => (-((r % 300) as i64)) as u64,
            };
            v & mask(bits)
        }
        "f32" => match pick {
            0 => r & 0xffff_ffff,
            1 => {
                let e = 127 - 30 + (r % 62);
                ((r >> 8) & 0x8000_0000) | (e << 23) | ((r >> 20) & 0x7f_ffff)
            }
            _ => {
                let v =
                    ((r % 4001) as f32 - 2000.0) / [1.0f32, 2.0, 4.0, 8.0][(r >> 40) as usize % 4];
                v.to_bits() as u64
            }
        },
        "f64" => match pick {
            0 => r,
            1 => {
                let e = 1023 - 60 + (r % 122);
                (r & 0x8000_0000_0000_0000) | (e << 52) | ((r >> 12) & 0xf_ffff_ffff_ffff)
            }
            _ => {
                let v =
                    ((r % 4001) as f64 - 2000.0) / [1.0f64, 2.0, 4.0, 8.0][(r >> 40) as usize % 4];
                v.to_bits()
            }
        },
        "f16" => match pick {
            0 => r & 0xffff,
            1 => {
                let e = 15 - 8 + (r % 16);
                ((r >> 8) & 0x8000) | (e << 10) | ((r >> 20) & 0x3ff)
            }
            _ => {
                // k/4 for small k: exact in f16.
                let v = ((r % 401) as f32 - 200.0) / 4.0;
                f32_to_f16_exact(v)
            }
        },
        "bf16" => match pick {
            0 => r & 0xffff,
            1 => {
                let e = 127 - 20 + (r % 40);
                ((r >> 8) & 0x8000) | (e << 7) | ((r >> 20) & 0x7f)
            }
            _ => {
                let v = ((r % 201) as f32 - 100.0) / 2.0;
                (v.to_bits() >> 16) as u64
            }
        },
        other => panic!("no operand class {other}"),
    }
}

/// `v` (k/4 with |k| <= 200: exact in f16) as f16 bits.
fn f32_to_f16_exact(v: f32) -> u64 {
    if v == 0.0 {
        return if v.is_sign_negative() { 0x8000 } else { 0 };
    }
    let bits = v.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let e = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let m = (bits >> 13) & 0x3ff;
    (sign | ((e as u32) << 10) | m) as u64
}

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The operand set of a class: the specials crossed (a by b, c cycling), then random.
pub fn operands(class: &str) -> Vec<[u64; 3]> {
    let s = specials(class);
    let seed = class
        .bytes()
        .fold(0x5eed_u64, |h, b| h.wrapping_mul(31) ^ b as u64);
    let mut rng = Rng(seed);
    let mut v = Vec::with_capacity(LANES);
    for i in 0..SPECIALS * SPECIALS {
        v.push([s[i % SPECIALS], s[i / SPECIALS], s[(i * 7 + 3) % SPECIALS]]);
    }
    while v.len() < LANES {
        v.push([
            random(class, &mut rng),
            random(class, &mut rng),
            random(class, &mut rng),
        ]);
    }
    v
}

// ---------------------------------------------------------------------------------
// Cases.

/// The cases of every family, by file name (`fixtures/isa-goldens/<family>.txt`).
pub fn families() -> Vec<(&'static str, Vec<Case>)> {
    vec![
        ("integer", integer()),
        ("bits", bits()),
        ("carry", carry()),
        ("f32", float("f32")),
        ("f64", float("f64")),
        ("half", half()),
        ("convert", convert()),
        ("approx", approx()),
        ("compare", compare()),
        ("atomic", atomic()),
        ("warp", warp()),
    ]
}

/// Adds a case, named by its body's first instruction that is not operand set-up
/// (moves, masks, address arithmetic, conversions before the operation), made unique.
fn push(v: &mut Vec<Case>, sty: &str, dty: &str, tol: &str, inputs: &str, body: &str) {
    const SETUP: [&str; 6] = [
        "mov.",
        "add.s64",
        "st.global",
        "and.b32",
        "setp.ne.",
        "cvt.",
    ];
    let insts: Vec<&str> = body
        .split(';')
        .filter_map(|i| i.split_whitespace().next())
        .collect();
    let first = insts
        .iter()
        .find(|i| !SETUP.iter().any(|s| i.starts_with(s)))
        .or(insts.first())
        .copied()
        .unwrap_or("?");
    let mut name = first.to_string();
    let mut n = 2;
    while v.iter().any(|c| c.name == name) {
        name = format!("{first}#{n}");
        n += 1;
    }
    v.push(Case {
        name,
        sty: sty.into(),
        dty: dty.into(),
        tol: tol.into(),
        inputs: inputs.into(),
        body: body.into(),
    });
}

fn int_class(t: &str) -> &'static str {
    match &t[1..] {
        "8" | "16" => "i16",
        "32" => "i32",
        _ => "i64",
    }
}

fn integer() -> Vec<Case> {
    let mut v = vec![];
    for t in ["u16", "s16", "u32", "s32", "u64", "s64"] {
        let c = int_class(t);
        for op in ["add", "sub", "mul.lo", "mul.hi", "div", "rem", "min", "max"] {
            push(&mut v, t, t, "exact", c, &format!("{op}.{t} %y, %x1, %x2;"));
        }
        for op in ["mad.lo", "mad.hi"] {
            push(
                &mut v,
                t,
                t,
                "exact",
                c,
                &format!("{op}.{t} %y, %x1, %x2, %x3;"),
            );
        }
        if t.starts_with('s') {
            push(&mut v, t, t, "exact", c, &format!("neg.{t} %y, %x1;"));
            push(&mut v, t, t, "exact", c, &format!("abs.{t} %y, %x1;"));
        }
        if !t.ends_with("64") {
            let w = format!("{}{}", &t[..1], 2 * t[1..].parse::<u32>().unwrap());
            push(
                &mut v,
                t,
                &w,
                "exact",
                c,
                &format!("mul.wide.{t} %y, %x1, %x2;"),
            );
            push(
                &mut v,
                t,
                &w,
                "exact",
                c,
                &format!("cvt.{w}.{t} %y, %x3; mad.wide.{t} %y, %x1, %x2, %y;"),
            );
        }
        push(
            &mut v,
            t,
            t,
            "exact",
            c,
            &format!("sad.{t} %y, %x1, %x2, %x3;"),
        );
    }
    for op in ["add.sat", "sub.sat"] {
        push(
            &mut v,
            "s32",
            "s32",
            "exact",
            "i32",
            &format!("{op}.s32 %y, %x1, %x2;"),
        );
    }
    for op in ["min.relu", "max.relu"] {
        push(
            &mut v,
            "s32",
            "s32",
            "exact",
            "i32",
            &format!("{op}.s32 %y, %x1, %x2;"),
        );
    }
    for t in ["u32", "s32"] {
        for hl in ["lo", "hi"] {
            push(
                &mut v,
                t,
                t,
                "exact",
                "i32",
                &format!("mul24.{hl}.{t} %y, %x1, %x2;"),
            );
            push(
                &mut v,
                t,
                t,
                "exact",
                "i32",
                &format!("mad24.{hl}.{t} %y, %x1, %x2, %x3;"),
            );
        }
    }
    for (a, b) in [
        ("u32", "u32"),
        ("s32", "s32"),
        ("u32", "s32"),
        ("s32", "u32"),
    ] {
        push(
            &mut v,
            "u32",
            "u32",
            "exact",
            "i32",
            &format!("dp4a.{a}.{b} %y, %x1, %x2, %x3;"),
        );
        for hl in ["lo", "hi"] {
            push(
                &mut v,
                "u32",
                "u32",
                "exact",
                "i32",
                &format!("dp2a.{hl}.{a}.{b} %y, %x1, %x2, %x3;"),
            );
        }
    }
    v
}

fn bits() -> Vec<Case> {
    let mut v = vec![];
    for t in ["b16", "b32", "b64"] {
        let c = int_class(t);
        for op in ["and", "or", "xor"] {
            push(&mut v, t, t, "exact", c, &format!("{op}.{t} %y, %x1, %x2;"));
        }
        for op in ["not", "cnot"] {
            push(&mut v, t, t, "exact", c, &format!("{op}.{t} %y, %x1;"));
        }
        push(&mut v, t, t, "exact", c, &format!("shl.{t} %y, %x1, %s2;"));
        push(&mut v, t, t, "exact", c, &format!("shr.{t} %y, %x1, %s2;"));
    }
    for t in ["u16", "s16", "u32", "s32", "u64", "s64"] {
        push(
            &mut v,
            t,
            t,
            "exact",
            int_class(t),
            &format!("shr.{t} %y, %x1, %s2;"),
        );
    }
    for (t, w) in [("b32", 32), ("b64", 64), ("s32", 32), ("u64", 64)] {
        for k in [0, 1, w - 1, w, w + 1] {
            let op = if t.starts_with('s') { "shr" } else { "shl" };
            push(
                &mut v,
                t,
                t,
                "exact",
                int_class(t),
                &format!("{op}.{t} %y, %x1, {k};"),
            );
        }
    }
    for t in ["b32", "b64"] {
        let c = int_class(t);
        push(&mut v, t, "u32", "exact", c, &format!("popc.{t} %y, %x1;"));
        push(&mut v, t, "u32", "exact", c, &format!("clz.{t} %y, %x1;"));
        push(&mut v, t, t, "exact", c, &format!("brev.{t} %y, %x1;"));
        push(
            &mut v,
            t,
            t,
            "exact",
            c,
            &format!("bfi.{t} %y, %x1, %x2, %s3, %s2;"),
        );
    }
    for t in ["u32", "s32", "u64", "s64"] {
        let c = int_class(t);
        push(&mut v, t, "u32", "exact", c, &format!("bfind.{t} %y, %x1;"));
        push(
            &mut v,
            t,
            "u32",
            "exact",
            c,
            &format!("bfind.shiftamt.{t} %y, %x1;"),
        );
        push(
            &mut v,
            t,
            t,
            "exact",
            c,
            &format!("bfe.{t} %y, %x1, %s2, %s3;"),
        );
    }
    for lut in [
        "0x96", "0xe8", "0xca", "0x80", "0xfe", "0x1e", "0x00", "0xff", "0x6a",
    ] {
        push(
            &mut v,
            "b32",
            "b32",
            "exact",
            "i32",
            &format!("lop3.b32 %y, %x1, %x2, %x3, {lut};"),
        );
    }
    push(
        &mut v,
        "b32",
        "b32",
        "exact",
        "i32",
        "prmt.b32 %y, %x1, %x2, %s3;",
    );
    for mode in ["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"] {
        push(
            &mut v,
            "b32",
            "b32",
            "exact",
            "i32",
            &format!("prmt.b32.{mode} %y, %x1, %x2, %s3;"),
        );
    }
    for dir in ["l", "r"] {
        for m in ["wrap", "clamp"] {
            push(
                &mut v,
                "b32",
                "b32",
                "exact",
                "i32",
                &format!("shf.{dir}.{m}.b32 %y, %x1, %x2, %s3;"),
            );
        }
    }
    for m in ["clamp", "wrap"] {
        push(
            &mut v,
            "b32",
            "b32",
            "exact",
            "i32",
            &format!("bmsk.{m}.b32 %y, %s1, %s2;"),
        );
    }
    push(
        &mut v,
        "b32",
        "b32",
        "exact",
        "i32",
        "vabsdiff4.u32.u32.u32.add %y, %x1, %x2, %x3;",
    );
    push(
        &mut v,
        "b32",
        "b32",
        "exact",
        "i32",
        "mov.b32 {%h1, %h2}, %s1; mov.b32 %y, {%h2, %h1};",
    );
    push(
        &mut v,
        "b64",
        "b64",
        "exact",
        "i64",
        "mov.b64 {%t1, %t2}, %v1; mov.b64 %y, {%t2, %t1};",
    );
    v
}

fn carry() -> Vec<Case> {
    let mut v = vec![];
    let bodies = [
        "add.cc.u32 %t1, %s1, %s2; addc.u32 %t2, 0, 0; mov.b64 %y, {%t1, %t2};",
        "add.cc.u32 %t1, %s1, %s2; addc.cc.u32 %t2, %s3, %s1; addc.u32 %t3, 0, 0; add.u32 %t3, %t3, %t1; mov.b64 %y, {%t2, %t3};",
        "sub.cc.u32 %t1, %s1, %s2; subc.u32 %t2, %s3, 0; mov.b64 %y, {%t1, %t2};",
        "sub.cc.u32 %t1, %s1, %s2; subc.cc.u32 %t2, %s3, %s1; subc.u32 %t3, 0, 0; mov.b64 %y, {%t2, %t3};",
        "add.cc.s32 %t1, %s1, %s2; addc.s32 %t2, %s3, 7; mov.b64 %y, {%t1, %t2};",
        "mad.lo.cc.u32 %t1, %s1, %s2, %s3; madc.hi.u32 %t2, %s1, %s2, 0; mov.b64 %y, {%t1, %t2};",
        "mad.hi.cc.u32 %t1, %s1, %s2, %s3; madc.lo.u32 %t2, %s1, %s3, %s2; mov.b64 %y, {%t1, %t2};",
        "mad.lo.cc.u32 %t1, %s1, %s2, %s3; madc.lo.cc.u32 %t2, %s2, %s3, %s1; madc.hi.u32 %t3, %s1, %s3, 0; add.u32 %t3, %t3, %t2; mov.b64 %y, {%t1, %t3};",
        "mad.lo.cc.s32 %t1, %s1, %s2, %s3; madc.hi.s32 %t2, %s1, %s2, %s1; mov.b64 %y, {%t1, %t2};",
        "add.cc.u32 %t1, %s1, %s2; madc.lo.u32 %t2, %s1, %s3, %s2; mov.b64 %y, {%t1, %t2};",
    ];
    for b in bodies {
        push(&mut v, "u32", "b64", "exact", "i32", b);
    }
    let wide = [
        "add.cc.u64 %u1, %v1, %v2; addc.u64 %y, %v3, 0;",
        "sub.cc.u64 %u1, %v1, %v2; subc.u64 %y, %v3, 0;",
        "add.cc.u64 %u1, %v1, %v2; addc.cc.u64 %u2, %v3, %v1; addc.u64 %y, 0, 0;",
        "mad.lo.cc.u64 %u1, %v1, %v2, %v3; madc.hi.u64 %y, %v1, %v2, 0;",
        "mad.lo.cc.u64 %u1, %v1, %v2, %v3; madc.hi.cc.u64 %u2, %v1, %v2, %v3; addc.u64 %y, %u2, 0;",
    ];
    for b in wide {
        push(&mut v, "u64", "u64", "exact", "i64", b);
    }
    v
}

fn float(t: &str) -> Vec<Case> {
    let mut v = vec![];
    let f32 = t == "f32";
    let ftzs: &[&str] = if f32 { &["", ".ftz"] } else { &[""] };
    let sats: &[&str] = if f32 { &["", ".sat"] } else { &[""] };
    for r in ["rn", "rz", "rm", "rp"] {
        for ftz in ftzs {
            for sat in sats {
                for op in ["add", "sub", "mul"] {
                    push(
                        &mut v,
                        t,
                        t,
                        "exact",
                        t,
                        &format!("{op}.{r}{ftz}{sat}.{t} %y, %x1, %x2;"),
                    );
                }
                push(
                    &mut v,
                    t,
                    t,
                    "exact",
                    t,
                    &format!("fma.{r}{ftz}{sat}.{t} %y, %x1, %x2, %x3;"),
                );
            }
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("div.{r}{ftz}.{t} %y, %x1, %x2;"),
            );
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("sqrt.{r}{ftz}.{t} %y, %x1;"),
            );
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("rcp.{r}{ftz}.{t} %y, %x1;"),
            );
        }
    }
    for ftz in ftzs {
        for op in ["add", "sub", "mul"] {
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("{op}{ftz}.{t} %y, %x1, %x2;"),
            );
        }
        push(
            &mut v,
            t,
            t,
            "exact",
            t,
            &format!("mad.rn{ftz}.{t} %y, %x1, %x2, %x3;"),
        );
        for op in ["min", "max"] {
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("{op}{ftz}.{t} %y, %x1, %x2;"),
            );
            if f32 {
                push(
                    &mut v,
                    t,
                    t,
                    "exact",
                    t,
                    &format!("{op}{ftz}.NaN.{t} %y, %x1, %x2;"),
                );
            }
        }
        push(&mut v, t, t, "exact", t, &format!("neg{ftz}.{t} %y, %x1;"));
        push(&mut v, t, t, "exact", t, &format!("abs{ftz}.{t} %y, %x1;"));
    }
    if f32 {
        push(&mut v, t, t, "exact", t, "cvt.sat.f32.f32 %y, %x1;");
        push(&mut v, t, t, "exact", t, "cvt.ftz.f32.f32 %y, %x1;");
        push(
            &mut v,
            t,
            t,
            "exact",
            t,
            "add.rn.sat.f32 %y, %x1, 0f00000000;",
        );
    }
    push(
        &mut v,
        t,
        t,
        "exact",
        t,
        &format!("copysign.{t} %y, %x1, %x2;"),
    );
    for k in [
        "finite",
        "infinite",
        "number",
        "notanumber",
        "normal",
        "subnormal",
    ] {
        push(
            &mut v,
            t,
            "u32",
            "exact",
            t,
            &format!("testp.{k}.{t} %p1, %x1; selp.u32 %y, 1, 0, %p1;"),
        );
    }
    push(
        &mut v,
        t,
        t,
        "exact",
        t,
        &format!("setp.lt.u32 %p1, %s3, 0x80000000; selp.{t} %y, %x1, %x2, %p1;"),
    );
    v
}

fn half() -> Vec<Case> {
    let mut v = vec![];
    for ftz in ["", ".ftz"] {
        for sat in ["", ".sat"] {
            for op in ["add", "sub", "mul"] {
                push(
                    &mut v,
                    "f16",
                    "f16",
                    "exact",
                    "f16",
                    &format!("{op}.rn{ftz}{sat}.f16 %y, %x1, %x2;"),
                );
            }
            push(
                &mut v,
                "f16",
                "f16",
                "exact",
                "f16",
                &format!("fma.rn{ftz}{sat}.f16 %y, %x1, %x2, %x3;"),
            );
        }
    }
    for op in ["min", "max"] {
        push(
            &mut v,
            "f16",
            "f16",
            "exact",
            "f16",
            &format!("{op}.f16 %y, %x1, %x2;"),
        );
        push(
            &mut v,
            "f16",
            "f16",
            "exact",
            "f16",
            &format!("{op}.NaN.f16 %y, %x1, %x2;"),
        );
    }
    push(&mut v, "f16", "f16", "exact", "f16", "neg.f16 %y, %x1;");
    push(&mut v, "f16", "f16", "exact", "f16", "abs.f16 %y, %x1;");
    for op in ["add", "sub", "mul"] {
        push(
            &mut v,
            "bf16",
            "bf16",
            "exact",
            "bf16",
            &format!("{op}.rn.bf16 %y, %x1, %x2;"),
        );
    }
    push(
        &mut v,
        "bf16",
        "bf16",
        "exact",
        "bf16",
        "fma.rn.bf16 %y, %x1, %x2, %x3;",
    );
    for op in ["min", "max"] {
        push(
            &mut v,
            "bf16",
            "bf16",
            "exact",
            "bf16",
            &format!("{op}.bf16 %y, %x1, %x2;"),
        );
    }
    push(&mut v, "bf16", "bf16", "exact", "bf16", "neg.bf16 %y, %x1;");
    push(&mut v, "bf16", "bf16", "exact", "bf16", "abs.bf16 %y, %x1;");
    // Packed pairs: (a, b), (b, c) and (c, a) as the operands' halves.
    let pack = "mov.b32 %t1, {%x1, %x2}; mov.b32 %t2, {%x2, %x3}; mov.b32 %t3, {%x3, %x1};";
    for (t, class) in [("f16x2", "f16"), ("bf16x2", "bf16")] {
        for op in ["add.rn", "sub.rn", "mul.rn", "min", "max"] {
            push(
                &mut v,
                class,
                "b32",
                "exact",
                class,
                &format!("{pack} {op}.{t} %y, %t1, %t2;"),
            );
        }
        push(
            &mut v,
            class,
            "b32",
            "exact",
            class,
            &format!("{pack} fma.rn.{t} %y, %t1, %t2, %t3;"),
        );
        push(
            &mut v,
            class,
            "b32",
            "exact",
            class,
            &format!("{pack} neg.{t} %y, %t1;"),
        );
        push(
            &mut v,
            class,
            "b32",
            "exact",
            class,
            &format!("{pack} abs.{t} %y, %t1;"),
        );
    }
    v
}

fn convert() -> Vec<Case> {
    let mut v = vec![];
    let ints = ["u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64"];
    let int_src = |t: &str| -> &'static str { int_class(t) };
    // Integer to integer, plain and saturating.
    for s in ints {
        for d in ints {
            if s == d {
                continue;
            }
            push(
                &mut v,
                s,
                d,
                "exact",
                int_src(s),
                &format!("cvt.{d}.{s} %y, %x1;"),
            );
            push(
                &mut v,
                s,
                d,
                "exact",
                int_src(s),
                &format!("cvt.sat.{d}.{s} %y, %x1;"),
            );
        }
    }
    // Integer to float, each rounding.
    for s in ints {
        for d in ["f16", "f32", "f64"] {
            for r in ["rn", "rz", "rm", "rp"] {
                push(
                    &mut v,
                    s,
                    d,
                    "exact",
                    int_src(s),
                    &format!("cvt.{r}.{d}.{s} %y, %x1;"),
                );
            }
        }
    }
    // Float to integer, each rounding, plain and (f32) flushing.
    for s in ["f16", "f32", "f64"] {
        for d in ints {
            for r in ["rni", "rzi", "rmi", "rpi"] {
                push(
                    &mut v,
                    s,
                    d,
                    "exact",
                    s,
                    &format!("cvt.{r}.{d}.{s} %y, %x1;"),
                );
                if s == "f32" && r == "rni" {
                    push(
                        &mut v,
                        s,
                        d,
                        "exact",
                        s,
                        &format!("cvt.{r}.ftz.{d}.{s} %y, %x1;"),
                    );
                }
            }
        }
    }
    // Float to float.
    for (s, d, rs) in [
        ("f32", "f16", &["rn", "rz", "rm", "rp"][..]),
        ("f64", "f16", &["rn", "rz", "rm", "rp"][..]),
        ("f64", "f32", &["rn", "rz", "rm", "rp"][..]),
        ("f32", "bf16", &["rn", "rz", "rm", "rp"][..]),
        ("f64", "bf16", &["rn", "rz", "rm", "rp"][..]),
    ] {
        for r in rs {
            push(
                &mut v,
                s,
                d,
                "exact",
                s,
                &format!("cvt.{r}.{d}.{s} %y, %x1;"),
            );
        }
    }
    push(
        &mut v,
        "f64",
        "f32",
        "exact",
        "f64",
        "cvt.rn.ftz.f32.f64 %y, %x1;",
    );
    push(
        &mut v,
        "f32",
        "f16",
        "exact",
        "f32",
        "cvt.rn.relu.f16.f32 %y, %x1;",
    );
    push(
        &mut v,
        "f32",
        "f16",
        "exact",
        "f32",
        "cvt.rn.satfinite.f16.f32 %y, %x1;",
    );
    push(
        &mut v,
        "f32",
        "bf16",
        "exact",
        "f32",
        "cvt.rn.relu.bf16.f32 %y, %x1;",
    );
    for (s, d) in [
        ("f16", "f32"),
        ("f16", "f64"),
        ("f32", "f64"),
        ("bf16", "f32"),
    ] {
        push(&mut v, s, d, "exact", s, &format!("cvt.{d}.{s} %y, %x1;"));
    }
    push(
        &mut v,
        "f32",
        "f32",
        "exact",
        "f32",
        "cvt.ftz.f64.f32 %g1, %x1; cvt.rn.f32.f64 %y, %g1;",
    );
    // Round to an integral value in the same type.
    for t in ["f32", "f64"] {
        for r in ["rni", "rzi", "rmi", "rpi"] {
            push(
                &mut v,
                t,
                t,
                "exact",
                t,
                &format!("cvt.{r}.{t}.{t} %y, %x1;"),
            );
        }
    }
    push(
        &mut v,
        "f32",
        "f32",
        "exact",
        "f32",
        "cvt.rzi.ftz.f32.f32 %y, %x1;",
    );
    // Packed and tf32.
    push(
        &mut v,
        "f32",
        "b32",
        "exact",
        "f32",
        "cvt.rn.f16x2.f32 %y, %x1, %x2;",
    );
    push(
        &mut v,
        "f32",
        "b32",
        "exact",
        "f32",
        "cvt.rn.bf16x2.f32 %y, %x1, %x2;",
    );
    push(
        &mut v,
        "f32",
        "b32",
        "exact",
        "f32",
        "cvt.rna.tf32.f32 %y, %x1;",
    );
    push(
        &mut v,
        "f32",
        "b32",
        "exact",
        "f32",
        "cvt.rn.tf32.f32 %y, %x1;",
    );
    push(
        &mut v,
        "f32",
        "b32",
        "exact",
        "f32",
        "cvt.rz.tf32.f32 %y, %x1;",
    );
    v
}

fn approx() -> Vec<Case> {
    let mut v = vec![];
    let f = "f32";
    for ftz in ["", ".ftz"] {
        push(
            &mut v,
            f,
            f,
            "ulp=2",
            f,
            &format!("rcp.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "ulp=3",
            f,
            &format!("sqrt.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "ulp=4",
            f,
            &format!("rsqrt.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "ulp=4",
            f,
            &format!("ex2.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "abs=2^-21 ulp=4",
            f,
            &format!("lg2.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "abs=2^-19.5 argmax=3.1415927",
            f,
            &format!("sin.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "abs=2^-19.5 argmax=3.1415927",
            f,
            &format!("cos.approx{ftz}.f32 %y, %x1;"),
        );
        push(
            &mut v,
            f,
            f,
            "ulp=4",
            f,
            &format!("div.approx{ftz}.f32 %y, %x1, %x2;"),
        );
        push(
            &mut v,
            f,
            f,
            "ulp=4",
            f,
            &format!("div.full{ftz}.f32 %y, %x1, %x2;"),
        );
    }
    push(&mut v, f, f, "rel=2^-10", f, "tanh.approx.f32 %y, %x1;");
    push(
        &mut v,
        "f64",
        "f64",
        "rel=2^-19",
        "f64",
        "rcp.approx.ftz.f64 %y, %x1;",
    );
    push(
        &mut v,
        "f64",
        "f64",
        "rel=2^-19",
        "f64",
        "rsqrt.approx.f64 %y, %x1;",
    );
    v
}

fn compare() -> Vec<Case> {
    let mut v = vec![];
    let fcmp = [
        "eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan",
    ];
    for t in ["f32", "f64", "f16"] {
        for c in fcmp {
            push(
                &mut v,
                t,
                "u32",
                "exact",
                t,
                &format!("setp.{c}.{t} %p1, %x1, %x2; selp.u32 %y, 1, 0, %p1;"),
            );
        }
    }
    for c in ["lt", "equ", "gtu"] {
        push(
            &mut v,
            "f32",
            "u32",
            "exact",
            "f32",
            &format!("setp.{c}.ftz.f32 %p1, %x1, %x2; selp.u32 %y, 1, 0, %p1;"),
        );
        push(
            &mut v,
            "f32",
            "u32",
            "exact",
            "f32",
            &format!("set.{c}.u32.f32 %y, %x1, %x2;"),
        );
        push(
            &mut v,
            "f32",
            "f32",
            "exact",
            "f32",
            &format!("set.{c}.f32.f32 %y, %x1, %x2;"),
        );
    }
    for t in ["u16", "s16", "u32", "s32", "u64", "s64", "b32"] {
        let cmps: &[&str] = match &t[..1] {
            "u" => &["eq", "ne", "lo", "ls", "hi", "hs", "lt", "ge"],
            "s" => &["eq", "ne", "lt", "le", "gt", "ge"],
            _ => &["eq", "ne"],
        };
        for c in cmps {
            push(
                &mut v,
                t,
                "u32",
                "exact",
                int_class(t),
                &format!("setp.{c}.{t} %p1, %x1, %x2; selp.u32 %y, 1, 0, %p1;"),
            );
        }
    }
    // Predicate logic and combining comparisons.
    push(&mut v, "s32", "u32", "exact", "i32", "setp.ne.s32 %p3, %x3, 0; setp.lt.and.s32 %p1|%p2, %x1, %x2, %p3; selp.u32 %t1, 1, 0, %p1; selp.u32 %t2, 2, 0, %p2; or.b32 %y, %t1, %t2;");
    push(&mut v, "s32", "u32", "exact", "i32", "setp.gt.s32 %p1, %x1, %x2; setp.lt.s32 %p2, %x2, %x3; xor.pred %p3, %p1, %p2; and.pred %p1, %p3, !%p2; selp.u32 %y, 1, 0, %p1;");
    push(
        &mut v,
        "s32",
        "s32",
        "exact",
        "i32",
        "setp.ne.s32 %p1, %x3, 0; selp.s32 %y, %x1, %x2, %p1;",
    );
    v
}

/// Atomics on the thread's own slot of `d` (first set to `a`): the old value and the
/// value left in memory.
fn atomic() -> Vec<Case> {
    let mut v = vec![];
    let at = "add.s64 %rd10, %rd4, %rd5; st.global.u64 [%rd10], %v1;";
    for (op, t) in [
        ("add", "u32"),
        ("min", "u32"),
        ("max", "u32"),
        ("min", "s32"),
        ("max", "s32"),
        ("inc", "u32"),
        ("dec", "u32"),
        ("exch", "b32"),
        ("and", "b32"),
        ("or", "b32"),
        ("xor", "b32"),
    ] {
        push(&mut v, "u32", "b64", "exact", "i32", &format!("{at} atom.global.{op}.{t} %t1, [%rd10], %s2; ld.global.u32 %t2, [%rd10]; mov.b64 %y, {{%t1, %t2}};"));
    }
    push(&mut v, "u32", "b64", "exact", "i32", &format!("{at} atom.global.cas.b32 %t1, [%rd10], %s2, %s3; ld.global.u32 %t2, [%rd10]; mov.b64 %y, {{%t1, %t2}};"));
    push(
        &mut v,
        "u32",
        "b64",
        "exact",
        "i32",
        &format!("{at} red.global.add.u32 [%rd10], %s2; ld.global.u64 %y, [%rd10];"),
    );
    push(&mut v, "f32", "b64", "exact", "f32", &format!("{at} atom.global.add.f32 %f1, [%rd10], %x2; ld.global.f32 %f2, [%rd10]; mov.b64 %y, {{%f1, %f2}};"));
    push(
        &mut v,
        "f32",
        "b64",
        "exact",
        "f32",
        &format!("{at} red.global.add.f32 [%rd10], %x2; ld.global.u64 %y, [%rd10];"),
    );
    for (op, t) in [
        ("add", "u64"),
        ("min", "u64"),
        ("max", "s64"),
        ("exch", "b64"),
        ("and", "b64"),
    ] {
        push(
            &mut v,
            "u64",
            "u64",
            "exact",
            "i64",
            &format!("{at} atom.global.{op}.{t} %y, [%rd10], %v2;"),
        );
        push(
            &mut v,
            "u64",
            "u64",
            "exact",
            "i64",
            &format!("{at} atom.global.{op}.{t} %u1, [%rd10], %v2; ld.global.u64 %y, [%rd10];"),
        );
    }
    push(
        &mut v,
        "u64",
        "u64",
        "exact",
        "i64",
        &format!("{at} atom.global.cas.b64 %u1, [%rd10], %v2, %v3; ld.global.u64 %y, [%rd10];"),
    );
    push(
        &mut v,
        "f64",
        "f64",
        "exact",
        "f64",
        &format!("{at} atom.global.add.f64 %y, [%rd10], %x2;"),
    );
    push(
        &mut v,
        "f64",
        "u64",
        "exact",
        "f64",
        &format!("{at} atom.global.add.f64 %g1, [%rd10], %x2; ld.global.u64 %y, [%rd10];"),
    );
    v
}

/// Warp-wide operations over full warps (384 threads: 12 warps); each lane's operands
/// are its own.
fn warp() -> Vec<Case> {
    let mut v = vec![];
    for body in [
        "shfl.sync.bfly.b32 %y, %s1, 3, 0x1f, 0xffffffff;",
        "shfl.sync.down.b32 %y|%p1, %s1, 5, 0x1f, 0xffffffff; @!%p1 xor.b32 %y, %y, 0x80000000;",
        "shfl.sync.up.b32 %y|%p1, %s1, 7, 0, 0xffffffff; @!%p1 xor.b32 %y, %y, 0x80000000;",
        "and.b32 %t1, %s2, 31; shfl.sync.idx.b32 %y, %s1, %t1, 0x1f, 0xffffffff;",
        "and.b32 %t1, %s2, 31; shfl.sync.idx.b32 %y|%p1, %s1, %t1, 0x0f, 0xffffffff; @!%p1 xor.b32 %y, %y, 0x80000000;",
        "and.b32 %t1, %s1, 1; setp.ne.u32 %p1, %t1, 0; vote.sync.ballot.b32 %y, %p1, 0xffffffff;",
        "and.b32 %t1, %s1, 1; setp.ne.u32 %p1, %t1, 0; vote.sync.any.pred %p2, %p1, 0xffffffff; vote.sync.all.pred %p3, %p1, 0xffffffff; selp.u32 %t2, 1, 0, %p2; selp.u32 %t3, 2, 0, %p3; or.b32 %y, %t2, %t3;",
        "and.b32 %t1, %s3, 3; setp.ne.u32 %p1, %t1, 0; vote.sync.uni.pred %p2, %p1, 0xffffffff; selp.u32 %y, 1, 0, %p2;",
        "and.b32 %t1, %s1, 3; match.any.sync.b32 %y, %t1, 0xffffffff;",
        "match.any.sync.b32 %y, %s1, 0xffffffff;",
        "and.b32 %t1, %s1, 0; match.all.sync.b32 %y|%p1, %t1, 0xffffffff; selp.u32 %t2, 1, 0, %p1; add.u32 %y, %y, %t2;",
        "match.all.sync.b32 %y|%p1, %s1, 0xffffffff; selp.u32 %t2, 1, 0, %p1; add.u32 %y, %y, %t2;",
        "redux.sync.add.u32 %y, %s1, 0xffffffff;",
        "redux.sync.min.u32 %y, %s1, 0xffffffff;",
        "redux.sync.max.s32 %y, %s1, 0xffffffff;",
        "redux.sync.min.s32 %y, %s1, 0xffffffff;",
        "redux.sync.and.b32 %y, %s1, 0xffffffff;",
        "redux.sync.or.b32 %y, %s1, 0xffffffff;",
        "redux.sync.xor.b32 %y, %s1, 0xffffffff;",
        "activemask.b32 %y;",
    ] {
        push(&mut v, "u32", "u32", "exact", "i32", body);
    }
    v
}

// ---------------------------------------------------------------------------------
// Running and comparing.

/// Runs every case on `b` (a current context): the outcome of each.
pub fn run_cases(
    b: &dyn Backend,
    inputs: &BTreeMap<String, Vec<[u64; 3]>>,
    cases: &[Case],
) -> Vec<Outcome> {
    let bytes = LANES * 8;
    let alloc = |what: &str| {
        b.mem_alloc(bytes)
            .unwrap_or_else(|e| panic!("cuMemAlloc for {what}: {e}"))
    };
    let (pa, pb, pc, pd) = (alloc("a"), alloc("b"), alloc("c"), alloc("d"));
    let mut loaded: Option<&str> = None;
    let mut out = Vec::with_capacity(cases.len());
    for case in cases {
        let lanes = &inputs[&case.inputs];
        if loaded != Some(case.inputs.as_str()) {
            for (k, p) in [(0, pa), (1, pb), (2, pc)] {
                let data: Vec<u8> = lanes.iter().flat_map(|l| l[k].to_le_bytes()).collect();
                // SAFETY: `p` holds LANES * 8 bytes, `data` as many.
                unsafe { b.memcpy_htod(p, &data) }.unwrap_or_else(|e| panic!("cuMemcpyHtoD: {e}"));
            }
            loaded = Some(&case.inputs);
        }
        out.push(run_one(b, case, lanes.len(), [pa, pb, pc, pd]));
    }
    for p in [pa, pb, pc, pd] {
        let _ = b.mem_free(p);
    }
    out
}

fn run_one(b: &dyn Backend, case: &Case, n: usize, [pa, pb, pc, pd]: [DevicePtr; 4]) -> Outcome {
    let ptx = kernel(&case.sty, &case.dty, &case.body);
    let module = match b.module_load_ptx_named(&case.name, &ptx) {
        Ok(m) => m,
        Err(e) => return Outcome::Rejected(e.to_string().replace('\n', " ")),
    };
    let f = b
        .module_get_function(&module, "k")
        .unwrap_or_else(|e| panic!("{}: cuModuleGetFunction: {e}", case.name));
    // SAFETY: `pd` holds LANES * 8 bytes.
    unsafe { b.memset_d8(pd, 0, n * 8) }.unwrap_or_else(|e| panic!("cuMemsetD8: {e}"));
    let params: Vec<[u8; 8]> = [pa, pb, pc, pd].iter().map(|p| p.0.to_le_bytes()).collect();
    let args: Vec<&[u8]> = params.iter().map(|p| &p[..]).collect();
    // SAFETY: k(a, b, c, d) reads a, b, c and writes d below n lanes of 8 bytes, which
    // each buffer holds.
    unsafe {
        b.launch(
            &f,
            &LaunchConfig::linear(1, n as u32),
            &Stream::DEFAULT,
            &args,
        )
    }
    .unwrap_or_else(|e| panic!("{}: cuLaunchKernel: {e}", case.name));
    let mut d = vec![0u8; n * 8];
    // SAFETY: `d` holds n * 8 bytes, `pd` as many.
    unsafe { b.memcpy_dtoh(&mut d, pd) }
        .unwrap_or_else(|e| panic!("{}: after the launch: {e}", case.name));
    // SAFETY: nothing of the module is in use after the copy.
    let _ = unsafe { b.module_unload(module) };
    Outcome::Results(
        d.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

// ---------------------------------------------------------------------------------
// The file format.

impl Goldens {
    /// Writes the file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for h in &self.header {
            let _ = writeln!(s, "# {h}");
        }
        for (name, lanes) in &self.inputs {
            let _ = writeln!(s, "inputs\t{name}\t{}", lanes.len());
            for l in lanes {
                let _ = writeln!(s, "{:x} {:x} {:x}", l[0], l[1], l[2]);
            }
        }
        for (c, o) in &self.cases {
            let _ = writeln!(
                s,
                "case\t{}\t{}\t{}\t{}\t{}\t{}",
                c.name, c.sty, c.dty, c.tol, c.inputs, c.body
            );
            match o {
                Outcome::Rejected(why) => {
                    let _ = writeln!(s, "rejected\t{why}");
                }
                Outcome::Results(d) => {
                    for chunk in d.chunks(16) {
                        let line: Vec<String> = chunk.iter().map(|x| format!("{x:x}")).collect();
                        let _ = writeln!(s, "{}", line.join(" "));
                    }
                }
            }
        }
        s
    }

    /// Reads a file's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Goldens, String> {
        let mut g = Goldens::default();
        let mut lines = text.lines().enumerate().peekable();
        let hex = |n: usize, w: &str| {
            u64::from_str_radix(w, 16).map_err(|e| format!("{file}:{}: `{w}`: {e}", n + 1))
        };
        while let Some((n, line)) = lines.next() {
            if let Some(h) = line.strip_prefix("# ") {
                g.header.push(h.to_string());
            } else if let Some(rest) = line.strip_prefix("inputs\t") {
                let (name, count) = rest
                    .split_once('\t')
                    .ok_or(format!("{file}:{}: inputs needs a name and a count", n + 1))?;
                let count: usize = count
                    .parse()
                    .map_err(|e| format!("{file}:{}: {e}", n + 1))?;
                let mut lanes = Vec::with_capacity(count);
                for _ in 0..count {
                    let (n, l) = lines
                        .next()
                        .ok_or(format!("{file}: inputs {name} ends early"))?;
                    let w: Vec<&str> = l.split(' ').collect();
                    if w.len() != 3 {
                        return Err(format!(
                            "{file}:{}: an input lane is three hex numbers",
                            n + 1
                        ));
                    }
                    lanes.push([hex(n, w[0])?, hex(n, w[1])?, hex(n, w[2])?]);
                }
                g.inputs.insert(name.to_string(), lanes);
            } else if let Some(rest) = line.strip_prefix("case\t") {
                let f: Vec<&str> = rest.splitn(6, '\t').collect();
                if f.len() != 6 {
                    return Err(format!("{file}:{}: a case line has six fields", n + 1));
                }
                let case = Case {
                    name: f[0].into(),
                    sty: f[1].into(),
                    dty: f[2].into(),
                    tol: f[3].into(),
                    inputs: f[4].into(),
                    body: f[5].into(),
                };
                let lanes = g
                    .inputs
                    .get(&case.inputs)
                    .ok_or(format!("{file}:{}: no inputs {}", n + 1, case.inputs))?
                    .len();
                let outcome = match lines.peek() {
                    Some((_, l)) if l.starts_with("rejected\t") => {
                        let why = l["rejected\t".len()..].to_string();
                        lines.next();
                        Outcome::Rejected(why)
                    }
                    _ => {
                        let mut d = Vec::with_capacity(lanes);
                        while d.len() < lanes {
                            let (n, l) = lines
                                .next()
                                .ok_or(format!("{file}: case {} ends early", case.name))?;
                            for w in l.split(' ') {
                                d.push(hex(n, w)?);
                            }
                        }
                        if d.len() != lanes {
                            return Err(format!(
                                "{file}: case {} has {} results for {lanes} lanes",
                                case.name,
                                d.len()
                            ));
                        }
                        Outcome::Results(d)
                    }
                };
                g.cases.push((case, outcome));
            } else if !line.is_empty() {
                return Err(format!("{file}:{}: unexpected `{line}`", n + 1));
            }
        }
        Ok(g)
    }
}

/// How a case's results are compared with the GPU's: bit for bit, or (approximate
/// instructions) within twice the PTX ISA's stated bound, since both results are
/// within the bound of the exact value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tolerance {
    /// Units in the last place of the result type.
    pub ulp: Option<u64>,
    /// Absolute difference.
    pub abs: Option<f64>,
    /// Difference relative to the GPU's result.
    pub rel: Option<f64>,
    /// Lanes whose first operand is larger in magnitude are outside the ISA's bound and
    /// not compared.
    pub argmax: Option<f64>,
}

/// `2^-20.5` or `3.14`.
fn number(s: &str) -> Result<f64, String> {
    match s.strip_prefix("2^") {
        Some(e) => e
            .parse::<f64>()
            .map(|e| 2f64.powf(e))
            .map_err(|e| format!("`{s}`: {e}")),
        None => s.parse::<f64>().map_err(|e| format!("`{s}`: {e}")),
    }
}

impl Tolerance {
    /// `exact`, or space-separated `ulp=N abs=E rel=E argmax=X` terms.
    pub fn parse(s: &str) -> Result<Tolerance, String> {
        let mut t = Tolerance::default();
        if s == "exact" {
            return Ok(t);
        }
        for term in s.split(' ') {
            let (k, v) = term
                .split_once('=')
                .ok_or(format!("tolerance term `{term}`"))?;
            match k {
                "ulp" => t.ulp = Some(v.parse().map_err(|e| format!("`{term}`: {e}"))?),
                "abs" => t.abs = Some(number(v)?),
                "rel" => t.rel = Some(number(v)?),
                "argmax" => t.argmax = Some(number(v)?),
                _ => return Err(format!("tolerance term `{term}`")),
            }
        }
        Ok(t)
    }

    /// Whether lane `(a, got)` is compared and agrees with `want` (result type `dty`,
    /// operand type `sty`): `None` when the lane is outside the bound's range.
    pub fn agrees(&self, sty: &str, dty: &str, a: u64, got: u64, want: u64) -> Option<bool> {
        if let Some(max) = self.argmax {
            if as_f64(sty, a).is_some_and(|x| x.abs() > max) {
                return None;
            }
        }
        if got == want {
            return Some(true);
        }
        if *self == Tolerance::default() {
            return Some(false);
        }
        let (Some(g), Some(w)) = (as_f64(dty, got), as_f64(dty, want)) else {
            return Some(false);
        };
        if g.is_nan() || w.is_nan() {
            return Some(g.is_nan() && w.is_nan());
        }
        let ulps_ok = self.ulp.is_some_and(|n| ulps(dty, got, want) <= n);
        let abs_ok = self.abs.is_some_and(|e| (g - w).abs() <= e);
        let rel_ok = self.rel.is_some_and(|e| (g - w).abs() <= e * w.abs());
        Some(ulps_ok || abs_ok || rel_ok)
    }
}

/// A value of float type `t` as f64 (None for other types).
fn as_f64(t: &str, bits: u64) -> Option<f64> {
    match t {
        "f32" => Some(f32::from_bits(bits as u32) as f64),
        "f64" => Some(f64::from_bits(bits)),
        _ => None,
    }
}

/// The distance in representable values between two floats of type `t`.
fn ulps(t: &str, a: u64, b: u64) -> u64 {
    let key = |x: u64| -> i128 {
        let (sign, mag) = match t {
            "f32" => (x >> 31 & 1, (x & 0x7fff_ffff) as i128),
            _ => (x >> 63, (x & 0x7fff_ffff_ffff_ffff) as i128),
        };
        if sign == 1 {
            -mag
        } else {
            mag
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u64::MAX as u128) as u64
}
