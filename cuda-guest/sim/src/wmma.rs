//! Warp-level matrix multiply-accumulate: `wmma.load`, `wmma.mma` and `wmma.store`
//! (what `nvcuda::wmma` compiles to), their forms and the arithmetic.
//!
//! A fragment is a matrix spread over the registers of a warp's 32 lanes. CUDA leaves
//! its layout across lanes to the implementation (programs reach fragments only through
//! these instructions, `fill_fragment` and element-wise loops over `x[i]`), so the
//! simulator chooses one: the matrix's elements in row-major order, [`Frag::per_lane`]
//! consecutive ones to a lane, repeated over the warp where a lane holds more than its
//! share (an f16 A fragment of 16x16 is held by lanes 0-15 and again by lanes 16-31, as
//! on the GPU each element is held twice). Accumulators of one shape share their layout,
//! so element-wise code combining two of them is right.

use crate::decode::{Sp, R};
use crate::ops::{f16_to_f32, f64_to_f16, Rnd};

/// Which matrix a fragment holds: `A` (m x k), `B` (k x n) or the accumulator `C`/`D`
/// (m x n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    A,
    B,
    C,
}

/// An element type of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F16,
    Bf16,
    /// An f32 in memory and in its register, of which the multiplier reads the sign,
    /// exponent and top 10 mantissa bits.
    Tf32,
    F32,
    F64,
    S8,
    U8,
    S32,
}

impl Elem {
    fn parse(s: &str) -> Option<Elem> {
        Some(match s {
            "f16" => Elem::F16,
            "bf16" => Elem::Bf16,
            "tf32" => Elem::Tf32,
            "f32" => Elem::F32,
            "f64" => Elem::F64,
            "s8" => Elem::S8,
            "u8" => Elem::U8,
            "s32" => Elem::S32,
            _ => return None,
        })
    }

    /// Bits of one element, in memory and in its register.
    pub(crate) fn bits(self) -> u32 {
        match self {
            Elem::S8 | Elem::U8 => 8,
            Elem::F16 | Elem::Bf16 => 16,
            Elem::Tf32 | Elem::F32 | Elem::S32 => 32,
            Elem::F64 => 64,
        }
    }

    /// Elements one register holds (f16, bf16 and 8-bit integers are packed in `.b32`).
    fn per_reg(self) -> u32 {
        32u32.max(self.bits()) / self.bits()
    }

    fn is_int(self) -> bool {
        matches!(self, Elem::S8 | Elem::U8 | Elem::S32)
    }

    /// An A or B element as an f32 (exactly: f16, bf16 and tf32 are subsets of f32).
    fn input_f32(self, bits: u64) -> f32 {
        match self {
            Elem::F16 => f16_table()[bits as u16 as usize],
            Elem::Bf16 => f32::from_bits((bits as u32) << 16),
            Elem::Tf32 => f32::from_bits(bits as u32 & !0x1fff),
            _ => f32::from_bits(bits as u32),
        }
    }

    fn int(self, bits: u64) -> i64 {
        match self {
            Elem::S8 => bits as u8 as i8 as i64,
            Elem::U8 => bits as u8 as i64,
            _ => bits as u32 as i32 as i64,
        }
    }
}

/// Every f16 as an f32 (256 KiB, made once): the multiplier's inputs are converted
/// hundreds of times per `wmma.mma`.
fn f16_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Box<[f32]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(f16_to_f32).collect())
}

/// A matrix shape `mMnNkK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl Shape {
    fn parse(s: &str) -> Option<Shape> {
        let rest = s.strip_prefix('m')?;
        let (m, rest) = rest.split_once('n')?;
        let (n, k) = rest.split_once('k')?;
        Some(Shape {
            m: m.parse().ok()?,
            n: n.parse().ok()?,
            k: k.parse().ok()?,
        })
    }
}

/// The shapes each input type has (PTX ISA, `wmma`).
fn shape_ok(shape: Shape, input: Elem) -> bool {
    let (m, n, k) = (shape.m, shape.n, shape.k);
    match input {
        Elem::F16 | Elem::Bf16 | Elem::S8 | Elem::U8 => {
            matches!((m, n, k), (16, 16, 16) | (32, 8, 16) | (8, 32, 16))
        }
        Elem::Tf32 => (m, n, k) == (16, 16, 8),
        Elem::F64 => (m, n, k) == (8, 8, 4),
        _ => false,
    }
}

/// A fragment: which matrix, its shape and element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frag {
    pub use_: Use,
    pub shape: Shape,
    pub elem: Elem,
}

impl Frag {
    /// Rows and columns of its matrix.
    pub(crate) fn dims(&self) -> (u32, u32) {
        let Shape { m, n, k } = self.shape;
        match self.use_ {
            Use::A => (m, k),
            Use::B => (k, n),
            Use::C => (m, n),
        }
    }

    /// Elements each lane holds: an f16 A or B fragment 16 (its matrix twice or four
    /// times over the warp), every other fragment its matrix once.
    pub(crate) fn per_lane(&self) -> u32 {
        let (r, c) = self.dims();
        if self.elem == Elem::F16 && self.use_ != Use::C {
            16
        } else {
            r * c / 32
        }
    }

    /// Registers each lane gives the instruction.
    pub(crate) fn regs(&self) -> usize {
        (self.per_lane() / self.elem.per_reg()) as usize
    }

    /// Lanes holding one copy of the matrix (the rest repeat them).
    fn lanes(&self) -> u32 {
        let (r, c) = self.dims();
        r * c / self.per_lane()
    }

    /// The row and column of element `e` of lane `lane`.
    pub(crate) fn place(&self, lane: u32, e: u32) -> (u32, u32) {
        let idx = (lane % self.lanes()) * self.per_lane() + e;
        let cols = self.dims().1;
        (idx / cols, idx % cols)
    }

    /// Register and bit shift of element `e` within a lane's registers.
    pub(crate) fn slot(&self, e: u32) -> (usize, u32) {
        let per = self.elem.per_reg();
        ((e / per) as usize, (e % per) * self.elem.bits())
    }

    /// Element offset of (`row`, `col`) in memory laid out `col_major` or not with
    /// leading dimension `ld` (elements).
    pub(crate) fn offset(row: u32, col: u32, col_major: bool, ld: u64) -> u64 {
        if col_major {
            col as u64 * ld + row as u64
        } else {
            row as u64 * ld + col as u64
        }
    }

    /// The leading dimension when the instruction gives none: the matrix's row length
    /// (row-major) or column length.
    pub(crate) fn default_ld(&self, col_major: bool) -> u64 {
        let (r, c) = self.dims();
        if col_major {
            r as u64
        } else {
            c as u64
        }
    }

    /// Where every lane's elements sit, computed once.
    pub(crate) fn places(&self) -> Places {
        let (per, lanes) = (self.per_lane(), self.lanes());
        let mut at = Vec::with_capacity((32 * per) as usize);
        for lane in 0..32 {
            for e in 0..per {
                let (row, col) = self.place(lane, e);
                let (reg, shift) = self.slot(e);
                at.push(Place {
                    row: row as u16,
                    col: col as u16,
                    reg: reg as u8,
                    shift: shift as u8,
                });
            }
        }
        Places {
            frag: *self,
            per_lane: per as usize,
            // Lanes past the first copy repeat it.
            first_copy: lanes as usize,
            at: at.into(),
        }
    }
}

/// One element of a lane: its row and column, and its register and bit shift.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub row: u16,
    pub col: u16,
    pub reg: u8,
    pub shift: u8,
}

/// Every lane's [`Place`]s of a fragment, lane by lane.
#[derive(Debug, Clone)]
pub(crate) struct Places {
    pub frag: Frag,
    per_lane: usize,
    first_copy: usize,
    at: Box<[Place]>,
}

impl Places {
    /// Lane `lane`'s elements, in order.
    pub(crate) fn lane(&self, lane: usize) -> &[Place] {
        &self.at[lane * self.per_lane..(lane + 1) * self.per_lane]
    }

    fn index(&self, p: &Place) -> usize {
        p.row as usize * self.frag.dims().1 as usize + p.col as usize
    }

    /// The matrix (row-major, element bits) from every lane's registers
    /// (`regs(lane, register)`), each element taken from the first lanes holding it,
    /// into `m` (at least rows x columns long).
    pub(crate) fn gather_into(&self, regs: impl Fn(usize, usize) -> u64, m: &mut [u64]) {
        let mask = u64::MAX >> (64 - self.frag.elem.bits());
        for lane in 0..self.first_copy {
            for p in self.lane(lane) {
                m[self.index(p)] = (regs(lane, p.reg as usize) >> p.shift) & mask;
            }
        }
    }

    #[cfg(test)]
    fn gather(&self, regs: impl Fn(usize, usize) -> u64) -> Vec<u64> {
        let (r, c) = self.frag.dims();
        let mut m = vec![0u64; (r * c) as usize];
        self.gather_into(regs, &mut m);
        m
    }

    /// Lane `lane`'s registers holding `matrix` (row-major, element bits).
    pub(crate) fn scatter(&self, matrix: &[u64], lane: usize, out: &mut [u64]) {
        out.fill(0);
        for p in self.lane(lane) {
            out[p.reg as usize] |= matrix[self.index(p)] << p.shift;
        }
    }
}

/// A `wmma.mma`: D = A * B + C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mma {
    pub shape: Shape,
    pub a: Elem,
    pub b: Elem,
    pub c: Elem,
    pub d: Elem,
    /// Integer results clamped to the s32 range (else they wrap).
    pub satfinite: bool,
}

impl Mma {
    pub(crate) fn frag(&self, use_: Use) -> Frag {
        let elem = match use_ {
            Use::A => self.a,
            Use::B => self.b,
            Use::C => self.c,
        };
        Frag {
            use_,
            shape: self.shape,
            elem,
        }
    }

    /// The D fragment (C's shape, D's element type).
    pub(crate) fn d_frag(&self) -> Frag {
        Frag {
            use_: Use::C,
            shape: self.shape,
            elem: self.d,
        }
    }

    /// D (row-major element bits) from A, B and C.
    ///
    /// Floating point: f16, bf16 and tf32 products are exact in f32, so each step is one
    /// f32 rounding of the sum, in k order; f64 steps are fused multiply-adds. Integers
    /// sum exactly, then wrap or saturate to s32.
    #[cfg(test)]
    fn compute(&self, a: &[u64], b: &[u64], c: &[u64]) -> Vec<u64> {
        let mut d = vec![0u64; (self.shape.m * self.shape.n) as usize];
        self.compute_into(a, b, c, &mut d);
        d
    }

    /// [`Mma::compute`] into `d` (at least m x n long), with no allocation.
    pub(crate) fn compute_into(&self, a: &[u64], b: &[u64], c: &[u64], d: &mut [u64]) {
        let Shape { m, n, k } = self.shape;
        let (m, n, k) = (m as usize, n as usize, k as usize);
        if self.a.is_int() {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = self.c.int(c[i * n + j]);
                    for l in 0..k {
                        acc += self.a.int(a[i * k + l]) * self.b.int(b[l * n + j]);
                    }
                    let v = if self.satfinite {
                        acc.clamp(i32::MIN as i64, i32::MAX as i64) as i32
                    } else {
                        acc as i32
                    };
                    d[i * n + j] = v as u32 as u64;
                }
            }
        } else if self.a == Elem::F64 {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = f64::from_bits(c[i * n + j]);
                    for l in 0..k {
                        acc =
                            f64::from_bits(a[i * k + l]).mul_add(f64::from_bits(b[l * n + j]), acc);
                    }
                    d[i * n + j] = acc.to_bits();
                }
            }
        } else {
            // Every shape's A and B have at most 512 elements, C at most 256.
            let (mut av, mut bv) = ([0f32; 512], [0f32; 512]);
            for (x, &y) in av.iter_mut().zip(&a[..m * k]) {
                *x = self.a.input_f32(y);
            }
            for (x, &y) in bv.iter_mut().zip(&b[..k * n]) {
                *x = self.b.input_f32(y);
            }
            let mut acc = [0f32; 32];
            let acc = &mut acc[..n];
            // A row of D at a time, its columns summed side by side (each in k order).
            for i in 0..m {
                for (j, x) in acc.iter_mut().enumerate() {
                    *x = self.c.input_f32(c[i * n + j]);
                }
                for l in 0..k {
                    let x = av[i * k + l];
                    for (s, &y) in acc.iter_mut().zip(&bv[l * n..l * n + n]) {
                        *s += x * y;
                    }
                }
                for (j, &x) in acc.iter().enumerate() {
                    d[i * n + j] = match self.d {
                        Elem::F16 => f64_to_f16(x as f64, Rnd::N) as u64,
                        _ => x.to_bits() as u64,
                    };
                }
            }
        }
    }
}

/// A decoded `wmma` instruction.
#[derive(Debug, Clone)]
pub(crate) enum Wmma {
    /// `wmma.load.{a,b,c}`: lane registers `d` from the matrix at `a + off` (each lane's
    /// own address), laid out `col_major` or not, `stride` elements apart (the matrix's
    /// row or column length when `None`).
    Load {
        frag: Places,
        col_major: bool,
        sp: Sp,
        d: Vec<R>,
        a: R,
        off: i64,
        stride: Option<R>,
    },
    /// `wmma.store.d`: lane registers `s` to memory, as [`Wmma::Load`] reads it.
    Store {
        frag: Places,
        col_major: bool,
        sp: Sp,
        s: Vec<R>,
        a: R,
        off: i64,
        stride: Option<R>,
    },
    /// `wmma.mma`: `d = a * b + c`.
    Mma {
        mma: Mma,
        /// The places of A, B, C and D.
        places: Box<[Places; 4]>,
        d: Vec<R>,
        a: Vec<R>,
        b: Vec<R>,
        c: Vec<R>,
    },
}

impl Wmma {
    /// The registers it reads and those it writes.
    pub(crate) fn reads_writes(&self) -> (Vec<R>, Vec<R>) {
        match self {
            Wmma::Load { d, a, stride, .. } => {
                let mut u = vec![*a];
                u.extend(stride.iter().copied());
                (u, d.clone())
            }
            Wmma::Store { s, a, stride, .. } => {
                let mut u = vec![*a];
                u.extend(stride.iter().copied());
                u.extend_from_slice(s);
                (u, vec![])
            }
            Wmma::Mma { d, a, b, c, .. } => {
                let mut u = a.clone();
                u.extend_from_slice(b);
                u.extend_from_slice(c);
                (u, d.clone())
            }
        }
    }
}

/// What a `wmma` instruction's modifiers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `load.{a,b,c}` or `store.d`: the fragment, whether its memory is column-major,
    /// and the state space (generic when none is named).
    Memory {
        store: bool,
        frag: Frag,
        col_major: bool,
        sp: Sp,
    },
    Mma(Mma),
}

/// Reads the modifiers of a `wmma` instruction (`["load", "a", "sync", "aligned",
/// "row", "m16n16k16", "global", "f16"]`), or says what the simulator does not do.
pub(crate) fn parse(modifiers: &[String]) -> Result<Form, String> {
    let mut it = modifiers.iter().map(String::as_str);
    let what = it.next().unwrap_or("");
    let mut layouts = vec![];
    let mut shape = None;
    let mut types = vec![];
    let mut sp = Sp::Generic;
    let mut satfinite = false;
    let mut which = None;
    for m in it {
        match m {
            "sync" | "aligned" => {}
            "row" => layouts.push(false),
            "col" => layouts.push(true),
            "global" | "const" => sp = Sp::Global,
            "shared" | "shared::cta" => sp = Sp::Shared,
            "satfinite" => satfinite = true,
            // f64 is computed with fused multiply-adds rounded to nearest.
            "rn" => {}
            "a" | "b" | "c" | "d" if which.is_none() => which = Some(m),
            m => {
                if let Some(s) = Shape::parse(m) {
                    shape = Some(s);
                } else if let Some(t) = Elem::parse(m) {
                    types.push(t);
                } else {
                    return Err(format!("`.{m}` is not supported by the simulator"));
                }
            }
        }
    }
    let shape = shape.ok_or("no shape (.m16n16k16, ...)")?;
    match what {
        "load" | "store" => {
            let (store, use_) = match (what, which) {
                ("load", Some("a")) => (false, Use::A),
                ("load", Some("b")) => (false, Use::B),
                ("load", Some("c")) => (false, Use::C),
                ("store", Some("d")) => (true, Use::C),
                _ => return Err("expected load.a, load.b, load.c or store.d".into()),
            };
            let (&[col_major], &[elem]) = (&layouts[..], &types[..]) else {
                return Err("expected one layout (.row or .col) and one type".into());
            };
            let input = match (use_, elem) {
                (Use::C, Elem::F16 | Elem::F32 | Elem::F64 | Elem::S32) => {
                    // The accumulator's shapes are those of some input type.
                    [Elem::F16, Elem::Tf32, Elem::F64]
                        .into_iter()
                        .find(|&t| shape_ok(shape, t) && (elem == Elem::F64) == (t == Elem::F64))
                }
                (Use::A | Use::B, e) if !matches!(e, Elem::F32 | Elem::S32) => Some(e),
                _ => None,
            };
            if !input.is_some_and(|t| shape_ok(shape, t)) {
                return Err(format!("no {:?} fragment of {elem:?} in this shape", use_));
            }
            Ok(Form::Memory {
                store,
                frag: Frag { use_, shape, elem },
                col_major,
                sp,
            })
        }
        "mma" => {
            if layouts.len() != 2 {
                return Err("expected two layouts (.row/.col for A and for B)".into());
            }
            let (d, a, b, c) = match types[..] {
                [d, c] => (d, Elem::F16, Elem::F16, c),
                [d, a, b, c] => (d, a, b, c),
                _ => return Err("expected .dtype.ctype or .dtype.atype.btype.ctype".into()),
            };
            let ok = match a {
                Elem::F16 => {
                    b == a
                        && matches!(c, Elem::F16 | Elem::F32)
                        && matches!(d, Elem::F16 | Elem::F32)
                }
                Elem::Bf16 | Elem::Tf32 => b == a && c == Elem::F32 && d == Elem::F32,
                Elem::F64 => b == a && c == a && d == a,
                Elem::S8 | Elem::U8 => {
                    matches!(b, Elem::S8 | Elem::U8) && c == Elem::S32 && d == Elem::S32
                }
                _ => false,
            };
            if !ok || !shape_ok(shape, a) || (satfinite && !a.is_int()) {
                return Err("unsupported combination of types and shape".into());
            }
            Ok(Form::Mma(Mma {
                shape,
                a,
                b,
                c,
                d,
                satfinite,
            }))
        }
        _ => Err(format!("`wmma.{what}` is not supported by the simulator")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mods(s: &str) -> Vec<String> {
        s.split('.').map(str::to_string).collect()
    }

    fn frag(s: &str) -> Frag {
        match parse(&mods(s)).unwrap() {
            Form::Memory { frag, .. } => frag,
            f => panic!("{f:?}"),
        }
    }

    #[test]
    fn every_fragment_places_each_element_once_per_copy() {
        for s in [
            "load.a.sync.aligned.row.m16n16k16.f16",
            "load.b.sync.aligned.col.m32n8k16.f16",
            "load.b.sync.aligned.col.m8n32k16.bf16",
            "load.c.sync.aligned.row.m16n16k16.f16",
            "load.c.sync.aligned.row.m32n8k16.f32",
            "load.a.sync.aligned.row.m16n16k8.tf32",
            "load.a.sync.aligned.row.m8n8k4.f64",
            "load.c.sync.aligned.row.m8n8k4.f64",
            "load.a.sync.aligned.row.m16n16k16.s8",
            "load.b.sync.aligned.row.m8n32k16.u8",
        ] {
            let f = frag(s);
            let (r, c) = f.dims();
            let mut seen = vec![0u32; (r * c) as usize];
            for lane in 0..32 {
                for e in 0..f.per_lane() {
                    let (row, col) = f.place(lane, e);
                    seen[(row * c + col) as usize] += 1;
                }
            }
            let copies = 32 * f.per_lane() / (r * c);
            assert!(seen.iter().all(|&n| n == copies), "{s}: {seen:?}");
            assert_eq!(f.regs() as u32 * f.elem.per_reg(), f.per_lane(), "{s}");
        }
        // The register counts PTX gives each fragment.
        assert_eq!(frag("load.a.sync.aligned.row.m16n16k16.f16").regs(), 8);
        assert_eq!(frag("load.c.sync.aligned.row.m16n16k16.f16").regs(), 4);
        assert_eq!(frag("load.c.sync.aligned.row.m16n16k16.f32").regs(), 8);
        assert_eq!(frag("load.a.sync.aligned.row.m16n16k16.bf16").regs(), 4);
        assert_eq!(frag("load.a.sync.aligned.row.m32n8k16.bf16").regs(), 8);
        assert_eq!(frag("load.b.sync.aligned.row.m32n8k16.bf16").regs(), 2);
        assert_eq!(frag("load.a.sync.aligned.row.m16n16k8.tf32").regs(), 4);
        assert_eq!(frag("load.a.sync.aligned.row.m8n8k4.f64").regs(), 1);
        assert_eq!(frag("load.c.sync.aligned.row.m8n8k4.f64").regs(), 2);
        assert_eq!(frag("load.a.sync.aligned.row.m16n16k16.s8").regs(), 2);
        assert_eq!(frag("load.a.sync.aligned.row.m8n32k16.s8").regs(), 1);
    }

    #[test]
    fn gather_undoes_scatter() {
        let f = frag("load.a.sync.aligned.row.m16n16k16.f16");
        let p = f.places();
        let m: Vec<u64> = (0..256).map(|i| i * 7 % 65521).collect();
        let regs: Vec<Vec<u64>> = (0..32)
            .map(|l| {
                let mut o = vec![0; f.regs()];
                p.scatter(&m, l, &mut o);
                o
            })
            .collect();
        assert_eq!(p.gather(|l, r| regs[l][r]), m);
    }

    fn h(x: f32) -> u64 {
        f64_to_f16(x as f64, Rnd::N) as u64
    }

    #[test]
    fn products_sum_as_matrices_do() {
        let Form::Mma(mma) = parse(&mods("mma.sync.aligned.row.col.m16n16k16.f32.f32")).unwrap()
        else {
            panic!()
        };
        let a: Vec<u64> = (0..256).map(|i| h((i % 5) as f32 - 2.0)).collect();
        let b: Vec<u64> = (0..256).map(|i| h((i % 3) as f32 * 0.5)).collect();
        let c: Vec<u64> = (0..256).map(|i| (i as f32).to_bits() as u64).collect();
        let d = mma.compute(&a, &b, &c);
        for i in 0..16 {
            for j in 0..16 {
                let want: f32 = (0..16)
                    .map(|l| (((i * 16 + l) % 5) as f32 - 2.0) * (((l * 16 + j) % 3) as f32 * 0.5))
                    .sum::<f32>()
                    + (i * 16 + j) as f32;
                assert_eq!(f32::from_bits(d[i * 16 + j] as u32), want, "({i},{j})");
            }
        }
        // Integers wrap, or saturate with .satfinite.
        for (sat, want) in [(false, i32::MIN as u32), (true, i32::MAX as u32)] {
            let s = format!(
                "mma.sync.aligned.row.col.m16n16k16.s32.u8.u8.s32{}",
                if sat { ".satfinite" } else { "" }
            );
            let Form::Mma(mma) = parse(&mods(&s)).unwrap() else {
                panic!()
            };
            let a = vec![1u64; 256];
            let b = vec![0u64; 256];
            let c = vec![i32::MAX as u32 as u64; 256];
            let mut a2 = a.clone();
            a2[0] = 1;
            let mut b2 = b.clone();
            b2[0] = 1;
            assert_eq!(mma.compute(&a2, &b2, &c)[0] as u32, want);
        }
        // tf32 reads 10 mantissa bits.
        let Form::Mma(mma) =
            parse(&mods("mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32")).unwrap()
        else {
            panic!()
        };
        let one_plus = (1.0f32 + f32::EPSILON).to_bits() as u64;
        let mut a = vec![0u64; 128];
        a[0] = one_plus;
        let mut b = vec![0u64; 128];
        b[0] = 1f32.to_bits() as u64;
        assert_eq!(
            f32::from_bits(mma.compute(&a, &b, &[0; 256])[0] as u32),
            1.0
        );
    }

    #[test]
    fn tf32_conversions_round_as_ptx_says() {
        use crate::ops::tf32_of;
        let f = |x: f32| x.to_bits();
        let g = f32::from_bits;
        // 1 + 2^-11 is a tie: away from zero (rna) goes up, to even (rn) down.
        let tie = f(1.0 + 2f32.powi(-11));
        assert_eq!(g(tf32_of::<0, false, false>(tie)), 1.0 + 2f32.powi(-10));
        assert_eq!(g(tf32_of::<1, false, false>(tie)), 1.0);
        let above = f(1.0 + 2f32.powi(-11) + 2f32.powi(-12));
        assert_eq!(g(tf32_of::<1, false, false>(above)), 1.0 + 2f32.powi(-10));
        assert_eq!(g(tf32_of::<2, false, false>(above)), 1.0);
        assert_eq!(tf32_of::<1, true, false>(f(-3.0)), 0);
        assert_eq!(g(tf32_of::<1, false, false>(f(f32::MAX))), f32::INFINITY);
        assert_eq!(tf32_of::<1, false, true>(f(f32::MAX)), 0x7f7f_e000);
        assert!(g(tf32_of::<0, false, false>(f(f32::NAN))).is_nan());
    }

    #[test]
    fn unsupported_forms_are_named() {
        for (s, what) in [
            ("load.a.sync.aligned.row.m8n8k32.s4", "s4"),
            (
                "mma.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32.xor.popc",
                "b1",
            ),
            ("load.a.sync.aligned.row.m16n16k16.f32", "fragment"),
            ("mma.sync.aligned.row.col.m16n16k8.f32.f32", "combination"),
        ] {
            let e = parse(&mods(s)).unwrap_err();
            assert!(e.contains(what), "{s}: {e}");
        }
    }
}
