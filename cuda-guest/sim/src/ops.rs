//! Warp-wide lane functions: each computes all 32 lanes of one operation; the decoder
//! picks one per instruction so execution is one indirect call per warp instruction.

#![allow(clippy::needless_range_loop)]

/// One 64-bit value per lane.
pub(crate) type Lanes = [u64; 32];
/// `d = f(a, b)` over a warp: (register file, d, a, b, lane mask), registers as row
/// indices of 32 lanes.
pub(crate) type BinFn = fn(&mut [u64], usize, usize, usize, u32);
/// `d = f(a)` over a warp.
pub(crate) type UnFn = fn(&mut [u64], usize, usize, u32);
/// `d = f(a, b, c)` over a warp.
pub(crate) type TerFn = fn(&mut [u64], usize, usize, usize, usize, u32);
/// Lane mask of `a CMP b` (register file, a, b).
pub(crate) type CmpFn = fn(&[u64], usize, usize) -> u32;

/// An integer type of a PTX register.
pub(crate) trait Int: Copy + PartialOrd + Ord {
    const BITS: u32;
    const SIGNED: bool;
    fn from_u64(v: u64) -> Self;
    fn to_u64(self) -> u64;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn mulhi(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn rem(self, o: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    fn shr(self, n: u32) -> Self;
    fn to_i128(self) -> i128;
}

macro_rules! impl_int {
    ($t:ty, $w:ty, $signed:expr) => {
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            const SIGNED: bool = $signed;
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_u64(self) -> u64 {
                (self as u64) & (u64::MAX >> (64 - <$t>::BITS))
            }
            #[inline(always)]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn mulhi(self, o: Self) -> Self {
                (((self as $w) * (o as $w)) >> <$t>::BITS) as $t
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                // PTX leaves division by zero unspecified; GPUs return all ones.
                if o == 0 {
                    !0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline(always)]
            fn rem(self, o: Self) -> Self {
                // As division: all ones on the GPU (measured, fixtures/isa-goldens).
                if o == 0 {
                    !0
                } else {
                    self.wrapping_rem(o)
                }
            }
            #[inline(always)]
            fn wneg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[inline(always)]
            fn wabs(self) -> Self {
                if $signed && self < (0 as $t) {
                    self.wneg()
                } else {
                    self
                }
            }
            #[inline(always)]
            fn shr(self, n: u32) -> Self {
                // Shift amounts are clamped to the width (sign fill for signed types).
                if $signed {
                    self >> n.min(<$t>::BITS - 1)
                } else {
                    let v = self >> (n & (<$t>::BITS - 1));
                    if n >= <$t>::BITS {
                        0
                    } else {
                        v
                    }
                }
            }
            #[inline(always)]
            fn to_i128(self) -> i128 {
                self as i128
            }
        }
    };
}
impl_int!(u8, u16, false);
impl_int!(u16, u32, false);
impl_int!(u32, u64, false);
impl_int!(u64, u128, false);
impl_int!(i8, i16, true);
impl_int!(i16, i32, true);
impl_int!(i32, i64, true);
impl_int!(i64, i128, true);

/// Row `r` of the register file as a fixed-size array.
#[inline(always)]
fn row(regs: &[u64], r: usize) -> &Lanes {
    <&Lanes>::try_from(&regs[r * 32..r * 32 + 32]).expect("register row")
}

/// Writes `out` into row `d` on the lanes of `mk`.
#[inline(always)]
fn put(regs: &mut [u64], d: usize, out: &Lanes, mk: u32) {
    let rd = <&mut Lanes>::try_from(&mut regs[d * 32..d * 32 + 32]).expect("register row");
    if mk == u32::MAX {
        *rd = *out;
        return;
    }
    let mut m = mk;
    while m != 0 {
        let l = m.trailing_zeros() as usize;
        m &= m - 1;
        rd[l] = out[l];
    }
}

/// Row `d` mutably and rows `srcs` shared, when `d` is none of them.
#[inline(always)]
fn split<const N: usize>(
    regs: &mut [u64],
    d: usize,
    srcs: [usize; N],
) -> Option<(&mut Lanes, [&Lanes; N])> {
    if srcs.contains(&d) || (d + 1) * 32 > regs.len() {
        return None;
    }
    let (lo, hi) = regs.split_at_mut(d * 32);
    let (rd, rest) = hi.split_at_mut(32);
    let mut out: [&Lanes; N] = [&[0; 32]; N];
    for (k, &x) in srcs.iter().enumerate() {
        let sl = if x < d {
            lo.get(x * 32..x * 32 + 32)?
        } else {
            rest.get((x - d - 1) * 32..(x - d) * 32)?
        };
        out[k] = <&Lanes>::try_from(sl).ok()?;
    }
    Some((<&mut Lanes>::try_from(rd).ok()?, out))
}

#[inline(always)]
fn map2(r: &mut [u64], d: usize, a: usize, b: usize, mk: u32, f: impl Fn(u64, u64) -> u64) {
    if mk.is_power_of_two() {
        // One lane (a divergent path's last lane, or the JIT's call for one thread).
        let l = mk.trailing_zeros() as usize;
        r[d * 32 + l] = f(r[a * 32 + l], r[b * 32 + l]);
        return;
    }
    if mk == u32::MAX {
        if let Some((rd, [ra, rb])) = split(r, d, [a, b]) {
            for l in 0..32 {
                rd[l] = f(ra[l], rb[l]);
            }
            return;
        }
        // The destination is also a source (`add %r, %r, %s`): each lane reads its own
        // lane before writing it, so the row is updated in place.
        if d == a && d != b {
            if let Some((rd, [rb])) = split(r, d, [b]) {
                for l in 0..32 {
                    rd[l] = f(rd[l], rb[l]);
                }
                return;
            }
        } else if d == b && d != a {
            if let Some((rd, [ra])) = split(r, d, [a]) {
                for l in 0..32 {
                    rd[l] = f(ra[l], rd[l]);
                }
                return;
            }
        }
    }
    let mut out = [0u64; 32];
    let (ra, rb) = (row(r, a), row(r, b));
    for l in 0..32 {
        out[l] = f(ra[l], rb[l]);
    }
    put(r, d, &out, mk);
}
#[inline(always)]
fn map1(r: &mut [u64], d: usize, a: usize, mk: u32, f: impl Fn(u64) -> u64) {
    if mk.is_power_of_two() {
        let l = mk.trailing_zeros() as usize;
        r[d * 32 + l] = f(r[a * 32 + l]);
        return;
    }
    if mk == u32::MAX {
        if let Some((rd, [ra])) = split(r, d, [a]) {
            for l in 0..32 {
                rd[l] = f(ra[l]);
            }
            return;
        }
        if d == a {
            if let Some((rd, [])) = split(r, d, []) {
                for l in 0..32 {
                    rd[l] = f(rd[l]);
                }
                return;
            }
        }
    }
    let mut out = [0u64; 32];
    let ra = row(r, a);
    for l in 0..32 {
        out[l] = f(ra[l]);
    }
    put(r, d, &out, mk);
}
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn map3(
    r: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
    f: impl Fn(u64, u64, u64) -> u64,
) {
    if mk.is_power_of_two() {
        let l = mk.trailing_zeros() as usize;
        r[d * 32 + l] = f(r[a * 32 + l], r[b * 32 + l], r[c * 32 + l]);
        return;
    }
    if mk == u32::MAX {
        if let Some((rd, [ra, rb, rc])) = split(r, d, [a, b, c]) {
            for l in 0..32 {
                rd[l] = f(ra[l], rb[l], rc[l]);
            }
            return;
        }
        // An accumulator (`mad %r, %a, %b, %r`) updated in place, lane by lane.
        if d == c && d != a && d != b {
            if let Some((rd, [ra, rb])) = split(r, d, [a, b]) {
                for l in 0..32 {
                    rd[l] = f(ra[l], rb[l], rd[l]);
                }
                return;
            }
        }
    }
    let mut out = [0u64; 32];
    let (ra, rb, rc) = (row(r, a), row(r, b), row(r, c));
    for l in 0..32 {
        out[l] = f(ra[l], rb[l], rc[l]);
    }
    put(r, d, &out, mk);
}

// ---- integer ------------------------------------------------------------------------

pub(crate) fn add<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).wadd(T::from_u64(y)).to_u64()
    })
}
pub(crate) fn sub<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).wsub(T::from_u64(y)).to_u64()
    })
}
pub(crate) fn mul_lo<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).wmul(T::from_u64(y)).to_u64()
    })
}
pub(crate) fn mul_hi<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).mulhi(T::from_u64(y)).to_u64()
    })
}
/// The exact product of two `T` (low 64 bits): in 64-bit arithmetic for types of at
/// most 32 bits (which vectorises; the product fits), in 128-bit otherwise.
#[inline(always)]
fn wide_product<T: Int>(x: u64, y: u64) -> i128 {
    if T::BITS == 32 && T::SIGNED {
        // The unsigned 32x32 product (one vector multiply) corrected for the signs:
        // a = ua - 2^32 [a < 0], so a*b = ua*ub - 2^32 ([a < 0] ub + [b < 0] ua) mod 2^64.
        let (ua, ub) = (x & 0xffff_ffff, y & 0xffff_ffff);
        let (sa, sb) = (
            ((x as u32 as i32) >> 31) as i64 as u64,
            ((y as u32 as i32) >> 31) as i64 as u64,
        );
        let corr = (sa & ub).wrapping_add(sb & ua);
        (ua * ub).wrapping_sub(corr << 32) as i64 as i128
    } else if T::BITS <= 32 {
        (T::from_u64(x).to_i128() as i64).wrapping_mul(T::from_u64(y).to_i128() as i64) as i128
    } else {
        T::from_u64(x).to_i128() * T::from_u64(y).to_i128()
    }
}

/// `mul.wide`: product of two T in twice the width (at most 64 bits).
pub(crate) fn mul_wide<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        (wide_product::<T>(x, y) as u64) & (u64::MAX >> (64 - 2 * T::BITS))
    })
}
pub(crate) fn mad_lo<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        T::from_u64(x)
            .wmul(T::from_u64(y))
            .wadd(T::from_u64(z))
            .to_u64()
    })
}
/// `mad{.lo,.hi}.cc`/`madc`: the low or high `w` bits of `a * b` (operands of `w` bits,
/// signed or not) plus `c` plus `carry_in`, as `w` bits, and the carry out of that
/// unsigned addition (the product's half and `c` taken as bit patterns, as PTX says).
pub(crate) fn mad_carry(
    a: u64,
    b: u64,
    c: u64,
    carry_in: u32,
    hi: bool,
    signed: bool,
    w64: bool,
) -> (u64, bool) {
    let bits = if w64 { 64 } else { 32 };
    let m: u128 = if w64 {
        u64::MAX as u128
    } else {
        u32::MAX as u128
    };
    let wide = |x: u64| -> i128 {
        if signed {
            // Sign-extend from the operand width.
            ((x as i128) << (128 - bits)) >> (128 - bits)
        } else {
            (x as u128 & m) as i128
        }
    };
    // A product of two 64-bit operands fits 128 bits as a bit pattern either way.
    let product = wide(a).wrapping_mul(wide(b)) as u128;
    let half = if hi { product >> bits } else { product } & m;
    let sum = half + (c as u128 & m) + carry_in as u128;
    ((sum & m) as u64, sum > m)
}
pub(crate) fn mad_hi<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        T::from_u64(x)
            .mulhi(T::from_u64(y))
            .wadd(T::from_u64(z))
            .to_u64()
    })
}
pub(crate) fn mad_wide<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let m = u64::MAX >> (64 - 2 * T::BITS);
        ((wide_product::<T>(x, y) as u64).wrapping_add(z)) & m
    })
}
pub(crate) fn div<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).div(T::from_u64(y)).to_u64()
    })
}
pub(crate) fn rem<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).rem(T::from_u64(y)).to_u64()
    })
}
/// `add.sat.s32` / `sub.sat.s32` (`SUB`): the result clamped to the s32 range.
pub(crate) fn addsub_sat<const SUB: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (x as u32 as i32, y as u32 as i32);
        (if SUB {
            x.saturating_sub(y)
        } else {
            x.saturating_add(y)
        }) as u32 as u64
    })
}
/// `min.relu.s32` / `max.relu.s32` (`MAX`): the minimum or maximum, negatives 0.
pub(crate) fn minmax_relu<const MAX: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (x as u32 as i32, y as u32 as i32);
        (if MAX { x.max(y) } else { x.min(y) }).max(0) as u32 as u64
    })
}
pub(crate) fn min<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).min(T::from_u64(y)).to_u64()
    })
}
pub(crate) fn max<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        T::from_u64(x).max(T::from_u64(y)).to_u64()
    })
}
/// `cvt.{rna,rn,rz}[.relu][.satfinite].tf32.f32`: an f32 rounded to tf32's 10 mantissa
/// bits (the low 13 bits zero), `MODE` 0 to nearest with ties away (`rna`), 1 to nearest
/// even, 2 toward zero; `RELU` makes negatives 0, `SAT` keeps an infinity finite. NaN
/// stays NaN.
pub(crate) fn tf32<const MODE: u8, const RELU: bool, const SAT: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    mk: u32,
) {
    map1(o, d, a, mk, |x| tf32_of::<MODE, RELU, SAT>(x as u32) as u64)
}

pub(crate) fn tf32_of<const MODE: u8, const RELU: bool, const SAT: bool>(x: u32) -> u32 {
    let f = f32::from_bits(x);
    if f.is_nan() {
        // rna keeps the bits it does not round away (a NaN whose payload is all low
        // bits becomes an infinity); rn and rz give a tf32 NaN (measured on an H200).
        return if MODE == 0 { x & !0x1fff } else { 0x7fff_e000 };
    }
    if RELU && (f < 0.0 || x == 0x8000_0000) {
        return 0;
    }
    let r = if f.is_infinite() {
        x
    } else {
        let bump = match MODE {
            0 => 0x1000,
            1 => 0xfff + ((x >> 13) & 1),
            _ => 0,
        };
        (x + bump) & !0x1fff
    };
    if SAT && f32::from_bits(r).is_infinite() {
        // The largest finite tf32, with the sign.
        (r & 0x8000_0000) | 0x7f7f_e000
    } else {
        r
    }
}
pub(crate) fn neg<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| T::from_u64(x).wneg().to_u64())
}
pub(crate) fn abs<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| T::from_u64(x).wabs().to_u64())
}
pub(crate) fn and<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| T::from_u64(x & y).to_u64())
}
pub(crate) fn or<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| T::from_u64(x | y).to_u64())
}
pub(crate) fn xor<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| T::from_u64(x ^ y).to_u64())
}
pub(crate) fn not<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| T::from_u64(!x).to_u64())
}
pub(crate) fn cnot<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| (T::from_u64(x).to_u64() == 0) as u64)
}
/// `shl`: the shift amount is an unsigned 32-bit value, clamped to the width.
pub(crate) fn shl<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let n = y as u32;
        if n >= T::BITS {
            0
        } else {
            T::from_u64(x << n).to_u64()
        }
    })
}
pub(crate) fn shr<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| T::from_u64(x).shr(y as u32).to_u64())
}
/// `shl` by an immediate: `b` is a constant register (every lane holds the same
/// amount), so the shift is uniform and the loop vectorises.
pub(crate) fn shl_imm<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    let n = o[b * 32] as u32;
    if n >= T::BITS {
        map1(o, d, a, mk, |_| 0)
    } else {
        map1(o, d, a, mk, |x| T::from_u64(x << n).to_u64())
    }
}
/// `shr` by an immediate (see [`shl_imm`]).
pub(crate) fn shr_imm<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    let n = o[b * 32] as u32;
    map1(o, d, a, mk, |x| T::from_u64(x).shr(n).to_u64())
}
pub(crate) fn popc<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| T::from_u64(x).to_u64().count_ones() as u64)
}
pub(crate) fn clz<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        (T::from_u64(x).to_u64().leading_zeros() - (64 - T::BITS)) as u64
    })
}
pub(crate) fn brev<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| x.reverse_bits() >> (64 - T::BITS))
}
/// `bfind`: position of the most significant non-sign bit, 0xffffffff if none.
pub(crate) fn bfind<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, bfind_of::<T>)
}
/// `bfind.shiftamt`: the left shift that brings that bit to the top (`BITS - 1 -
/// position`), 0xffffffff if none.
pub(crate) fn bfind_shiftamt<T: Int>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| match bfind_of::<T>(x) {
        0xffff_ffff => 0xffff_ffff,
        p => (T::BITS as u64 - 1) - p,
    })
}
fn bfind_of<T: Int>(x: u64) -> u64 {
    let v = T::from_u64(x).to_u64();
    let v = if T::SIGNED && (v >> (T::BITS - 1)) & 1 == 1 {
        !v & (u64::MAX >> (64 - T::BITS))
    } else {
        v
    };
    if v == 0 {
        0xffff_ffff
    } else {
        63 - v.leading_zeros() as u64
    }
}
/// The bits of a `bfe`/`bfi` position or length operand that count: the low 8 for 32-bit
/// types (the hardware's), all 32 for 64-bit ones (measured on an H200).
fn field_operand<T: Int>(v: u64) -> u64 {
    if T::BITS == 64 {
        v & 0xffff_ffff
    } else {
        v & 0xff
    }
}
/// `bfe`: extract `c` bits at `b` (sign-extended for signed types).
pub(crate) fn bfe<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    map3(o, d, a, b, c, mk, |x, pos, len| {
        let w = T::BITS as u64;
        let pos = field_operand::<T>(pos);
        let len = field_operand::<T>(len);
        let x = T::from_u64(x).to_u64();
        let sbit = if T::SIGNED {
            if len == 0 {
                false
            } else {
                let top = (pos + len - 1).min(w - 1);
                (x >> top) & 1 == 1
            }
        } else {
            false
        };
        let mut d = 0u64;
        for i in 0..w {
            let bit = if i < len && pos + i < w {
                (x >> (pos + i)) & 1 == 1
            } else {
                sbit
            };
            d |= (bit as u64) << i;
        }
        d
    })
}
/// `bfi`: insert the low `len` bits of `a` into `b` at `pos`.
pub(crate) fn bfi<T: Int>(b: u64, a: u64, pos: u64, len: u64) -> u64 {
    let w = T::BITS as u64;
    let pos = field_operand::<T>(pos);
    let len = field_operand::<T>(len).min(w);
    let mut f = T::from_u64(b).to_u64();
    for i in 0..len {
        if pos + i >= w {
            break;
        }
        f = (f & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
    }
    f
}
/// `prmt.b32` (default mode): byte select with optional sign replication.
pub(crate) fn prmt(a: u64, b: u64, c: u64) -> u64 {
    let bytes = ((b as u32 as u64) << 32) | (a as u32 as u64);
    let mut d = 0u64;
    for i in 0..4 {
        let sel = (c >> (4 * i)) & 0xf;
        let mut byte = (bytes >> ((sel & 7) * 8)) & 0xff;
        if sel & 8 != 0 {
            byte = if byte & 0x80 != 0 { 0xff } else { 0 };
        }
        d |= byte << (8 * i);
    }
    d
}

/// `prmt`'s fixed modes by PTX name: for each value of the selector's low two bits, the
/// byte of `b:a` (a is bytes 0-3) each result byte takes, result byte 0 first (PTX ISA).
pub(crate) const PRMT_MODES: [(&str, [[u8; 4]; 4]); 6] = [
    (
        "f4e",
        [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
    ),
    (
        "b4e",
        [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
    ),
    ("rc8", [[0; 4], [1; 4], [2; 4], [3; 4]]),
    (
        "ecl",
        [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
    ),
    (
        "ecr",
        [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
    ),
    (
        "rc16",
        [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
    ),
];

/// `prmt.b32.<mode>` over a warp, `M` the mode's index in [`PRMT_MODES`].
pub(crate) fn prmt_fixed<const M: usize>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let bytes = ((y as u32 as u64) << 32) | (x as u32 as u64);
        PRMT_MODES[M].1[(z & 3) as usize]
            .iter()
            .enumerate()
            .fold(0, |d, (i, &sel)| {
                d | ((bytes >> (sel * 8)) & 0xff) << (8 * i)
            })
    })
}

pub(crate) fn cmp_int<T: Int, const OP: u8>(r: &[u64], a: usize, b: usize) -> u32 {
    let (a, b) = (row(r, a), row(r, b));
    let mut m = 0u32;
    for l in 0..32 {
        let x = T::from_u64(a[l]);
        let y = T::from_u64(b[l]);
        let r = match OP {
            0 => x == y,
            1 => x != y,
            2 => x < y,
            3 => x <= y,
            4 => x > y,
            _ => x >= y,
        };
        m |= (r as u32) << l;
    }
    m
}

// ---- float --------------------------------------------------------------------------

/// Rounding modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rnd {
    /// Nearest even.
    N,
    /// Toward zero.
    Z,
    /// Toward minus infinity.
    M,
    /// Toward plus infinity.
    P,
}

/// A float type.
pub(crate) trait Flt:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    const BITS: u32;
    fn from_u64(v: u64) -> Self;
    fn is_nan(self) -> bool;
    fn fma(self, b: Self, c: Self) -> Self;
    fn sqrt(self) -> Self;
    fn ftz(self) -> Self;
    /// The result's bits; a NaN result is the one the operation makes itself
    /// ([`Flt::DEFAULT_NAN`]).
    fn canon(self) -> u64;
    /// The NaN an operation makes from non-NaN operands: f32 `0x7fff_ffff` (PTX ISA),
    /// f64 `0xfff8_0000_0000_0000` (measured on an H200: `fixtures/isa-goldens`).
    const DEFAULT_NAN: u64;
    /// Whether a NaN operand passes to the result (f64, quieted) or every NaN result is
    /// the default one (f32).
    const PROPAGATES: bool;
    /// The quiet bit.
    const QUIET: u64;
    fn bits(self) -> u64;
    /// The result's bits, a NaN result as the GPU gives it: f64 takes the first NaN of
    /// `ops` (the operands in the hardware's priority: b, then a, then c), quieted.
    #[inline(always)]
    fn result(self, ops: &[Self]) -> u64 {
        if self.is_nan() {
            Self::nan_of(ops)
        } else {
            self.bits()
        }
    }
    /// The NaN an operation on `ops` gives (see [`Flt::result`]).
    #[inline]
    fn nan_of(ops: &[Self]) -> u64 {
        if Self::PROPAGATES {
            if let Some(n) = ops.iter().find(|o| o.is_nan()) {
                return n.bits() | Self::QUIET;
            }
        }
        Self::DEFAULT_NAN
    }
    fn next_up(self) -> Self;
    fn next_down(self) -> Self;
    fn zero() -> Self;
    fn is_sign_negative(self) -> bool;
    fn to_f64(self) -> f64;
}

macro_rules! impl_flt {
    ($t:ty, $bits:expr, $u:ty, $nan:expr, $quiet:expr, $propagates:expr) => {
        impl Flt for $t {
            const BITS: u32 = $bits;
            const DEFAULT_NAN: u64 = $nan;
            const PROPAGATES: bool = $propagates;
            const QUIET: u64 = $quiet;
            #[inline(always)]
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                <$t>::from_bits(v as $u)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn fma(self, b: Self, c: Self) -> Self {
                if $bits == 32 {
                    // Through f64 (see fma_f32), without a libm call.
                    let r = fma_f32(self as f32, b as f32, c as f32);
                    r as $t
                } else {
                    <$t>::mul_add(self, b, c)
                }
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn ftz(self) -> Self {
                if self.is_subnormal() {
                    <$t>::from_bits(self.to_bits() & (1 << ($bits - 1)))
                } else {
                    self
                }
            }
            #[inline(always)]
            fn canon(self) -> u64 {
                if self.is_nan() {
                    $nan
                } else {
                    self.to_bits() as u64
                }
            }
            fn next_up(self) -> Self {
                <$t>::next_up(self)
            }
            fn next_down(self) -> Self {
                <$t>::next_down(self)
            }
            fn zero() -> Self {
                0.0
            }
            fn is_sign_negative(self) -> bool {
                <$t>::is_sign_negative(self)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
impl_flt!(f32, 32, u32, 0x7fff_ffff, 1 << 22, false);
impl_flt!(f64, 64, u64, 0xfff8_0000_0000_0000, 1 << 51, true);

/// Correctly rounded f32 fused multiply-add computed in f64: the product is exact in
/// f64 and the sum is rounded once to f64; rounding that to f32 again is only wrong when
/// the f64 sum lands exactly on a midpoint between two f32 values while the exact sum
/// does not, in which case the sum is moved one f64 ulp toward the exact value first.
/// Results in the f32 subnormal range take the library fma.
#[inline(always)]
pub(crate) fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    let p = a as f64 * b as f64;
    let cc = c as f64;
    let s = p + cc;
    let abs = s.abs();
    // A zero f64 sum of two f64 values is exact (with IEEE's sign), so only results in
    // the f32 subnormal range need the library.
    if abs < f32::MIN_POSITIVE as f64 && abs != 0.0 {
        return a.mul_add(b, c);
    }
    let bits = s.to_bits();
    if bits & 0x1FFF_FFFF == 0x1000_0000 && s.is_finite() {
        let bb = s - p;
        let e = (p - (s - bb)) + (cc - bb);
        if e != 0.0 {
            let toward_larger_magnitude = (e > 0.0) == (s > 0.0);
            let s2 = f64::from_bits(if toward_larger_magnitude {
                bits + 1
            } else {
                bits - 1
            });
            return s2 as f32;
        }
    }
    s as f32
}

/// Adjusts a round-to-nearest result `r` of an exact value `r + err` to mode `m`.
#[inline]
pub(crate) fn directed<F: Flt>(r: F, err_sign: i8, m: Rnd) -> F {
    if r.is_nan() {
        return r;
    }
    match m {
        Rnd::N => r,
        Rnd::M if err_sign < 0 => r.next_down(),
        Rnd::P if err_sign > 0 => r.next_up(),
        Rnd::Z if err_sign < 0 && !r.is_sign_negative() && r != F::zero() => r.next_down(),
        Rnd::Z if err_sign > 0 && r.is_sign_negative() && r != F::zero() => r.next_up(),
        _ => r,
    }
}

fn sign_of(e: f64) -> i8 {
    if e > 0.0 {
        1
    } else if e < 0.0 {
        -1
    } else {
        0
    }
}

/// Exact error sign of `s = rn(a + b)`.
fn two_sum_err(a: f64, b: f64, s: f64) -> i8 {
    if !s.is_finite() {
        return 0;
    }
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    sign_of(e)
}

pub(crate) fn fadd<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (F::from_u64(x), F::from_u64(y));
        if FTZ {
            (x.ftz() + y.ftz()).ftz().result(&[y, x])
        } else {
            (x + y).result(&[y, x])
        }
    })
}
pub(crate) fn fsub<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (F::from_u64(x), F::from_u64(y));
        if FTZ {
            (x.ftz() - y.ftz()).ftz().result(&[y, x])
        } else {
            (x - y).result(&[y, x])
        }
    })
}
pub(crate) fn fmul<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (F::from_u64(x), F::from_u64(y));
        if FTZ {
            (x.ftz() * y.ftz()).ftz().result(&[y, x])
        } else {
            (x * y).result(&[y, x])
        }
    })
}
pub(crate) fn fdiv<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (F::from_u64(x), F::from_u64(y));
        if FTZ {
            (x.ftz() / y.ftz()).ftz().result(&[x, y])
        } else {
            (x / y).result(&[x, y])
        }
    })
}
pub(crate) fn ffma<F: Flt, const FTZ: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let (x, y, z) = (F::from_u64(x), F::from_u64(y), F::from_u64(z));
        if FTZ {
            x.ftz().fma(y.ftz(), z.ftz()).ftz().result(&[y, x, z])
        } else {
            x.fma(y, z).result(&[y, x, z])
        }
    })
}
/// Whether the f64 sum `s = rn(p + z)` of an exact product `p` and `z` needs the exact
/// f32 fma path: an f32 midpoint reached by rounding (a midpoint the sum reached
/// exactly rounds correctly to f32 by itself; such sums are common when the product
/// has few bits, as in saxpy), the f32 subnormal range, or not finite.
#[inline(always)]
fn fma_needs_exact(p: f64, z: f64, s: f64) -> bool {
    // The sum's rounding error (TwoSum), exact in f64.
    let bb = s - p;
    let e = (p - (s - bb)) + (z - bb);
    let bits = s.to_bits() as u32;
    let abs = s.abs();
    ((bits & 0x1FFF_FFFF == 0x1000_0000) & (e != 0.0))
        | (abs < f32::MIN_POSITIVE as f64) & (abs != 0.0)
        | !s.is_finite()
}

/// f32 fma over a warp: the CPU's fused multiply-add where it has one (x86-64 with FMA
/// and AVX2, found at run time), else [`ffma32_soft`]. Both give the correctly rounded
/// result (canonical NaN, FTZ's flushes).
pub(crate) fn ffma32<const FTZ: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: calling a function compiled for FMA and AVX2 needs only a CPU that has
        // them, which was just checked; the function itself is safe code.
        unsafe { ffma32_fma::<FTZ>(o, d, a, b, c, mk) };
        return;
    }
    ffma32_soft::<FTZ>(o, d, a, b, c, mk)
}

/// [`ffma32`] with the CPU's fused multiply-add (`f32::mul_add` compiled for FMA: one
/// correctly rounded vector instruction per 8 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma,avx2")]
fn ffma32_fma<const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    let mut out = [0u64; 32];
    let ftz = |v: f32| {
        if FTZ && v.is_subnormal() {
            f32::from_bits(v.to_bits() & 0x8000_0000)
        } else {
            v
        }
    };
    let (ra, rb, rc) = (row(o, a), row(o, b), row(o, c));
    for l in 0..32 {
        let x = ftz(f32::from_bits(ra[l] as u32));
        let y = ftz(f32::from_bits(rb[l] as u32));
        let z = ftz(f32::from_bits(rc[l] as u32));
        let r = x.mul_add(y, z);
        let mut v = if r.is_nan() { 0x7fff_ffff } else { r.to_bits() };
        if FTZ && v & 0x7f80_0000 == 0 {
            v &= 0x8000_0000;
        }
        out[l] = v as u64;
    }
    put(o, d, &out, mk);
}

/// f32 fma over a warp without an fma instruction: a branch-free first pass through f64
/// (see [`fma_f32`]); the rare lanes that land on an f32 midpoint, in the f32 subnormal
/// range or off the finite range are redone exactly.
pub(crate) fn ffma32_soft<const FTZ: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    let mut out = [0u64; 32];
    let mut special = 0u32;
    let ftz = |v: f32| {
        if FTZ && v.is_subnormal() {
            f32::from_bits(v.to_bits() & 0x8000_0000)
        } else {
            v
        }
    };
    let (ra, rb, rc) = (row(o, a), row(o, b), row(o, c));
    let mut any_odd = false;
    for l in 0..32 {
        let x = ftz(f32::from_bits(ra[l] as u32));
        let y = ftz(f32::from_bits(rb[l] as u32));
        let z = ftz(f32::from_bits(rc[l] as u32));
        let (p, zz) = (x as f64 * y as f64, z as f64);
        let s = p + zz;
        any_odd |= fma_needs_exact(p, zz, s);
        out[l] = (s as f32).to_bits() as u64;
    }
    if any_odd {
        for l in 0..32 {
            let x = ftz(f32::from_bits(ra[l] as u32));
            let y = ftz(f32::from_bits(rb[l] as u32));
            let z = ftz(f32::from_bits(rc[l] as u32));
            let (p, zz) = (x as f64 * y as f64, z as f64);
            special |= (fma_needs_exact(p, zz, p + zz) as u32) << l;
        }
    }
    let mut sp = special;
    while sp != 0 {
        let l = sp.trailing_zeros() as usize;
        sp &= sp - 1;
        let x = ftz(f32::from_bits(ra[l] as u32));
        let y = ftz(f32::from_bits(rb[l] as u32));
        let z = ftz(f32::from_bits(rc[l] as u32));
        // Only these lanes can be NaN (the others are finite sums).
        out[l] = ftz(fma_f32(x, y, z)).canon();
    }
    if FTZ {
        for v in out.iter_mut() {
            if *v & 0x7f80_0000 == 0 {
                *v &= 0x8000_0000;
            }
        }
    }
    put(o, d, &out, mk);
}

/// `min`/`max` (`MAX`) on floats: a NaN operand loses (`.NaN`, `NANP`: wins, as the
/// default NaN), two NaNs give a NaN, -0 < +0; `.ftz` flushes subnormal operands.
pub(crate) fn fmin<F: Flt, const MAX: bool, const NANP: bool, const FTZ: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        let (mut x, mut y) = (F::from_u64(x), F::from_u64(y));
        if FTZ {
            (x, y) = (x.ftz(), y.ftz());
        }
        if x.is_nan() || y.is_nan() {
            return if NANP || (x.is_nan() && y.is_nan()) {
                F::nan_of(&[y, x])
            } else if x.is_nan() {
                y.bits()
            } else {
                x.bits()
            };
        }
        let r = if x == y {
            // -0 < +0
            if MAX == x.is_sign_negative() {
                y
            } else {
                x
            }
        } else if (x < y) != MAX {
            x
        } else {
            y
        };
        r.bits()
    })
}
/// `neg`/`abs` (`ABS`) on floats: the sign bit, a NaN operand giving the NaN of an
/// operation (f32: the default NaN; f64: the operand, quieted); `.ftz` flushes first.
pub(crate) fn fsign<F: Flt, const ABS: bool, const FTZ: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    mk: u32,
) {
    map1(o, d, a, mk, |x| {
        let mut v = F::from_u64(x);
        if FTZ {
            v = v.ftz();
        }
        if v.is_nan() {
            return F::nan_of(&[v]);
        }
        let sign = 1u64 << (F::BITS - 1);
        if ABS {
            v.bits() & !sign
        } else {
            v.bits() ^ sign
        }
    })
}
pub(crate) fn fsqrt<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let x = F::from_u64(x);
        if FTZ {
            x.ftz().sqrt().ftz().result(&[x])
        } else {
            x.sqrt().result(&[x])
        }
    })
}
pub(crate) fn frcp<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let x = F::from_u64(x);
        let one = F::from_u64(if F::BITS == 32 {
            0x3f80_0000
        } else {
            0x3ff0_0000_0000_0000
        });
        if FTZ {
            (one / x.ftz()).ftz().result(&[x])
        } else {
            (one / x).result(&[x])
        }
    })
}
/// `rcp.approx.ftz.f64`: the reciprocal of the operand's high word (the low 32 bits are
/// ignored, as on the GPU: a NaN whose payload is all low bits is an infinity there),
/// subnormal results flushed.
pub(crate) fn frcp_approx_f64(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let v = f64::from_bits(x & !0xffff_ffff).ftz();
        (1.0 / v).ftz().result(&[v])
    })
}
pub(crate) fn frsqrt<F: Flt, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let x = F::from_u64(x);
        let x = if FTZ { x.ftz() } else { x };
        let r = 1.0 / x.to_f64().sqrt();
        if F::BITS == 32 {
            F::from_u64((r as f32).to_bits() as u64).result(&[x])
        } else {
            F::from_u64(r.to_bits()).result(&[x])
        }
    })
}
/// f32 approximate transcendental functions, computed in f64 and rounded once
/// (well within the PTX ISA bounds).
pub(crate) fn f32_approx<const K: u8, const FTZ: bool>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let mut x = f32::from_bits(x as u32);
        if FTZ {
            x = x.ftz();
        }
        let v = x as f64;
        let r = match K {
            0 => v.exp2(),
            1 => v.log2(),
            2 => v.sin(),
            3 => v.cos(),
            4 => v.tanh(),
            _ => 1.0 / v,
        } as f32;
        let r = if FTZ { r.ftz() } else { r };
        r.canon()
    })
}
// ---- Float arithmetic with a rounding mode, `.ftz` and `.sat` ------------------------------

/// The operations of [`falu2`]/[`falu3`]/[`falu1`] (their `OP`).
pub(crate) mod fop {
    pub(crate) const ADD: u8 = 0;
    pub(crate) const SUB: u8 = 1;
    pub(crate) const MUL: u8 = 2;
    pub(crate) const DIV: u8 = 3;
    pub(crate) const FMA: u8 = 4;
    pub(crate) const SQRT: u8 = 5;
    pub(crate) const RCP: u8 = 6;
}

/// `(r, e)`: `op` on f64 operands rounded to nearest, and the sign of the exact result
/// minus `r` (0: exact). Overflow of finite operands counts as inexact toward zero.
fn f64_rn_err(op: u8, x: f64, y: f64, z: f64) -> (f64, i8) {
    // 2^600: scales tiny operands so that error terms do not underflow.
    const UP: f64 = f64::from_bits((1023 + 600) << 52);
    const TINY: f64 = f64::from_bits((1023 - 900) << 52);
    let (x, y) = if op == fop::RCP { (1.0, x) } else { (x, y) };
    let finite = x.is_finite() && y.is_finite() && z.is_finite();
    let (r, e) = match op {
        fop::ADD | fop::SUB => {
            let y = if op == fop::SUB { -y } else { y };
            let s = x + y;
            (s, two_sum_err(x, y, s))
        }
        fop::MUL => {
            let s = x * y;
            let e = if !s.is_finite() {
                0
            } else if s.abs() < TINY && x != 0.0 && y != 0.0 {
                // Both operands scaled up by 2^600 (neither is large when the product is
                // this small): the product's error is then exact.
                sign_of((x * UP).mul_add(y * UP, -(s * UP * UP)))
            } else {
                sign_of(x.mul_add(y, -s))
            };
            (s, e)
        }
        fop::DIV | fop::RCP => {
            let q = x / y;
            let e = if !(finite && y != 0.0 && q.is_finite()) {
                0
            } else if q.abs() < TINY && x != 0.0 {
                sign_of((-(q * UP)).mul_add(y, x * UP)) * sign_of(y)
            } else if x.abs() < TINY || y.abs() < TINY {
                // Operands near the bottom of the range with a quotient that is not:
                // both scaled alike, the remainder then exact.
                sign_of((-q).mul_add(y * UP, x * UP)) * sign_of(y)
            } else {
                sign_of((-q).mul_add(y, x)) * sign_of(y)
            };
            (q, e)
        }
        fop::SQRT => {
            let r = x.sqrt();
            (
                r,
                if r.is_finite() && r != 0.0 {
                    -sign_of(r.mul_add(r, -x))
                } else {
                    0
                },
            )
        }
        _ => {
            let s = x.mul_add(y, z);
            let p = x * y;
            let e = if !s.is_finite() || !finite {
                0
            } else if (p.abs() < TINY || s.abs() < TINY) && x != 0.0 && y != 0.0 {
                if z.abs() > TINY * UP {
                    // The product is far below z's last place: only its sign counts.
                    if s == z {
                        sign_of(x) * sign_of(y)
                    } else {
                        fma_residual(x, y, z, s)
                    }
                } else {
                    // Product and sum scaled by 2^1200: nothing underflows.
                    fma_residual(x * UP, y * UP, z * UP * UP, s * UP * UP)
                }
            } else {
                fma_residual(x, y, z, s)
            };
            (s, e)
        }
    };
    if finite && r.is_infinite() && !(matches!(op, fop::DIV | fop::RCP) && y == 0.0) {
        return (r, -sign_of(r));
    }
    (r, e)
}

/// The sign of `x*y + z - s` for `s` the rounded fma (error-free transformations).
fn fma_residual(x: f64, y: f64, z: f64, s: f64) -> i8 {
    let p = x * y;
    let pe = x.mul_add(y, -p);
    let u = p + z;
    let ue = {
        let bb = u - p;
        (p - (u - bb)) + (z - bb)
    };
    sign_of((u - s) + (ue + pe))
}

/// `(r, e)` for f32 operands: computed in f64 (exact products; sums, quotients and roots
/// correctly rounded there with their error sign), then rounded to nearest f32, a
/// midpoint reached by the first rounding moved toward the exact value.
fn f32_rn_err(op: u8, x: f32, y: f32, z: f32) -> (f32, i8) {
    let (q, e53) = if op == fop::FMA {
        let p = x as f64 * y as f64;
        let s = p + z as f64;
        (s, two_sum_err(p, z as f64, s))
    } else {
        f64_rn_err(op, x as f64, y as f64, z as f64)
    };
    let mut r = q as f32;
    if r.is_finite() && e53 != 0 && (r as f64) != q {
        // Is q an f32 midpoint? Then the exact value decides.
        let other = if (r as f64) < q {
            r.next_up()
        } else {
            r.next_down()
        };
        if ((r as f64) - q).abs() == ((other as f64) - q).abs() {
            let up = e53 > 0;
            r = if up == (r as f64 > q) { r } else { other };
        }
    }
    let d = r as f64 - q;
    let e = if d != 0.0 { -sign_of(d) } else { e53 };
    let finite = x.is_finite() && y.is_finite() && z.is_finite();
    if finite && r.is_infinite() && q.is_finite() {
        return (r, -sign_of(q));
    }
    (r, e)
}

/// One float operation with rounding mode `m`, `.ftz` and `.sat` as PTX defines them:
/// subnormal operands and results flushed to sign-preserving zero (`ftz`), the result
/// clamped to [+0, 1] with NaN giving +0 (`sat`); an exact zero sum is -0 when rounding
/// down (IEEE 754).
#[inline(never)]
pub(crate) fn falu<F: Flt>(op: u8, m: Rnd, ftz: bool, sat: bool, x: F, y: F, z: F) -> u64 {
    let fl = |v: F| if ftz { v.ftz() } else { v };
    let (x, y, z) = (fl(x), fl(y), fl(z));
    let ops: &[F] = match op {
        fop::FMA => &[y, x, z],
        fop::SQRT | fop::RCP => &[x],
        // Division is a software sequence on the GPU: its NaN priority is a, then b.
        fop::DIV => &[x, y],
        _ => &[y, x],
    };
    let mut bits = if ops.iter().any(|v| v.is_nan()) {
        F::nan_of(ops)
    } else {
        let (r, e) = if F::BITS == 32 {
            let f = |v: F| v.to_f64() as f32;
            let (r, e) = f32_rn_err(op, f(x), f(y), f(z));
            (F::from_u64(r.to_bits() as u64), e)
        } else {
            let (r, e) = f64_rn_err(op, x.to_f64(), y.to_f64(), z.to_f64());
            (F::from_u64(r.to_bits()), e)
        };
        let mut r = directed(r, e, m);
        let zero = F::zero();
        if r == zero && e == 0 && m == Rnd::M && matches!(op, fop::ADD | fop::SUB | fop::FMA) {
            // An exact zero sum rounding down is -0 unless both addends are +0.
            let (p, q) = match op {
                fop::ADD => (x, y),
                fop::SUB => (x, -y),
                _ => (x * y, z),
            };
            let both_plus_zero =
                p == zero && q == zero && !p.is_sign_negative() && !q.is_sign_negative();
            if !both_plus_zero {
                r = -zero;
            }
        }
        r.result(ops)
    };
    if ftz {
        bits = fl(F::from_u64(bits)).bits();
    }
    if sat {
        let v = F::from_u64(bits);
        let one = F::from_u64(if F::BITS == 32 {
            0x3f80_0000
        } else {
            0x3ff0_0000_0000_0000
        });
        bits = if v.is_nan() || v <= F::zero() {
            0
        } else if v > one {
            one.bits()
        } else {
            bits
        };
    }
    bits
}

/// `FLAGS` of [`falu2`]/[`falu3`]/[`falu1`]: bit 0 `.ftz`, bit 1 `.sat`; `M` the rounding
/// mode (0 rn, 1 rz, 2 rm, 3 rp).
const fn rnd_of_m(m: u8) -> Rnd {
    match m {
        0 => Rnd::N,
        1 => Rnd::Z,
        2 => Rnd::M,
        _ => Rnd::P,
    }
}
/// [`falu`] over a warp, two operands.
pub(crate) fn falu2<F: Flt, const OP: u8, const M: u8, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        let (x, y) = (F::from_u64(x), F::from_u64(y));
        falu(
            OP,
            rnd_of_m(M),
            FLAGS & 1 != 0,
            FLAGS & 2 != 0,
            x,
            y,
            F::zero(),
        )
    })
}
/// [`falu`] over a warp, fma.
pub(crate) fn falu3<F: Flt, const M: u8, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let (x, y, z) = (F::from_u64(x), F::from_u64(y), F::from_u64(z));
        falu(
            fop::FMA,
            rnd_of_m(M),
            FLAGS & 1 != 0,
            FLAGS & 2 != 0,
            x,
            y,
            z,
        )
    })
}
/// [`falu`] over a warp, one operand (sqrt, rcp).
pub(crate) fn falu1<F: Flt, const OP: u8, const M: u8, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    mk: u32,
) {
    map1(o, d, a, mk, |x| {
        let x = F::from_u64(x);
        falu(
            OP,
            rnd_of_m(M),
            FLAGS & 1 != 0,
            FLAGS & 2 != 0,
            x,
            F::zero(),
            F::zero(),
        )
    })
}

/// `div.approx.f32`: the quotient (within the ISA's 2 ulp), zero for divisors above
/// 2^126 in magnitude, as on the GPU.
pub(crate) fn fdiv_approx<const FTZ: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (mut x, mut y) = (f32::from_bits(x as u32), f32::from_bits(y as u32));
        if FTZ {
            (x, y) = (x.ftz(), y.ftz());
        }
        // Divisors above 2^126 give zero (times a: NaN for an infinite a).
        let q = if y.is_finite() && y.abs() > f32::from_bits(0x7e80_0000) {
            x * 0.0 * y.signum()
        } else {
            x / y
        };
        (if FTZ { q.ftz() } else { q }).canon()
    })
}

pub(crate) fn cmp_flt<F: Flt, const OP: u8>(r: &[u64], a: usize, b: usize) -> u32 {
    cmp_flt_with::<F, OP>(r, a, b, false)
}
/// `setp.<cmp>.ftz.f32`: subnormal operands compare as zeros.
pub(crate) fn cmp_flt_ftz<F: Flt, const OP: u8>(r: &[u64], a: usize, b: usize) -> u32 {
    cmp_flt_with::<F, OP>(r, a, b, true)
}
#[inline(always)]
fn cmp_flt_with<F: Flt, const OP: u8>(r: &[u64], a: usize, b: usize, ftz: bool) -> u32 {
    let (a, b) = (row(r, a), row(r, b));
    let mut m = 0u32;
    for l in 0..32 {
        let (mut x, mut y) = (F::from_u64(a[l]), F::from_u64(b[l]));
        if ftz {
            (x, y) = (x.ftz(), y.ftz());
        }
        let unord = x.is_nan() || y.is_nan();
        let r = match OP {
            0 => x == y,
            1 => x != y && !unord,
            2 => x < y,
            3 => x <= y,
            4 => x > y,
            5 => x >= y,
            // unordered variants: equ neu ltu leu gtu geu
            6 => unord || x == y,
            7 => unord || x != y,
            8 => unord || x < y,
            9 => unord || x <= y,
            10 => unord || x > y,
            11 => unord || x >= y,
            12 => !unord, // num
            _ => unord,   // nan
        };
        m |= (r as u32) << l;
    }
    m
}

// ---- conversions ------------------------------------------------------------------------

/// f16 bits to f32 (exact).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let s = ((h >> 15) as u32) << 31;
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as u32;
    let bits = if e == 0 {
        if m == 0 {
            s
        } else {
            // subnormal: m * 2^-24
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if s != 0 { -v } else { v };
        }
    } else if e == 31 {
        s | 0x7f80_0000 | (m << 13)
    } else {
        s | (((e - 15 + 127) as u32) << 23) | (m << 13)
    };
    f32::from_bits(bits)
}

/// f64 to f16 bits with rounding mode `m`.
pub(crate) fn f64_to_f16(x: f64, m: Rnd) -> u16 {
    if x.is_nan() {
        return 0x7fff;
    }
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    let overflow = |sign: u16| {
        let to_inf = match m {
            Rnd::N => true,
            Rnd::Z => false,
            Rnd::M => sign != 0,
            Rnd::P => sign == 0,
        };
        sign | if to_inf { 0x7c00 } else { 0x7bff }
    };
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a >= 65536.0 {
        return overflow(sign);
    }
    // Scale so that the f16 value grid is integers: ulp is 2^(e-10) for normals, 2^-24 below.
    let e = if a == 0.0 {
        -15
    } else {
        a.log2().floor() as i32
    };
    let e = e.max(-14);
    let ulp = (2.0f64).powi(e - 10);
    let q = a / ulp; // exact (power-of-two scaling)
    let fl = q.floor();
    let rem = q - fl;
    let up = match m {
        Rnd::N => rem > 0.5 || (rem == 0.5 && (fl as u64) % 2 == 1),
        Rnd::Z => false,
        Rnd::M => sign != 0 && rem > 0.0,
        Rnd::P => sign == 0 && rem > 0.0,
    };
    let v = (fl + if up { 1.0 } else { 0.0 }) * ulp;
    if v > 65504.0 {
        return overflow(sign);
    }
    // v is exactly representable in f16 now; encode.
    if v == 0.0 {
        return sign;
    }
    let ve = v.log2().floor() as i32;
    if ve < -14 {
        let mant = (v / (2.0f64).powi(-24)) as u16;
        return sign | mant;
    }
    let mant = ((v / (2.0f64).powi(ve) - 1.0) * 1024.0) as u16;
    sign | (((ve + 15) as u16) << 10) | mant
}

/// f64 to bf16 bits with rounding mode `m`: through f32 rounded to odd (exact for the
/// second rounding, f32 having 16 more bits), then to bf16.
pub(crate) fn f64_to_bf16(v: f64, m: Rnd) -> u16 {
    if v.is_nan() {
        return 0x7fff;
    }
    let z = f64_to_f32(v, Rnd::Z);
    let mut bits = z.to_bits();
    if (z as f64) != v && z.is_finite() {
        bits |= 1; // round to odd: remember the discarded part
    }
    let neg = bits >> 31 == 1;
    let low = bits & 0xffff;
    let up = match m {
        Rnd::N => low > 0x8000 || (low == 0x8000 && (bits >> 16) & 1 == 1),
        Rnd::Z => false,
        Rnd::M => neg && low != 0,
        Rnd::P => !neg && low != 0,
    };
    let r = (bits >> 16) + up as u32;
    // Overflow past the largest finite value: RN goes to infinity, RZ stays finite
    // (handled by not rounding up), directed modes by sign.
    r as u16
}

/// Float `x` (given as f64) rounded to an integer with mode `m`.
fn round_int(x: f64, m: Rnd) -> f64 {
    match m {
        Rnd::N => x.round_ties_even(),
        Rnd::Z => x.trunc(),
        Rnd::M => x.floor(),
        Rnd::P => x.ceil(),
    }
}

/// An integer value (exact, as i128) to f32 with mode `m`.
pub(crate) fn int_to_f32(v: i128, m: Rnd) -> f32 {
    let r = v as f32;
    let rv = r as i128; // exact: |r| < 2^64 < i128 range
    let es = (v - rv).signum() as i8;
    directed(r, es, m)
}
/// An integer value (exact, as i128) to f64 with mode `m`.
pub(crate) fn int_to_f64(v: i128, m: Rnd) -> f64 {
    let r = v as f64;
    let rv = r as i128;
    let es = (v - rv).signum() as i8;
    directed(r, es, m)
}
/// f64 to f32 with mode `m`.
pub(crate) fn f64_to_f32(x: f64, m: Rnd) -> f32 {
    let r = x as f32;
    if !r.is_finite() && x.is_finite() {
        // Overflow: RZ and the opposite direction give the largest finite value.
        let big = f32::MAX;
        return match (m, x > 0.0) {
            (Rnd::Z, true) | (Rnd::M, true) => big,
            (Rnd::Z, false) | (Rnd::P, false) => -big,
            _ => r,
        };
    }
    let d = r as f64 - x;
    directed(r, -sign_of(d), m)
}

/// The value of a register of type `ty` as an exact f64 (float) or integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CvtTy {
    U(u32),
    S(u32),
    F16,
    Bf16,
    F32,
    F64,
}

/// `cvt` for one value. `irnd` true when an integer rounding (`.rni`...) was given.
pub(crate) fn cvt_one(
    x: u64,
    src: CvtTy,
    dst: CvtTy,
    m: Rnd,
    irnd: bool,
    sat: bool,
    ftz: bool,
) -> u64 {
    let mask = |bits: u32| u64::MAX >> (64 - bits);
    // Integer source.
    let int_src: Option<i128> = match src {
        CvtTy::U(b) => Some((x & mask(b)) as i128),
        CvtTy::S(b) => Some((((x & mask(b)) << (64 - b)) as i64 >> (64 - b)) as i128),
        _ => None,
    };
    let sat_int = |v: i128, dst: CvtTy| -> u64 {
        let (lo, hi, b) = match dst {
            CvtTy::U(b) => (0i128, (mask(b) as i128), b),
            CvtTy::S(b) => (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1, b),
            _ => unreachable!(),
        };
        (v.clamp(lo, hi) as u64) & mask(b)
    };
    if let Some(v) = int_src {
        return match dst {
            CvtTy::U(b) | CvtTy::S(b) => {
                if sat {
                    sat_int(v, dst)
                } else {
                    (v as u64) & mask(b)
                }
            }
            CvtTy::F32 => int_to_f32(v, m).to_bits() as u64,
            CvtTy::F64 => int_to_f64(v, m).to_bits(),
            CvtTy::F16 => f64_to_f16(int_to_f64(v, Rnd::Z), m) as u64,
            CvtTy::Bf16 => f64_to_bf16(v as f64, m) as u64,
        };
    }
    // Float source, as f64 (exact for f16/f32).
    let mut f = match src {
        CvtTy::F16 => f16_to_f32(x as u16) as f64,
        CvtTy::Bf16 => f32::from_bits((x as u32 & 0xffff) << 16) as f64,
        CvtTy::F32 => {
            let v = f32::from_bits(x as u32);
            (if ftz { v.ftz() } else { v }) as f64
        }
        _ => f64::from_bits(x),
    };
    if f.is_nan() && !sat && !(irnd && src == dst && src != CvtTy::F64) {
        // `.ftz` sends an f32 through the f32 unit first, which makes its NaN canonical.
        let x = if ftz && src == CvtTy::F32 {
            0x7fff_ffff
        } else {
            x
        };
        return nan_convert(x, src, dst);
    }
    match dst {
        CvtTy::U(_) | CvtTy::S(_) => {
            let r = round_int(f, m);
            let v = if r >= 1.7e38 {
                i128::MAX
            } else if r <= -1.7e38 {
                i128::MIN
            } else {
                r as i128
            };
            sat_int(v, dst)
        }
        _ => {
            if irnd {
                f = round_int(f, m);
            }
            let sat1 = |v: f64| {
                if v.is_nan() || v <= 0.0 {
                    0.0
                } else {
                    v.min(1.0)
                }
            };
            match dst {
                CvtTy::F32 => {
                    let mut r = if src == CvtTy::F64 && !irnd {
                        f64_to_f32(f, m)
                    } else {
                        f as f32
                    };
                    if sat {
                        r = sat1(r as f64) as f32;
                    }
                    if ftz {
                        r = r.ftz();
                    }
                    r.canon()
                }
                CvtTy::F64 => {
                    let r = if sat { sat1(f) } else { f };
                    r.canon()
                }
                CvtTy::Bf16 => {
                    let r = if sat { sat1(f) } else { f };
                    f64_to_bf16(r, if irnd { Rnd::N } else { m }) as u64
                }
                _ => {
                    let r = if sat { sat1(f) } else { f };
                    f64_to_f16(r, if irnd { Rnd::N } else { m }) as u64
                }
            }
        }
    }
}

/// The low 32 bits: a 64-bit integer truncated to 32 bits, or a u32 zero-extended.
pub(crate) fn cvt_low32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| x & 0xffff_ffff)
}
pub(crate) fn cvt_sext32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| x as u32 as i32 as i64 as u64)
}

// ---- 24-bit multiply, sad, funnel shift, f16 arithmetic -----------------------------------

/// `mul24.lo`/`mul24.hi` (`HI`): the 48-bit product of the low 24 bits (sign-extended for
/// `S`), its bits 0..31 or 16..47.
pub(crate) fn mul24<const S: bool, const HI: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        let ext = |v: u64| -> i64 {
            if S {
                ((v << 40) as i64) >> 40
            } else {
                (v & 0xff_ffff) as i64
            }
        };
        let p = ext(x) * ext(y);
        (if HI { (p >> 16) as u64 } else { p as u64 }) & 0xffff_ffff
    })
}

/// `mad24.lo`/`mad24.hi` (`HI`) on `.s32`/`.u32` (`S`), `.sat` (`SAT`, `.hi.s32` only):
/// the 48-bit product of the operands' low 24 bits (bits 0..32 or 16..48) plus `c`.
pub(crate) fn mad24<const S: bool, const HI: bool, const SAT: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let ext = |v: u64| -> i64 {
            if S {
                ((v << 40) as i64) >> 40
            } else {
                (v & 0xff_ffff) as i64
            }
        };
        let p = ext(x) * ext(y);
        let part = if HI { p >> 16 } else { p };
        if SAT {
            let sum = (part as i32 as i64) + (z as i32 as i64);
            (sum.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32) as u64
        } else {
            (part as u64).wrapping_add(z) & 0xffff_ffff
        }
    })
}

/// `sad`: `|a - b| + c`.
pub(crate) fn sad<T: Int>(o: &mut [u64], d: usize, a: usize, b: usize, c: usize, mk: u32) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let (x, y) = (T::from_u64(x), T::from_u64(y));
        let d = if x > y { x.wsub(y) } else { y.wsub(x) };
        // The difference is unsigned even for signed types.
        let du = d.to_u64();
        T::from_u64(du.wrapping_add(z)).to_u64()
    })
}

/// `shf.l`/`shf.r` (`R`) `.wrap`/`.clamp` (`CLAMP`) on 32 bits: funnel shift of b:a.
pub(crate) fn shf<const R: bool, const CLAMP: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let n = if CLAMP {
            (z as u32).min(32)
        } else {
            z as u32 & 31
        };
        let v = ((y & 0xffff_ffff) << 32) | (x & 0xffff_ffff);
        if R {
            (v >> n) & 0xffff_ffff
        } else {
            ((v << n) >> 32) & 0xffff_ffff
        }
    })
}

/// The 16-bit float formats: `BF16` false is IEEE half (f16), true bfloat16.
#[inline(always)]
fn half_to_f64<const BF16: bool>(h: u64) -> f64 {
    if BF16 {
        f32::from_bits(((h & 0xffff) as u32) << 16) as f64
    } else {
        f16_to_f32(h as u16) as f64
    }
}
#[inline(always)]
fn half_of_f64<const BF16: bool>(v: f64) -> u64 {
    if BF16 {
        f64_to_bf16(v, Rnd::N) as u64
    } else {
        f64_to_f16(v, Rnd::N) as u64
    }
}
/// A subnormal half flushed to sign-preserving zero.
#[inline(always)]
fn half_ftz<const BF16: bool>(h: u64) -> u64 {
    let exp = if BF16 { 0x7f80 } else { 0x7c00 };
    if h & exp == 0 {
        h & 0x8000
    } else {
        h
    }
}
/// Half `h` as an operation with `FLAGS` takes or gives it: flushed with `.ftz`.
#[inline(always)]
fn half_flushed<const BF16: bool, const FLAGS: u8>(h: u64) -> u64 {
    if FLAGS & HALF_FTZ != 0 {
        half_ftz::<BF16>(h)
    } else {
        h
    }
}
/// The value of operand `h` of an operation with `FLAGS`.
#[inline(always)]
fn half_operand<const BF16: bool, const FLAGS: u8>(h: u64) -> f64 {
    half_to_f64::<BF16>(half_flushed::<BF16, FLAGS>(h))
}
/// `FLAGS` of the half operations: bit 0 `.ftz`, bit 1 `.sat`, bit 2 `.NaN` (min/max),
/// bit 3 packed (`.f16x2`/`.bf16x2`: both halves of a 32-bit register).
const HALF_FTZ: u8 = 1;
const HALF_SAT: u8 = 2;
const HALF_NAN: u8 = 4;
const HALF_X2: u8 = 8;

/// Applies `f` to one half, or to both halves of a packed register.
#[inline(always)]
fn halves<const FLAGS: u8>(a: u64, b: u64, c: u64, f: impl Fn(u64, u64, u64) -> u64) -> u64 {
    if FLAGS & HALF_X2 != 0 {
        let lo = f(a & 0xffff, b & 0xffff, c & 0xffff);
        let hi = f((a >> 16) & 0xffff, (b >> 16) & 0xffff, (c >> 16) & 0xffff);
        (hi << 16) | lo
    } else {
        f(a & 0xffff, b & 0xffff, c & 0xffff)
    }
}

/// One half-precision arithmetic result `v` (exact or once-rounded in f64) with the
/// modifiers: NaN gives the canonical 0x7fff, `.sat` clamps to [+0, 1], `.ftz` flushes
/// subnormal results.
#[inline(always)]
fn half_result<const BF16: bool, const FLAGS: u8>(v: f64) -> u64 {
    if v.is_nan() {
        return if FLAGS & HALF_SAT != 0 { 0 } else { 0x7fff };
    }
    let mut h = half_flushed::<BF16, FLAGS>(half_of_f64::<BF16>(v));
    if FLAGS & HALF_SAT != 0 {
        let r = half_to_f64::<BF16>(h);
        h = if r <= 0.0 {
            0
        } else if r > 1.0 {
            half_of_f64::<BF16>(1.0)
        } else {
            h
        };
    }
    h
}

/// f16/bf16 add/sub/mul (`OP` 0/1/2), scalar or packed, computed in f64 (exact for
/// products; sums of two halves are exact unless far apart, where the one f64 rounding
/// cannot reach a half's midpoint) and rounded once.
pub(crate) fn half_arith<const BF16: bool, const OP: u8, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        halves::<FLAGS>(x, y, 0, |x, y, _| {
            let f = half_operand::<BF16, FLAGS>;
            let (p, q) = (f(x), f(y));
            half_result::<BF16, FLAGS>(match OP {
                0 => p + q,
                1 => p - q,
                _ => p * q,
            })
        })
    })
}

/// f16/bf16 fma, scalar or packed: the product is exact in f64; the sum is rounded to
/// odd in f64 (its exact error by TwoSum) so that rounding to a half afterwards is
/// correct.
pub(crate) fn half_fma<const BF16: bool, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        halves::<FLAGS>(x, y, z, |x, y, z| {
            let f = half_operand::<BF16, FLAGS>;
            let (p, q) = (f(x) * f(y), f(z));
            let s = p + q;
            let e = two_sum_err(p, q, s);
            let odd = if e != 0 && s.to_bits() & 1 == 0 {
                if (e > 0) == (s > 0.0) {
                    f64::from_bits(s.to_bits() + 1)
                } else {
                    f64::from_bits(s.to_bits() - 1)
                }
            } else {
                s
            };
            half_result::<BF16, FLAGS>(odd)
        })
    })
}

/// f16/bf16 min/max (`MAX`), scalar or packed: -0 < +0, a NaN operand loses (with
/// `.NaN`: wins, canonical), two NaNs give the canonical NaN.
pub(crate) fn half_minmax<const BF16: bool, const MAX: bool, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        halves::<FLAGS>(x, y, 0, |x, y, _| {
            let (x, y) = (
                half_flushed::<BF16, FLAGS>(x),
                half_flushed::<BF16, FLAGS>(y),
            );
            let (p, q) = (half_to_f64::<BF16>(x), half_to_f64::<BF16>(y));
            if p.is_nan() || q.is_nan() {
                return if FLAGS & HALF_NAN != 0 || (p.is_nan() && q.is_nan()) {
                    0x7fff
                } else if p.is_nan() {
                    y
                } else {
                    x
                };
            }
            let x_first = if p == q {
                // -0 < +0
                MAX != (x & 0x8000 != 0)
            } else {
                (p < q) != MAX
            };
            if x_first {
                x
            } else {
                y
            }
        })
    })
}

/// `neg`/`abs` (`ABS`) on f16/bf16, scalar or packed: the sign bit; a NaN gives the
/// canonical NaN.
pub(crate) fn half_sign<const BF16: bool, const ABS: bool, const FLAGS: u8>(
    o: &mut [u64],
    d: usize,
    a: usize,
    mk: u32,
) {
    map1(o, d, a, mk, |x| {
        halves::<FLAGS>(x, 0, 0, |x, _, _| {
            let x = half_flushed::<BF16, FLAGS>(x);
            if half_to_f64::<BF16>(x).is_nan() {
                0x7fff
            } else if ABS {
                x & 0x7fff
            } else {
                x ^ 0x8000
            }
        })
    })
}

/// `cvt.rn{.relu}.{f16x2,bf16x2}.f32 d, a, b`: `a` to the high half, `b` to the low.
pub(crate) fn cvt_pack_half<const BF16: bool, const RELU: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    mk: u32,
) {
    map2(o, d, a, b, mk, |x, y| {
        let one = |v: u64| {
            let f = f32::from_bits(v as u32);
            if f.is_nan() {
                0x7fff
            } else if RELU && f <= 0.0 {
                0
            } else {
                half_of_f64::<BF16>(f as f64)
            }
        };
        (one(x) << 16) | one(y)
    })
}

/// `lop3.b32 d, a, b, c, immLut`: the lookup table applied bitwise.
pub(crate) fn lop3(a: u64, b: u64, c: u64, lut: u8) -> u64 {
    let (a, b, c) = (a as u32, b as u32, c as u32);
    let mut d = 0u32;
    for i in 0..8u8 {
        if lut >> i & 1 == 1 {
            let ma = if i & 4 != 0 { a } else { !a };
            let mb = if i & 2 != 0 { b } else { !b };
            let mc = if i & 1 != 0 { c } else { !c };
            d |= ma & mb & mc;
        }
    }
    d as u64
}

/// `copysign.f32/.f64 d, a, b`: b with the sign of a.
pub(crate) fn copysign<F: Flt>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    let s = 1u64 << (F::BITS - 1);
    map2(o, d, a, b, mk, |x, y| (y & !s) | (x & s))
}

/// `cvt.rn.f32.s32` and friends: fast paths for the common conversions (Rust's `as`
/// rounds to nearest even and saturates float-to-int with NaN to 0, as PTX does).
pub(crate) fn cvt_f32_s32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| (x as u32 as i32 as f32).to_bits() as u64)
}
pub(crate) fn cvt_f32_u32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| (x as u32 as f32).to_bits() as u64)
}
pub(crate) fn cvt_f64_s32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| (x as u32 as i32 as f64).to_bits())
}
pub(crate) fn cvt_f64_u32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| (x as u32 as f64).to_bits())
}
pub(crate) fn cvt_f64_f32(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let v = f32::from_bits(x as u32);
        if v.is_nan() {
            nan_convert(x, CvtTy::F32, CvtTy::F64)
        } else {
            (v as f64).to_bits()
        }
    })
}
pub(crate) fn cvt_f32_f64(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let v = f64::from_bits(x);
        if v.is_nan() {
            nan_convert(x, CvtTy::F64, CvtTy::F32)
        } else {
            (v as f32).to_bits() as u64
        }
    })
}

/// `(sign bit, exponent bits, mantissa bits)` of a float register type.
fn float_layout(t: CvtTy) -> (u32, u32, u32) {
    match t {
        CvtTy::F16 => (15, 5, 10),
        CvtTy::Bf16 => (15, 8, 7),
        CvtTy::F32 => (31, 8, 23),
        _ => (63, 11, 52),
    }
}

/// What `cvt` makes of a NaN, as measured on an H200 (fixtures/isa-goldens): a
/// conversion to or from f64 keeps the sign and the payload's top bits and sets the quiet
/// bit (the f64 unit's conversions); any other float conversion gives the canonical NaN
/// (0x7fff_ffff, 0x7fff); bf16 to f32 is a shift, NaN bits included. Converting to an
/// integer gives 0, except from f64 or to a 64-bit integer, which give the most
/// negative value's bits.
pub(crate) fn nan_convert(x: u64, src: CvtTy, dst: CvtTy) -> u64 {
    match dst {
        CvtTy::U(b) | CvtTy::S(b) => {
            if src == CvtTy::F64 || b == 64 {
                1u64 << (b - 1)
            } else {
                0
            }
        }
        _ if src == CvtTy::Bf16 && dst == CvtTy::F32 => (x & 0xffff) << 16,
        _ if src == CvtTy::F64 || dst == CvtTy::F64 => {
            let (ss, _, sm) = float_layout(src);
            let (ds, de, dm) = float_layout(dst);
            let sign = (x >> ss) & 1;
            let mant = x & ((1u64 << sm) - 1);
            let mant = if dm >= sm {
                mant << (dm - sm)
            } else {
                mant >> (sm - dm)
            };
            (sign << ds) | (((1u64 << de) - 1) << dm) | (1u64 << (dm - 1)) | mant
        }
        CvtTy::F32 => 0x7fff_ffff,
        _ => 0x7fff,
    }
}

/// `cvt.rn.relu.{f16,bf16}.f32` (`BF16`): negatives (and -0) give +0, a NaN the canonical
/// NaN.
pub(crate) fn cvt_half_relu<const BF16: bool>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let v = f32::from_bits(x as u32);
        if v.is_nan() {
            0x7fff
        } else if v <= 0.0 {
            0
        } else if BF16 {
            f64_to_bf16(v as f64, Rnd::N) as u64
        } else {
            f64_to_f16(v as f64, Rnd::N) as u64
        }
    })
}
/// f32 to s32 (`U` false) or u32 with an integer rounding `M` (0 rni, 1 rzi, 2 rmi, 3 rpi).
pub(crate) fn cvt_i32_f32<const U: bool, const M: u8>(o: &mut [u64], d: usize, a: usize, mk: u32) {
    map1(o, d, a, mk, |x| {
        let f = f32::from_bits(x as u32);
        // Without SSE4.1 the float rounding functions are library calls: round through
        // integers instead (values of magnitude 2^23 or more are integers already).
        let r = if f.abs() < 8_388_608.0 {
            let t = f as i32 as f32; // toward zero
            match M {
                0 => {
                    let big = 8_388_608.0f32.copysign(f);
                    (f + big) - big
                }
                1 => t,
                2 => t - (t > f) as i32 as f32,
                _ => t + (t < f) as i32 as f32,
            }
        } else {
            f
        };
        if U {
            r as u32 as u64
        } else {
            r as i32 as u32 as u64
        }
    })
}

/// f16 comparisons: both operands widened to f32 (exact), then compared.
pub(crate) fn cmp_f16<const OP: u8>(r: &[u64], a: usize, b: usize) -> u32 {
    let (ra, rb) = (row(r, a), row(r, b));
    let mut buf = [0u64; 64];
    for l in 0..32 {
        buf[l] = f16_to_f32(ra[l] as u16).to_bits() as u64;
        buf[32 + l] = f16_to_f32(rb[l] as u16).to_bits() as u64;
    }
    cmp_flt::<f32, OP>(&buf, 0, 1)
}

/// `bmsk.clamp.b32` / `bmsk.wrap.b32 d, a, b`: `b` bits set from bit `a` (each clamped
/// to 32, or taken modulo 32), the bits past 31 dropped.
pub(crate) fn bmsk<const WRAP: bool>(o: &mut [u64], d: usize, a: usize, b: usize, mk: u32) {
    map2(o, d, a, b, mk, |x, y| {
        let (p, w) = if WRAP {
            (x as u32 & 31, y as u32 & 31)
        } else {
            ((x as u32).min(32), (y as u32).min(32))
        };
        (((1u64 << w) - 1) << p) as u32 as u64
    })
}

/// `vabsdiff4.dtype.atype.btype.add d, a, b, c`: c plus the sum of the absolute
/// differences of the four bytes of a and b (signed or not).
pub(crate) fn vabsdiff4_add<const SIGNED: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        bytes4(x, y, z, SIGNED, SIGNED, |p, q| (p - q).abs())
    })
}

/// `z` plus `f` of each of the four byte pairs of `x` and `y` (signed or not as `sx`
/// and `sy` say), as 32 bits: dp4a's and vabsdiff4.add's shape.
fn bytes4(x: u64, y: u64, z: u64, sx: bool, sy: bool, f: impl Fn(i64, i64) -> i64) -> u64 {
    let byte = |v: u64, i: u32, s: bool| -> i64 {
        let b = (v >> (8 * i)) as u8;
        if s {
            b as i8 as i64
        } else {
            b as i64
        }
    };
    let mut acc = z as u32 as i64;
    for i in 0..4 {
        acc += f(byte(x, i, sx), byte(y, i, sy));
    }
    acc as u32 as u64
}

/// `dp4a.atype.btype d, a, b, c`: c plus the dot product of the four bytes of a and b.
pub(crate) fn dp4a<const SA: bool, const SB: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        bytes4(x, y, z, SA, SB, |p, q| p * q)
    })
}

/// `dp2a.lo/.hi`: c plus the dot product of the two 16-bit halves of a with two bytes
/// of b (low or high half of b).
pub(crate) fn dp2a<const SA: bool, const SB: bool, const HI: bool>(
    o: &mut [u64],
    d: usize,
    a: usize,
    b: usize,
    c: usize,
    mk: u32,
) {
    map3(o, d, a, b, c, mk, |x, y, z| {
        let half = |i: u32| -> i64 {
            let h = (x >> (16 * i)) as u16;
            if SA {
                h as i16 as i64
            } else {
                h as i64
            }
        };
        let byte = |i: u32| -> i64 {
            let b = (y >> (8 * (i + if HI { 2 } else { 0 }))) as u8;
            if SB {
                b as i8 as i64
            } else {
                b as i64
            }
        };
        let acc = z as u32 as i64 + half(0) * byte(0) + half(1) * byte(1);
        acc as u32 as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn warp_fma_paths_agree() {
        // The CPU's fma (where it has one) and the f64 path, lane for lane, with and
        // without FTZ, on arbitrary patterns, subnormals, near-ties, infinities, NaNs.
        let mut x = 0x0dd5_eed5_1234_5678u64;
        let specials = [
            0u32,
            0x8000_0000,
            1,
            0x8000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0x7f80_0001,
            0x3f80_0000,
            0x7f7f_ffff,
        ];
        for round in 0..20_000 {
            let mut regs = vec![0u64; 4 * 32];
            for (i, v) in regs.iter_mut().enumerate().skip(32) {
                let r = xorshift(&mut x);
                *v = match (round + i) % 4 {
                    0 => specials[(r % specials.len() as u64) as usize] as u64,
                    1 => (0x3f80_0000 | (r as u32 & 0x7f_ffff)) as u64,
                    2 => (r as u32 & 0x80ff_ffff) as u64,
                    _ => r as u32 as u64,
                };
            }
            let mk = if round % 3 == 0 {
                u32::MAX
            } else {
                xorshift(&mut x) as u32
            };
            let mut soft = regs.clone();
            let mut any = regs.clone();
            ffma32_soft::<false>(&mut soft, 0, 1, 2, 3, mk);
            ffma32::<false>(&mut any, 0, 1, 2, 3, mk);
            assert_eq!(soft, any);
            let mut soft = regs.clone();
            let mut any = regs.clone();
            ffma32_soft::<true>(&mut soft, 0, 1, 2, 3, mk);
            ffma32::<true>(&mut any, 0, 1, 2, 3, mk);
            assert_eq!(soft, any);
        }
    }

    #[test]
    fn fma_f32_is_correctly_rounded() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut checked = 0;
        for i in 0..2_000_000u32 {
            let r = xorshift(&mut x);
            let (a, b, c) = if i % 2 == 0 {
                // Arbitrary bit patterns.
                (
                    f32::from_bits(r as u32),
                    f32::from_bits((r >> 32) as u32),
                    f32::from_bits(xorshift(&mut x) as u32),
                )
            } else {
                // Near-cancelling and near-tie cases: c close to -a*b, small integers.
                let a = f32::from_bits(0x3f80_0000 | (r as u32 & 0x7f_ffff));
                let b = f32::from_bits(0x3f80_0000 | ((r >> 23) as u32 & 0x7f_ffff));
                let c = -(a * b)
                    + f32::from_bits(((r >> 46) as u32 & 0xff) << 15)
                        * if r >> 63 == 1 { -1.0 } else { 1.0 };
                (a, b, c)
            };
            let want = a.mul_add(b, c);
            let got = fma_f32(a, b, c);
            if want.is_nan() {
                assert!(got.is_nan());
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "fma({a:e}, {b:e}, {c:e})");
            }
            checked += 1;
        }
        // The double-rounding trap itself: a*b + c exactly 1 + 2^-24 + 2^-60.
        let (a, b) = (1.0f32 + f32::EPSILON, 1.0f32 - f32::EPSILON / 2.0);
        for c in [2.0f32.powi(-24), -1.0, 1.0, 3.0e-8] {
            assert_eq!(fma_f32(a, b, c).to_bits(), a.mul_add(b, c).to_bits());
        }
        assert_eq!(checked, 2_000_000);
    }

    #[test]
    fn f16_round_trip_and_overflow() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f64_to_f16(f as f64, Rnd::N), h, "{h:#06x}");
        }
        assert_eq!(f64_to_f16(65520.0, Rnd::N), 0x7c00);
        assert_eq!(f64_to_f16(65519.0, Rnd::N), 0x7bff);
        assert_eq!(f64_to_f16(1e9, Rnd::Z), 0x7bff);
        assert_eq!(f64_to_f16(-1e9, Rnd::P), 0xfbff);
        assert_eq!(f64_to_f16(f64::INFINITY, Rnd::Z), 0x7c00);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even wins.
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11), Rnd::N), 0x3c00);
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11), Rnd::P), 0x3c01);
        assert_eq!(f64_to_f16(2f64.powi(-25), Rnd::N), 0); // tie with 0: even
        assert_eq!(f64_to_f16(2f64.powi(-25) * 1.5, Rnd::N), 1);
    }
}
