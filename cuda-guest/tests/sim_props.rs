//! Property tests: random operands through one-instruction kernels against Rust's own
//! semantics, per PTX type and rounding mode (bit-exact), and the approximate math
//! instructions within the PTX ISA's documented bounds. Every kernel runs on both
//! engines, the interpreter and the JIT, which must agree bit for bit.

use cuda_guest::sim::{Engine, KernelArg, LaunchConfig, SimConfig, Simulator};
use proptest::prelude::*;

const N: usize = 64;

/// A kernel `k` computing `d[i] = OP(a[i], b[i], c[i])` over 8-byte slots: `body` uses
/// `%x1 %x2 %x3` (type `sty`, loaded from a, b, c), `%s2` (b as .u32) and writes `%y`
/// (type `dty`), stored with `st.global.{dty}`.
fn kernel(sty: &str, dty: &str, body: &str) -> String {
    format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n\
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)\n{{\n\
 .reg .b64 %rd<12>; .reg .b32 %r<5>; .reg .{sty} %x<4>; .reg .{dty} %y; .reg .u32 %s2; .reg .pred %p<3>;\n\
 ld.param.u64 %rd1, [pa]; ld.param.u64 %rd2, [pb]; ld.param.u64 %rd3, [pc]; ld.param.u64 %rd4, [pd];\n\
 mov.u32 %r1, %tid.x; mul.wide.u32 %rd5, %r1, 8;\n\
 add.s64 %rd6, %rd1, %rd5; ld.global.{sty} %x1, [%rd6];\n\
 add.s64 %rd7, %rd2, %rd5; ld.global.{sty} %x2, [%rd7]; ld.global.u32 %s2, [%rd7];\n\
 add.s64 %rd8, %rd3, %rd5; ld.global.{sty} %x3, [%rd8];\n\
 {body}\n\
 add.s64 %rd9, %rd4, %rd5; st.global.{dty} [%rd9], %y;\n\
 ret;\n}}\n"
    )
}

/// Runs `ptx`'s kernel `k` over a, b, c; returns d (8-byte slots, zero-filled first),
/// the same from the interpreter and from the JIT.
fn run(ptx: &str, a: &[u64], b: &[u64], c: &[u64]) -> Vec<u64> {
    let interpreted = run_on(Engine::Interpreter, ptx, a, b, c);
    let compiled = run_on(Engine::Jit, ptx, a, b, c);
    if let Some(i) = (0..a.len()).find(|&i| interpreted[i] != compiled[i]) {
        panic!(
            "the JIT gives {:#x} where the interpreter gives {:#x} for a={:#x} b={:#x} c={:#x}\n{ptx}",
            compiled[i], interpreted[i], a[i], b[i], c[i]
        );
    }
    compiled
}

fn run_on(engine: Engine, ptx: &str, a: &[u64], b: &[u64], c: &[u64]) -> Vec<u64> {
    let mut s = Simulator::new(SimConfig {
        engine,
        ..SimConfig::default()
    });
    let m = s
        .load_module("prop.ptx", ptx)
        .unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    let up = |s: &mut Simulator, v: &[u64]| {
        let p = s.malloc(8 * v.len() as u64).unwrap();
        s.memcpy_htod(
            p,
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        )
        .unwrap();
        p
    };
    let (pa, pb, pc) = (up(&mut s, a), up(&mut s, b), up(&mut s, c));
    let pd = s.malloc(8 * a.len() as u64).unwrap();
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [a.len() as u32, 1, 1],
        shared_bytes: 0,
    };
    let report = s
        .launch(
            &m,
            "k",
            cfg,
            &[
                KernelArg::Ptr(pa),
                KernelArg::Ptr(pb),
                KernelArg::Ptr(pc),
                KernelArg::Ptr(pd),
            ],
        )
        .unwrap();
    // The JIT leaves some instructions to the interpreter (carry chains, clocks...).
    if engine == Engine::Interpreter {
        assert_eq!(report.engine, engine, "{ptx}");
    }
    let mut out = vec![0u8; 8 * a.len()];
    s.memcpy_dtoh(&mut out, pd).unwrap();
    out.chunks(8)
        .map(|x| u64::from_le_bytes(x.try_into().unwrap()))
        .collect()
}

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

macro_rules! int_cases {
    ($t:ty, $name:expr, $bits:expr) => {{
        type T = $t;
        let v = |x: u64| x as T;
        let o = |x: T| (x as u64) & mask($bits);
        let cases: Vec<(&str, Box<dyn Fn(u64, u64, u64) -> Option<u64>>)> = vec![
            (
                "add",
                Box::new(move |a, b, _| Some(o(v(a).wrapping_add(v(b))))),
            ),
            (
                "sub",
                Box::new(move |a, b, _| Some(o(v(a).wrapping_sub(v(b))))),
            ),
            (
                "mul.lo",
                Box::new(move |a, b, _| Some(o(v(a).wrapping_mul(v(b))))),
            ),
            (
                "mul.hi",
                // Bits [w, 2w) of the double-width product (two's complement in 128 bits).
                Box::new(move |a, b, _| {
                    Some(o(
                        (((v(a) as i128).wrapping_mul(v(b) as i128) as u128) >> $bits) as T,
                    ))
                }),
            ),
            (
                "div",
                Box::new(move |a, b, _| (v(b) != 0).then(|| o(v(a).wrapping_div(v(b))))),
            ),
            (
                "rem",
                Box::new(move |a, b, _| (v(b) != 0).then(|| o(v(a).wrapping_rem(v(b))))),
            ),
            ("min", Box::new(move |a, b, _| Some(o(v(a).min(v(b)))))),
            ("max", Box::new(move |a, b, _| Some(o(v(a).max(v(b)))))),
            (
                "mad.lo",
                Box::new(move |a, b, c| Some(o(v(a).wrapping_mul(v(b)).wrapping_add(v(c))))),
            ),
        ];
        ($name, $bits, cases)
    }};
}

fn check_int(
    ty: &str,
    bits: u32,
    op: &str,
    f: &dyn Fn(u64, u64, u64) -> Option<u64>,
    a: &[u64],
    b: &[u64],
    c: &[u64],
) {
    let body = if op == "mad.lo" {
        format!("mad.lo.{ty} %y, %x1, %x2, %x3;")
    } else {
        format!("{op}.{ty} %y, %x1, %x2;")
    };
    let got = run(&kernel(ty, ty, &body), a, b, c);
    for i in 0..a.len() {
        if let Some(want) = f(a[i], b[i], c[i]) {
            assert_eq!(
                got[i],
                want,
                "{op}.{ty} {:#x} {:#x} {:#x}",
                a[i] & mask(bits),
                b[i] & mask(bits),
                c[i] & mask(bits)
            );
        }
    }
}

/// Operand mix: full-range bits, small values, extremes.
fn operand() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0u64..300),
        Just(0u64),
        Just(u64::MAX),
        Just(0x8000_0000_0000_0000),
        Just(0x8000_0000),
        Just(0x7fff_ffff),
        Just(0x8000),
        (0u64..300).prop_map(|x| x.wrapping_neg()),
    ]
}

fn vecs() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, Vec<u64>)> {
    (
        prop::collection::vec(operand(), N),
        prop::collection::vec(operand(), N),
        prop::collection::vec(operand(), N),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn integer_arithmetic_matches_rust((a, b, c) in vecs()) {
        for (ty, bits, cases) in [
            int_cases!(u16, "u16", 16),
            int_cases!(i16, "s16", 16),
            int_cases!(u32, "u32", 32),
            int_cases!(i32, "s32", 32),
            int_cases!(u64, "u64", 64),
            int_cases!(i64, "s64", 64),
        ] {
            for (op, f) in &cases {
                check_int(ty, bits, op, f.as_ref(), &a, &b, &c);
            }
        }
    }

    #[test]
    fn bit_operations_match_rust((a, b, c) in vecs()) {
        type F = fn(u64, u64, u64) -> u64;
        let cases32: Vec<(&str, F)> = vec![
            ("and.b32 %y, %x1, %x2;", |a, b, _| (a & b) & 0xffff_ffff),
            ("or.b32 %y, %x1, %x2;", |a, b, _| (a | b) & 0xffff_ffff),
            ("xor.b32 %y, %x1, %x2;", |a, b, _| (a ^ b) & 0xffff_ffff),
            ("not.b32 %y, %x1;", |a, _, _| !a & 0xffff_ffff),
            ("cnot.b32 %y, %x1;", |a, _, _| (a as u32 == 0) as u64),
            ("shl.b32 %y, %x1, %s2;", |a, b, _| { let n = b as u32; if n >= 32 { 0 } else { ((a as u32) << n) as u64 } }),
            ("shr.u32 %y, %x1, %s2;", |a, b, _| { let n = b as u32; if n >= 32 { 0 } else { ((a as u32) >> n) as u64 } }),
            ("shr.s32 %y, %x1, %s2;", |a, b, _| ((a as i32) >> (b as u32).min(31)) as u32 as u64),
            // Immediate amounts take a uniform-shift path.
            ("shl.b32 %y, %x1, 0;", |a, _, _| a & 0xffff_ffff),
            ("shl.b32 %y, %x1, 7;", |a, _, _| ((a as u32) << 7) as u64),
            ("shl.b32 %y, %x1, 32;", |_, _, _| 0),
            ("shr.u32 %y, %x1, 31;", |a, _, _| ((a as u32) >> 31) as u64),
            ("shr.u32 %y, %x1, 45;", |_, _, _| 0),
            ("shr.s32 %y, %x1, 3;", |a, _, _| ((a as i32) >> 3) as u32 as u64),
            ("shr.s32 %y, %x1, 40;", |a, _, _| ((a as i32) >> 31) as u32 as u64),
            ("mul.wide.s32 %rd10, %x1, -3; cvt.u32.u64 %y, %rd10;", |a, _, _| ((a as i32 as i64) * -3) as u32 as u64),
            ("popc.b32 %y, %x1;", |a, _, _| (a as u32).count_ones() as u64),
            ("clz.b32 %y, %x1;", |a, _, _| (a as u32).leading_zeros() as u64),
            ("brev.b32 %y, %x1;", |a, _, _| (a as u32).reverse_bits() as u64),
            ("bfind.u32 %y, %x1;", |a, _, _| if a as u32 == 0 { 0xffff_ffff } else { 31 - (a as u32).leading_zeros() as u64 }),
            ("bfind.shiftamt.u32 %y, %x1;", |a, _, _| if a as u32 == 0 { 0xffff_ffff } else { (a as u32).leading_zeros() as u64 }),
            ("bfind.s32 %y, %x1;", |a, _, _| { let v = if (a as i32) < 0 { !(a as u32) } else { a as u32 }; if v == 0 { 0xffff_ffff } else { 31 - v.leading_zeros() as u64 } }),
            ("bfind.shiftamt.s32 %y, %x1;", |a, _, _| { let v = if (a as i32) < 0 { !(a as u32) } else { a as u32 }; if v == 0 { 0xffff_ffff } else { v.leading_zeros() as u64 } }),
            ("mov.u32 %y, WARP_SZ;", |_, _, _| 32),
            // The extended-precision multiply-adds: the carry out of mad.cc reaches addc.
            ("mad.lo.cc.u32 %r4, %x1, %x2, %x3; addc.u32 %y, 0, 0;", |a, b, c| {
                let lo = (a as u32).wrapping_mul(b as u32) as u64;
                ((lo + (c as u32 as u64)) >> 32) & 1
            }),
            ("mad.lo.cc.u32 %y, %x1, %x2, %x3;", |a, b, c| (a as u32).wrapping_mul(b as u32).wrapping_add(c as u32) as u64),
            ("mad.hi.cc.u32 %r4, %x1, %x2, %x3; addc.u32 %y, 0, 0;", |a, b, c| {
                let hi = (a as u32 as u64 * b as u32 as u64) >> 32;
                ((hi + (c as u32 as u64)) >> 32) & 1
            }),
            ("mad.hi.cc.s32 %y, %x1, %x2, %x3;", |a, b, c| {
                let hi = ((a as i32 as i64 * b as i32 as i64) >> 32) as u32;
                hi.wrapping_add(c as u32) as u64
            }),
            ("add.cc.u32 %r4, %x3, %x3; madc.lo.cc.u32 %r3, %x1, %x2, %x3; addc.u32 %y, %r3, %r3;", |a, b, c| {
                let cin = (((c as u32 as u64) * 2) >> 32) & 1;
                let sum = (a as u32).wrapping_mul(b as u32) as u64 + (c as u32 as u64) + cin;
                let (r5, cout) = (sum & 0xffff_ffff, (sum >> 32) & 1);
                (r5 * 2 + cout) & 0xffff_ffff
            }),
            ("add.cc.u32 %r4, %x1, %x1; madc.hi.u32 %y, %x1, %x2, %x3;", |a, b, c| {
                let cin = (((a as u32 as u64) * 2) >> 32) & 1;
                let hi = (a as u32 as u64 * b as u32 as u64) >> 32;
                (hi + (c as u32 as u64) + cin) & 0xffff_ffff
            }),
            ("abs.s32 %y, %x1;", |a, _, _| (a as i32).wrapping_abs() as u32 as u64),
            ("neg.s32 %y, %x1;", |a, _, _| (a as i32).wrapping_neg() as u32 as u64),
            ("prmt.b32 %y, %x1, %x2, %x3;", |a, b, c| {
                let bytes = ((b as u32 as u64) << 32) | a as u32 as u64;
                (0..4).fold(0u64, |d, i| {
                    let sel = (c >> (4 * i)) & 0xf;
                    let mut byte = (bytes >> ((sel & 7) * 8)) & 0xff;
                    if sel & 8 != 0 { byte = if byte & 0x80 != 0 { 0xff } else { 0 }; }
                    d | (byte << (8 * i))
                })
            }),
            ("bfe.u32 %y, %x1, %x2, %x3;", |a, b, c| {
                let (pos, len) = ((b & 0xff) as u32, (c & 0xff) as u32);
                (0..32).fold(0u64, |d, i| d | (if i < len && pos + i < 32 { (a >> (pos + i)) & 1 } else { 0 } << i))
            }),
            ("bfe.s32 %y, %x1, %x2, %x3;", |a, b, c| {
                let (pos, len) = ((b & 0xff) as u32, (c & 0xff) as u32);
                let sbit = if len == 0 { 0 } else { (a >> (pos + len - 1).min(31)) & 1 };
                (0..32).fold(0u64, |d, i| d | (if i < len && pos + i < 32 { (a >> (pos + i)) & 1 } else { sbit } << i))
            }),
            ("mul.wide.u32 %rd10, %x1, %x2; cvt.u32.u64 %y, %rd10;", |a, b, _| ((a as u32 as u64) * (b as u32 as u64)) & 0xffff_ffff),
            ("mul.wide.s32 %rd10, %x1, %x2; shr.u64 %rd10, %rd10, 32; cvt.u32.u64 %y, %rd10;", |a, b, _| (((a as i32 as i64) * (b as i32 as i64)) >> 32) as u32 as u64),
            ("mul24.lo.u32 %y, %x1, %x2;", |a, b, _| ((a & 0xff_ffff) * (b & 0xff_ffff)) & 0xffff_ffff),
            ("sad.u32 %y, %x1, %x2, %x3;", |a, b, c| ((a as u32).abs_diff(b as u32).wrapping_add(c as u32)) as u64),
            ("shf.l.wrap.b32 %y, %x1, %x2, %s2;", |a, b, _| {
                let n = b as u32 & 31;
                (((((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff)) << n) >> 32) & 0xffff_ffff
            }),
            ("shf.r.clamp.b32 %y, %x1, %x2, %s2;", |a, b, _| {
                let n = (b as u32).min(32);
                ((((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff)) >> n) & 0xffff_ffff
            }),
            ("add.cc.u32 %r4, %x1, %x2; addc.u32 %y, %x3, 0;", |a, b, c| {
                let carry = (a as u32).overflowing_add(b as u32).1 as u32;
                (c as u32).wrapping_add(carry) as u64
            }),
            ("sub.cc.u32 %r4, %x1, %x2; subc.cc.u32 %r3, %x3, 5; subc.u32 %y, 100, 0;", |a, b, c| {
                let borrow1 = ((a as u32) < (b as u32)) as u32;
                let borrow2 = ((c as u32 as u64) < 5 + borrow1 as u64) as u32;
                100 - borrow2 as u64
            }),
            ("dp4a.s32.u32 %y, %x1, %x2, %x3;", |a, b, c| {
                let mut acc = c as u32 as i64;
                for i in 0..4 { acc += ((a >> (8 * i)) as u8 as i8 as i64) * ((b >> (8 * i)) as u8 as i64); }
                acc as u32 as u64
            }),
            ("dp2a.hi.u32.s32 %y, %x1, %x2, %x3;", |a, b, c| {
                let mut acc = c as u32 as i64;
                for i in 0..2 { acc += ((a >> (16 * i)) as u16 as i64) * ((b >> (8 * (i + 2))) as u8 as i8 as i64); }
                acc as u32 as u64
            }),
            ("lop3.b32 %y, %x1, %x2, %x3, 0xE8;", |a, b, c| ((a & b) | (a & c) | (b & c)) & 0xffff_ffff),
            ("lop3.b32 %y, %x1, %x2, %x3, 0x96;", |a, b, c| (a ^ b ^ c) & 0xffff_ffff),
            ("setp.lt.s32 %p1, %x1, %x2; selp.b32 %y, 1, 2, %p1;", |a, b, _| if (a as i32) < (b as i32) { 1 } else { 2 }),
            ("setp.hi.u32 %p1, %x1, %x2; setp.eq.u32 %p2, %x3, 7; or.pred %p1, %p1, %p2; selp.b32 %y, 1, 0, %p1;", |a, b, c| ((a as u32 > b as u32) || c as u32 == 7) as u64),
            ("bfi.b32 %y, %x1, %x2, %s2, 8;", |a, b, _| {
                let pos = b as u32 & 0xff;
                let mut d = b as u32;
                for i in 0..8 { if pos + i > 31 { break; } d = (d & !(1 << (pos + i))) | ((((a >> i) & 1) as u32) << (pos + i)); }
                d as u64
            }),
        ];
        for (body, f) in &cases32 {
            let got = run(&kernel("b32", "b32", body), &a, &b, &c);
            for i in 0..N {
                prop_assert_eq!(got[i], f(a[i], b[i], c[i]), "{} with {:#x} {:#x} {:#x}", body, a[i], b[i], c[i]);
            }
        }
        let cases64: Vec<(&str, F)> = vec![
            ("shl.b64 %y, %x1, %s2;", |a, b, _| { let n = b as u32; if n >= 64 { 0 } else { a << n } }),
            ("shr.s64 %y, %x1, %s2;", |a, b, _| ((a as i64) >> (b as u32).min(63)) as u64),
            ("shl.b64 %y, %x1, 63;", |a, _, _| a << 63),
            ("shl.b64 %y, %x1, 64;", |_, _, _| 0),
            ("shr.u64 %y, %x1, 33;", |a, _, _| a >> 33),
            ("shr.s64 %y, %x1, 64;", |a, _, _| ((a as i64) >> 63) as u64),
            ("cvt.u32.u64 %r2, %x1; cvt.u32.u64 %r3, %x2; mul.wide.s32 %y, %r2, %r3;", |a, b, _| (a as i32 as i64).wrapping_mul(b as i32 as i64) as u64),
            ("cvt.u32.u64 %r2, %x1; cvt.u32.u64 %r3, %x2; mul.wide.u32 %y, %r2, %r3;", |a, b, _| (a as u32 as u64) * (b as u32 as u64)),
            ("popc.b64 %r4, %x1; cvt.u64.u32 %y, %r4;", |a, _, _| a.count_ones() as u64),
            ("clz.b64 %r4, %x1; cvt.u64.u32 %y, %r4;", |a, _, _| a.leading_zeros() as u64),
            ("brev.b64 %y, %x1;", |a, _, _| a.reverse_bits()),
            ("mul.hi.u64 %y, %x1, %x2;", |a, b, _| ((a as u128 * b as u128) >> 64) as u64),
            ("bfind.shiftamt.u64 %r4, %x1; cvt.u64.u32 %y, %r4;", |a, _, _| if a == 0 { 0xffff_ffff } else { a.leading_zeros() as u64 }),
            ("mad.lo.cc.u64 %rd10, %x1, %x2, %x3; addc.cc.u64 %y, 0, 0;", |a, b, c| {
                ((a.wrapping_mul(b) as u128 + c as u128) >> 64) as u64
            }),
            ("mad.hi.cc.s64 %rd10, %x1, %x2, %x3; madc.hi.s64 %y, %x1, %x2, %x3;", |a, b, c| {
                let hi = ((a as i64 as i128 * b as i64 as i128) >> 64) as u64;
                let cin = ((hi as u128 + c as u128) >> 64) as u64;
                hi.wrapping_add(c).wrapping_add(cin)
            }),
            // 64-bit bfe takes the whole 32-bit position (measured on an H200).
            ("bfe.u64 %y, %x1, %s2, 13;", |a, b, _| {
                let pos = b as u32 as u64;
                (0..64).fold(0u64, |d, i| d | (if i < 13 && pos + i < 64 { (a >> (pos + i)) & 1 } else { 0 } << i))
            }),
            ("cvt.u32.u64 %r4, %x1; cvt.s64.s32 %y, %r4;", |a, _, _| a as u32 as i32 as i64 as u64),
            ("cvt.u16.u64 %y, %x1; and.b64 %y, %y, 65535;", |a, _, _| a & 0xffff),
            ("cvt.sat.s32.s64 %r4, %x1; cvt.u64.u32 %y, %r4;", |a, _, _| (a as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32 as u64),
            ("cvt.sat.u16.s64 %r4, %x1; cvt.u64.u32 %y, %r4;", |a, _, _| (a as i64).clamp(0, 65535) as u64),
        ];
        for (body, f) in &cases64 {
            let got = run(&kernel("b64", "b64", body), &a, &b, &c);
            for i in 0..N {
                prop_assert_eq!(got[i], f(a[i], b[i], c[i]), "{} with {:#x} {:#x}", body, a[i], b[i]);
            }
        }
    }
}

// ---- floating point --------------------------------------------------------------------

fn canon32(v: f32) -> u64 {
    if v.is_nan() {
        0x7fff_ffff
    } else {
        v.to_bits() as u64
    }
}
/// An f64 result as the GPU gives it (measured on an H200, fixtures/isa-goldens): a NaN
/// is the first NaN of `ops` (register bits, in the hardware's priority order) with the
/// quiet bit set, else 0xfff8_0000_0000_0000.
fn nan64(v: f64, ops: &[u64]) -> u64 {
    if !v.is_nan() {
        return v.to_bits();
    }
    ops.iter()
        .find(|&&o| d(o).is_nan())
        .map_or(0xfff8_0000_0000_0000, |o| o | 1 << 51)
}
fn f(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn d(x: u64) -> f64 {
    f64::from_bits(x)
}

/// Round an exactly known value (f64) to f32 in a direction, by comparison alone.
fn round_dir(exact: f64, mode: &str) -> f32 {
    let r = exact as f32;
    if r.is_nan() || !exact.is_finite() {
        return r;
    }
    let rv = r as f64;
    match mode {
        "rz" if rv.abs() > exact.abs() => {
            if r > 0.0 {
                r.next_down()
            } else {
                r.next_up()
            }
        }
        "rm" if rv > exact => r.next_down(),
        "rp" if rv < exact => r.next_up(),
        _ if r.is_infinite() => match (mode, exact > 0.0) {
            ("rz", _) | ("rm", true) | ("rp", false) => {
                if exact > 0.0 {
                    f32::MAX
                } else {
                    f32::MIN
                }
            }
            _ => r,
        },
        _ => r,
    }
}

fn float_operand() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u32>().prop_map(|x| x as u64),
        (-1000.0f32..1000.0).prop_map(|x| x.to_bits() as u64),
        (0.5f32..2.0).prop_map(|x| x.to_bits() as u64),
        Just(0u64),
        Just(0x8000_0000),
        Just(0x7f80_0000),
        Just(0x0000_0001),
        Just(0x7fc0_0000),
    ]
}

fn fvecs() -> impl Strategy<Value = (Vec<u64>, Vec<u64>, Vec<u64>)> {
    (
        prop::collection::vec(float_operand(), N),
        prop::collection::vec(float_operand(), N),
        prop::collection::vec(float_operand(), N),
    )
}

fn double_operand() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (-1e6f64..1e6).prop_map(f64::to_bits),
        Just(0),
        Just(1 << 63),
        Just(0x7ff0_0000_0000_0000),
        Just(1)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn f32_arithmetic_is_correctly_rounded((a, b, c) in fvecs()) {
        type F = fn(u64, u64, u64) -> u64;
        let cases: Vec<(&str, F)> = vec![
            ("add.f32 %y, %x1, %x2;", |a, b, _| canon32(f(a) + f(b))),
            ("add.rn.f32 %y, %x1, %x2;", |a, b, _| canon32(f(a) + f(b))),
            ("sub.f32 %y, %x1, %x2;", |a, b, _| canon32(f(a) - f(b))),
            ("mul.rn.f32 %y, %x1, %x2;", |a, b, _| canon32(f(a) * f(b))),
            ("div.rn.f32 %y, %x1, %x2;", |a, b, _| canon32(f(a) / f(b))),
            ("fma.rn.f32 %y, %x1, %x2, %x3;", |a, b, c| canon32(f(a).mul_add(f(b), f(c)))),
            ("sqrt.rn.f32 %y, %x1;", |a, _, _| canon32(f(a).sqrt())),
            ("rcp.rn.f32 %y, %x1;", |a, _, _| canon32(1.0 / f(a))),
            // The sign bit; a NaN gives the canonical NaN, as an operation's would.
            ("abs.f32 %y, %x1;", |a, _, _| if f(a).is_nan() { 0x7fff_ffff } else { (a as u32 & 0x7fff_ffff) as u64 }),
            ("neg.f32 %y, %x1;", |a, _, _| if f(a).is_nan() { 0x7fff_ffff } else { (a as u32 ^ 0x8000_0000) as u64 }),
            ("min.f32 %y, %x1, %x2;", |a, b, _| {
                let (x, y) = (f(a), f(b));
                if x.is_nan() { canon32(y) } else if y.is_nan() { canon32(x) }
                else if x == y { if x.is_sign_negative() { canon32(x) } else { canon32(y) } }
                else { canon32(x.min(y)) }
            }),
            ("max.f32 %y, %x1, %x2;", |a, b, _| {
                let (x, y) = (f(a), f(b));
                if x.is_nan() { canon32(y) } else if y.is_nan() { canon32(x) }
                else if x == y { if x.is_sign_negative() { canon32(y) } else { canon32(x) } }
                else { canon32(x.max(y)) }
            }),
            ("setp.ltu.f32 %p1, %x1, %x2; selp.f32 %y, 0f3F800000, 0f00000000, %p1;", |a, b, _| {
                let (x, y) = (f(a), f(b));
                if x.is_nan() || y.is_nan() || x < y { 0x3f80_0000 } else { 0 }
            }),
            ("copysign.f32 %y, %x1, %x2;", |a, b, _| ((b as u32 & 0x7fff_ffff) | (a as u32 & 0x8000_0000)) as u64),
            ("testp.subnormal.f32 %p1, %x1; testp.notanumber.f32 %p2, %x2; or.pred %p1, %p1, %p2; selp.f32 %y, 0f3F800000, 0f00000000, %p1;", |a, b, _| {
                if f(a).is_subnormal() || f(b).is_nan() { 0x3f80_0000 } else { 0 }
            }),
            ("set.gt.u32.f32 %r4, %x1, %x2; mov.b32 %y, %r4;", |a, b, _| if f(a) > f(b) { 0xffff_ffff } else { 0 }),
        ];
        for (body, r) in &cases {
            let got = run(&kernel("f32", "f32", body), &a, &b, &c);
            for i in 0..N {
                prop_assert_eq!(got[i], r(a[i], b[i], c[i]), "{} with {:e} {:e} {:e}", body, f(a[i]), f(b[i]), f(c[i]));
            }
        }
    }

    /// fma operands whose f64 sum often lands exactly on an f32 midpoint (a product
    /// with few bits plus an addend of a nearby exponent, as in saxpy) or rounds onto one:
    /// both must round like a single correctly rounded fma.
    #[test]
    fn f32_fma_midpoints_round_once(
        x in prop::collection::vec((1u32..0x00ff_ffff, 120u32..134, any::<bool>()), N),
        y in prop::collection::vec(prop_oneof![Just(1.5f32), Just(2.0), Just(0.75), Just(-3.0), (1u32..0x00ff_ffff).prop_map(|m| f32::from_bits(0x3f00_0000 | m >> 1))], N),
        z in prop::collection::vec((1u32..0x00ff_ffff, 120u32..134, any::<bool>()), N),
    ) {
        let mk = |(m, e, neg): (u32, u32, bool)| (((neg as u32) << 31) | (e << 23) | (m & 0x7f_ffff)) as u64;
        let a: Vec<u64> = x.into_iter().map(mk).collect();
        let b: Vec<u64> = y.into_iter().map(|v| v.to_bits() as u64).collect();
        let c: Vec<u64> = z.into_iter().map(mk).collect();
        for body in ["fma.rn.f32 %y, %x1, %x2, %x3;", "fma.rn.ftz.f32 %y, %x1, %x2, %x3;", "mad.rn.f32 %y, %x1, %x2, %x3;"] {
            let got = run(&kernel("f32", "f32", body), &a, &b, &c);
            for i in 0..N {
                let want = canon32(f(a[i]).mul_add(f(b[i]), f(c[i])));
                prop_assert_eq!(got[i], want, "{} with {:#x} {:#x} {:#x}", body, a[i], b[i], c[i]);
            }
        }
    }

    #[test]
    fn f32_directed_rounding_matches_exact_values(
        a in prop::collection::vec(-1.0e6f32..1.0e6, N),
        b in prop::collection::vec(-1.0e6f32..1.0e6, N),
    ) {
        // Operands of like magnitude: sums and products are exact in f64, so the
        // reference only rounds a known exact value.
        let a: Vec<u64> = a.iter().map(|x| x.to_bits() as u64).collect();
        let b: Vec<u64> = b.iter().map(|x| x.to_bits() as u64).collect();
        for mode in ["rn", "rz", "rm", "rp"] {
            for (op, exact) in [("add", (|x: f64, y: f64| x + y) as fn(f64, f64) -> f64), ("sub", |x, y| x - y), ("mul", |x, y| x * y)] {
                let got = run(&kernel("f32", "f32", &format!("{op}.{mode}.f32 %y, %x1, %x2;")), &a, &b, &b);
                for i in 0..N {
                    let want = round_dir(exact(f(a[i]) as f64, f(b[i]) as f64), mode);
                    prop_assert_eq!(got[i], canon32(want), "{}.{} {:e} {:e}", op, mode, f(a[i]), f(b[i]));
                }
            }
            // int -> f32 with every rounding, exact in i128
            let got = run(&kernel("s32", "f32", &format!("cvt.{mode}.f32.s32 %y, %x1;")), &a, &b, &b);
            for i in 0..N {
                let v = a[i] as u32 as i32;
                let r = v as f32;
                let want = match mode {
                    "rz" if (r as i64).abs() > (v as i64).abs() => if r > 0.0 { r.next_down() } else { r.next_up() },
                    "rm" if r as i64 > v as i64 => r.next_down(),
                    "rp" if (r as i64) < v as i64 => r.next_up(),
                    _ => r,
                };
                prop_assert_eq!(got[i], want.to_bits() as u64, "cvt.{}.f32.s32 {}", mode, v);
            }
        }
    }

    #[test]
    fn float_to_int_conversions_saturate((a, b, c) in fvecs()) {
        type F = fn(f32) -> u64;
        let cases: Vec<(&str, &str, F)> = vec![
            ("cvt.rni.s32.f32 %y, %x1;", "s32", |x| x.round_ties_even() as i32 as u32 as u64),
            ("cvt.rzi.s32.f32 %y, %x1;", "s32", |x| x.trunc() as i32 as u32 as u64),
            ("cvt.rmi.s32.f32 %y, %x1;", "s32", |x| x.floor() as i32 as u32 as u64),
            ("cvt.rpi.s32.f32 %y, %x1;", "s32", |x| x.ceil() as i32 as u32 as u64),
            ("cvt.rni.u32.f32 %y, %x1;", "u32", |x| x.round_ties_even() as u32 as u64),
            // NaN to a 64-bit integer: the most negative value's bits (to 32 bits: 0).
            ("cvt.rzi.s64.f32 %y, %x1;", "s64", |x| if x.is_nan() { 1 << 63 } else { x.trunc() as i64 as u64 }),
            ("cvt.rzi.u16.f32 %y, %x1;", "u16", |x| x.trunc() as u16 as u64),
            ("cvt.rni.f32.f32 %y, %x1;", "f32", |x| canon32(x.round_ties_even())),
            ("cvt.rmi.f32.f32 %y, %x1;", "f32", |x| canon32(x.floor())),
            ("cvt.sat.f32.f32 %y, %x1;", "f32", |x| canon32(if x.is_nan() || x <= 0.0 { 0.0 } else { x.min(1.0) })),
            // A NaN keeps its sign and payload (shifted), quieted.
            ("cvt.f64.f32 %y, %x1;", "f64", |x| {
                let b = x.to_bits() as u64;
                if x.is_nan() { ((b & 0x8000_0000) << 32) | 0x7ff8_0000_0000_0000 | ((b & 0x7f_ffff) << 29) } else { (x as f64).to_bits() }
            }),
            ("cvt.rn.f16.f32 %y, %x1;", "b16", |x| f32_to_f16_ref(x) as u64),
            ("cvt.rn.bf16.f32 %y, %x1;", "b16", |x| {
                let b = x.to_bits();
                if x.is_nan() { 0x7fff } else { ((b as u64 + 0x7fff + ((b as u64 >> 16) & 1)) >> 16) & 0xffff }
            }),
            ("cvt.rz.bf16.f32 %y, %x1;", "b16", |x| if x.is_nan() { 0x7fff } else { (x.to_bits() >> 16) as u64 }),
        ];
        for (body, dty, r) in &cases {
            let got = run(&kernel("f32", dty, body), &a, &b, &c);
            for i in 0..N {
                prop_assert_eq!(got[i], r(f(a[i])), "{} {:e}", body, f(a[i]));
            }
        }
    }

    #[test]
    fn half_types_widen_exactly(a in prop::collection::vec(any::<u16>().prop_map(|x| x as u64), N)) {
        let got = run(&kernel("b16", "f32", "cvt.f32.bf16 %y, %x1;"), &a, &a, &a);
        for i in 0..N {
            // A shift, NaNs included.
            prop_assert_eq!(got[i], (a[i] & 0xffff) << 16, "bf16 {:#06x}", a[i]);
        }
        // setp on f16: ordered less-than, NaN false.
        let b: Vec<u64> = a.iter().rev().copied().collect();
        let got = run(&kernel("b16", "b32", "setp.lt.f16 %p1, %x1, %x2; selp.b32 %y, 1, 0, %p1;"), &a, &b, &a);
        let widen = |h: u64| {
            let h = h as u32;
            let (sign, e, m) = (h >> 15, (h >> 10) & 0x1f, h & 0x3ff);
            let mag = if e == 0 { m as f32 * 2f32.powi(-24) } else if e == 31 { if m == 0 { f32::INFINITY } else { f32::NAN } } else { (1.0 + m as f32 / 1024.0) * 2f32.powi(e as i32 - 15) };
            if sign == 1 { -mag } else { mag }
        };
        for i in 0..N {
            prop_assert_eq!(got[i], (widen(a[i]) < widen(b[i])) as u64, "{:#06x} < {:#06x}", a[i], b[i]);
        }
        let got = run(&kernel("b16", "f32", "cvt.f32.f16 %y, %x1;"), &a, &a, &a);
        for i in 0..N {
            // Reference: f16 -> f32 by the IEEE layout.
            let h = a[i] as u32;
            let (sign, e, m) = (h >> 15, (h >> 10) & 0x1f, h & 0x3ff);
            let mag = if e == 0 { m as f32 * 2f32.powi(-24) } else if e == 31 { if m == 0 { f32::INFINITY } else { f32::NAN } } else { (1.0 + m as f32 / 1024.0) * 2f32.powi(e as i32 - 15) };
            let want = if sign == 1 { -mag } else { mag };
            prop_assert_eq!(got[i], canon32(want), "f16 {:#06x}", a[i]);
        }
    }

    #[test]
    fn f64_arithmetic_is_correctly_rounded(
        a in prop::collection::vec(double_operand(), N),
        b in prop::collection::vec(double_operand(), N),
        c in prop::collection::vec(double_operand(), N),
    ) {
        type F = fn(u64, u64, u64) -> u64;
        let cases: Vec<(&str, &str, F)> = vec![
            ("add.f64 %y, %x1, %x2;", "f64", |a, b, _| nan64(d(a) + d(b), &[b, a])),
            ("mul.rn.f64 %y, %x1, %x2;", "f64", |a, b, _| nan64(d(a) * d(b), &[b, a])),
            // Division is a software sequence: a's NaN first.
            ("div.rn.f64 %y, %x1, %x2;", "f64", |a, b, _| nan64(d(a) / d(b), &[a, b])),
            ("fma.rn.f64 %y, %x1, %x2, %x3;", "f64", |a, b, c| nan64(d(a).mul_add(d(b), d(c)), &[b, a, c])),
            ("sqrt.rn.f64 %y, %x1;", "f64", |a, _, _| nan64(d(a).sqrt(), &[a])),
            ("cvt.rn.f32.f64 %y, %x1;", "f32", |a, _, _| narrow_nan(a).unwrap_or_else(|| canon32(d(a) as f32))),
            ("cvt.rz.f32.f64 %y, %x1;", "f32", |a, _, _| narrow_nan(a).unwrap_or_else(|| canon32(round_dir(d(a), "rz")))),
            ("cvt.rm.f32.f64 %y, %x1;", "f32", |a, _, _| narrow_nan(a).unwrap_or_else(|| canon32(round_dir(d(a), "rm")))),
            // NaN from f64 to an integer: the most negative value's bits.
            ("cvt.rzi.s64.f64 %y, %x1;", "s64", |a, _, _| if d(a).is_nan() { 1 << 63 } else { d(a).trunc() as i64 as u64 }),
            ("cvt.rni.s32.f64 %y, %x1;", "s32", |a, _, _| if d(a).is_nan() { 0x8000_0000 } else { d(a).round_ties_even() as i32 as u32 as u64 }),
            ("cvt.rn.f64.s64 %y, %x1;", "f64", |a, _, _| (a as i64 as f64).to_bits()),
            ("cvt.rn.f64.u64 %y, %x1;", "f64", |a, _, _| (a as f64).to_bits()),
        ];
        for (body, dty, r) in &cases {
            let sty = if body.contains("f64.s64") {
                "s64"
            } else if body.contains("f64.u64") {
                "u64"
            } else {
                "f64"
            };
            let got = run(&kernel(sty, dty, body), &a, &b, &c);
            for i in 0..N {
                prop_assert_eq!(got[i], r(a[i], b[i], c[i]), "{} with {:e} {:e} {:e}", body, d(a[i]), d(b[i]), d(c[i]));
            }
        }
    }
}

/// An f64 NaN narrowed to f32 as the GPU does: sign and the payload's top bits, quieted.
fn narrow_nan(a: u64) -> Option<u64> {
    d(a).is_nan()
        .then_some(((a >> 32) & 0x8000_0000) | 0x7fc0_0000 | ((a >> 29) & 0x7f_ffff))
}

/// f32 to f16 bits, round to nearest even (reference written from the IEEE layout).
fn f32_to_f16_ref(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    if x.is_nan() {
        return 0x7fff;
    }
    let a = x.abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    // Scale into the f16 grid of the right binade, then round to nearest even as an integer.
    let e = if a == 0.0 {
        -24
    } else {
        (a.log2().floor() as i32).max(-14) - 10
    };
    let q = a as f64 / 2f64.powi(e);
    let r = q.round_ties_even();
    let v = r * 2f64.powi(e);
    if v == 0.0 {
        return sign;
    }
    let ve = (v.log2().floor() as i32).max(-15);
    if ve < -14 {
        return sign | (v / 2f64.powi(-24)) as u16;
    }
    sign | (((ve + 15) as u16) << 10) | (((v / 2f64.powi(ve) - 1.0) * 1024.0) as u16)
}

// ---- approximate math: the PTX ISA's documented bounds ----------------------------------

fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| -> i64 {
        let i = x.to_bits() as i32 as i64;
        if i < 0 {
            i32::MIN as i64 - i
        } else {
            i
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

#[test]
fn approximate_math_within_ptx_isa_bounds() {
    // Inputs: a sweep plus random values.
    let mut x: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) / 37.0).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..4096 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        x.push(f32::from_bits(seed as u32 & 0x4fff_ffff)); // positive, < 2^32 or so
    }
    let a: Vec<u64> = x.iter().map(|v| v.to_bits() as u64).collect();
    let check = |body: &str, ok: &dyn Fn(f32, f32) -> bool| {
        for chunk in a.chunks(1024) {
            let got = run(&kernel("f32", "f32", body), chunk, chunk, chunk);
            for (i, &g) in got.iter().enumerate() {
                let (xi, gi) = (f(chunk[i]), f(g));
                assert!(ok(xi, gi), "{body}: x = {xi:e} gave {gi:e}");
            }
        }
    };
    // ex2.approx.f32: max 2 ulp across the full range.
    check("ex2.approx.f32 %y, %x1;", &|x, g| {
        let w = (x as f64).exp2() as f32;
        if w.is_infinite() || w == 0.0 {
            g == w || ulps(g, w) <= 2
        } else {
            ulps(g, w) <= 2
        }
    });
    check("ex2.approx.ftz.f32 %y, %x1;", &|x, g| {
        let w = (x as f64).exp2() as f32;
        let w = if w.is_subnormal() { 0.0 } else { w };
        ulps(g, w) <= 2
    });
    // lg2.approx.f32: max absolute error 2^-22 for x in [0.5, 2] (where the result is
    // small); elsewhere within 2 ulp of the correctly rounded result.
    check("lg2.approx.f32 %y, %x1;", &|x, g| {
        if x <= 0.0 || !x.is_finite() {
            return true;
        }
        let w = (x as f64).log2();
        if (0.5..=2.0).contains(&x) {
            ((g as f64) - w).abs() <= 2f64.powi(-22)
        } else {
            ulps(g, w as f32) <= 2
        }
    });
    // sin/cos.approx.f32: max absolute error 2^-20.5 on [-pi, pi].
    check("sin.approx.f32 %y, %x1;", &|x, g| {
        x.abs() > std::f32::consts::PI || ((g as f64) - (x as f64).sin()).abs() <= 2f64.powf(-20.5)
    });
    check("cos.approx.f32 %y, %x1;", &|x, g| {
        x.abs() > std::f32::consts::PI || ((g as f64) - (x as f64).cos()).abs() <= 2f64.powf(-20.5)
    });
    // rcp.approx.f32: max 1 ulp; sqrt.approx.f32 and rsqrt.approx.f32: max relative
    // error 2^-23 and 2^-22.9.
    check("rcp.approx.f32 %y, %x1;", &|x, g| {
        x == 0.0 || !x.is_normal() || ulps(g, (1.0 / x as f64) as f32) <= 1
    });
    check("sqrt.approx.f32 %y, %x1;", &|x, g| {
        x < 0.0 || ((g as f64) - (x as f64).sqrt()).abs() <= (x as f64).sqrt() * 2f64.powi(-23)
    });
    check("rsqrt.approx.f32 %y, %x1;", &|x, g| {
        x <= 0.0
            || !x.is_normal()
            || ((g as f64) * (x as f64).sqrt() - 1.0).abs() <= 2f64.powf(-22.9)
    });
    // div.approx.f32 and div.full.f32: max 2 ulp for |b| in [2^-126, 2^126].
    check("div.approx.f32 %y, %x1, 0f40490FDB;", &|x, g| {
        ulps(g, (x as f64 / std::f64::consts::PI) as f32) <= 2
    });
    check("div.full.f32 %y, 0f3F800000, %x1;", &|x, g| {
        !(x.abs() >= 2f32.powi(-126) && x.abs() <= 2f32.powi(126))
            || ulps(g, (1.0 / x as f64) as f32) <= 2
    });
    // tanh.approx.f32: max relative error 2^-11.
    check("tanh.approx.f32 %y, %x1;", &|x, g| {
        let w = (x as f64).tanh();
        w == 0.0 || ((g as f64 - w) / w).abs() <= 2f64.powi(-11)
    });
}

/// fma sums whose f64 rounding lands exactly on an f32 midpoint while the exact value
/// does not: rounding the f64 sum again would go the wrong way (ties to even), so these
/// lanes must take the exact path. `x*y = 2^-24 (1 - 2^-36)` added to `1 + 2^-23`.
#[test]
fn f32_fma_double_rounding_cases() {
    let x = (1.0f32 + 2f32.powi(-18)) * 2f32.powi(-24);
    let y = 1.0f32 - 2f32.powi(-18);
    let z = 1.0f32 + 2f32.powi(-23);
    let mut a = vec![];
    let mut b = vec![];
    let mut c = vec![];
    for i in 0..N {
        // Both signs, and ordinary lanes in between.
        let (sx, sz) = match i % 4 {
            0 => (1.0, 1.0),
            1 => (-1.0, -1.0),
            2 => (1.0, -1.0),
            _ => (0.5, 3.0),
        };
        a.push((sx * x).to_bits() as u64);
        b.push(y.to_bits() as u64);
        c.push((sz * z).to_bits() as u64);
    }
    let want_exact = f(a[0]).mul_add(f(b[0]), f(c[0]));
    assert_eq!(want_exact, z, "the reference fma rounds down to z");
    for body in [
        "fma.rn.f32 %y, %x1, %x2, %x3;",
        "fma.rn.ftz.f32 %y, %x1, %x2, %x3;",
    ] {
        let got = run(&kernel("f32", "f32", body), &a, &b, &c);
        for i in 0..N {
            let want = canon32(f(a[i]).mul_add(f(b[i]), f(c[i])));
            assert_eq!(got[i], want, "{body} lane {i}");
        }
    }
}
