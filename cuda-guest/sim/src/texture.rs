//! Texture sampling and surface addressing: what a `tex` instruction returns for a
//! texture object's [`Descriptor`] and coordinates, and where a `suld`/`sust` reads or
//! writes. The texels come through a `fetch` function of the caller (the executor's
//! checked global reads), so a texture over freed or foreign memory faults as a load
//! would.
//!
//! Semantics follow CUDA's texture unit: normalized or texel coordinates; point
//! sampling takes the texel whose cell holds the coordinate, linear filtering blends
//! the 2, 4 or 8 nearest texel centres with weights in 1/256 steps (the hardware's
//! 8-bit fraction); wrap and mirror apply to normalized coordinates only (otherwise
//! clamp); a border texel is the border color; 8- and 16-bit integers read as
//! normalized floats when the object says so; channels a format lacks read 0 (the
//! fourth 1).

use vmgpu_cuda_api::texture::{AddressMode, Descriptor, Format};

/// A texture coordinate vector: texel indices (`.s32` coordinates) or floats.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Coords {
    /// Integer texel coordinates (x, y, z).
    Int([i32; 3]),
    /// Float coordinates (x, y, z).
    Float([f32; 3]),
}

/// What a sample is returned as: the `tex` instruction's destination type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Result4 {
    /// `.f32`: four floats.
    F32,
    /// `.s32`: four signed integers.
    S32,
    /// `.u32`: four unsigned integers.
    U32,
}

/// One texel's channels: floats (float formats and normalized reads) or integers.
#[derive(Debug, Clone, Copy)]
enum Texel {
    F([f32; 4]),
    I([i64; 4]),
}

/// An index along one dimension of `n` texels after `mode`, or None for a border
/// texel. Wrap and mirror need normalized coordinates (else they clamp).
fn address(i: i64, n: u64, mode: AddressMode, normalized: bool) -> Option<u64> {
    let n = n.max(1) as i64;
    let mode = match mode {
        AddressMode::Wrap | AddressMode::Mirror if !normalized => AddressMode::Clamp,
        m => m,
    };
    Some(match mode {
        AddressMode::Clamp => i.clamp(0, n - 1) as u64,
        AddressMode::Border => {
            if (0..n).contains(&i) {
                i as u64
            } else {
                return None;
            }
        }
        AddressMode::Wrap => i.rem_euclid(n) as u64,
        AddressMode::Mirror => {
            let p = i.rem_euclid(2 * n);
            (if p < n { p } else { 2 * n - 1 - p }) as u64
        }
    })
}

/// `f16` bits as `f32`.
fn half(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f32::from(bits & 0x3ff);
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

/// Decodes one texel's bytes.
fn texel(d: &Descriptor, b: &[u8]) -> Texel {
    let n = usize::from(d.channels);
    let w = d.format.bytes() as usize;
    let raw = |c: usize| -> i64 {
        let s = &b[c * w..c * w + w];
        match d.format {
            Format::U8 => i64::from(s[0]),
            Format::S8 => i64::from(s[0] as i8),
            Format::U16 | Format::F16 => i64::from(u16::from_le_bytes([s[0], s[1]])),
            Format::S16 => i64::from(i16::from_le_bytes([s[0], s[1]])),
            Format::U32 | Format::F32 => i64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])),
            Format::S32 => i64::from(i32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        }
    };
    let float = matches!(d.format, Format::F16 | Format::F32)
        || (d.normalized_float && d.format.normalizable());
    if float {
        let mut v = [0.0, 0.0, 0.0, 1.0];
        for (c, slot) in v.iter_mut().enumerate().take(n) {
            let r = raw(c);
            *slot = match d.format {
                Format::F32 => f32::from_bits(r as u32),
                Format::F16 => half(r as u16),
                Format::U8 => r as f32 / 255.0,
                Format::U16 => r as f32 / 65535.0,
                Format::S8 => (r as f32 / 127.0).max(-1.0),
                Format::S16 => (r as f32 / 32767.0).max(-1.0),
                Format::U32 | Format::S32 => r as f32,
            };
        }
        Texel::F(v)
    } else {
        let mut v = [0, 0, 0, 1];
        for (c, slot) in v.iter_mut().enumerate().take(n) {
            *slot = raw(c);
        }
        Texel::I(v)
    }
}

/// The texel at indices `(x, y, z)` (None: a border texel), read through `fetch`.
fn read<E>(
    d: &Descriptor,
    at: [Option<u64>; 3],
    layer: u64,
    fetch: &mut dyn FnMut(u64, usize) -> Result<[u8; 16], E>,
) -> Result<Option<Texel>, E> {
    let [Some(x), Some(y), Some(z)] = at else {
        return Ok(None);
    };
    let slice = d.pitch.saturating_mul(d.height);
    let z = if d.layered { layer } else { z };
    let addr = d
        .base
        .wrapping_add(z.wrapping_mul(slice))
        .wrapping_add(y.wrapping_mul(d.pitch))
        .wrapping_add(x.wrapping_mul(d.texel_bytes()));
    let bytes = fetch(addr, d.texel_bytes() as usize)?;
    Ok(Some(texel(d, &bytes)))
}

fn border(d: &Descriptor) -> Texel {
    if matches!(d.format, Format::F16 | Format::F32) || d.normalized_float {
        Texel::F(d.border)
    } else {
        Texel::I(d.border.map(|c| c as i64))
    }
}

/// The sample of texture `d` at `coords` (layer `layer` of a layered texture), as
/// `ret` says.
pub(crate) fn sample<E>(
    d: &Descriptor,
    coords: Coords,
    layer: i32,
    ret: Result4,
    fetch: &mut dyn FnMut(u64, usize) -> Result<[u8; 16], E>,
) -> Result<[u32; 4], E> {
    if d.cubemap {
        // A direction: the face its largest component points at, and where on it.
        let [x, y, z] = match coords {
            Coords::Float(f) => f,
            Coords::Int(i) => i.map(|v| v as f32),
        };
        let (ax, ay, az) = (x.abs(), y.abs(), z.abs());
        let (face, s, t, m) = if ax >= ay && ax >= az {
            if x >= 0.0 {
                (0, -z, -y, ax)
            } else {
                (1, z, -y, ax)
            }
        } else if ay >= az {
            if y >= 0.0 {
                (2, x, z, ay)
            } else {
                (3, x, -z, ay)
            }
        } else if z >= 0.0 {
            (4, x, -y, az)
        } else {
            (5, -x, -y, az)
        };
        let m = if m > 0.0 { m } else { 1.0 };
        let face_desc = Descriptor {
            cubemap: false,
            layered: true,
            normalized_coords: true,
            address: [AddressMode::Clamp; 3],
            ..*d
        };
        let uv = [(s / m + 1.0) * 0.5, (t / m + 1.0) * 0.5, 0.0];
        return sample(&face_desc, Coords::Float(uv), face + 6 * layer, ret, fetch);
    }
    let dims = usize::from(d.dims);
    let size = [d.width, d.height, d.depth];
    let layer = if d.layered {
        (i64::from(layer)).clamp(0, d.depth.max(1) as i64 - 1) as u64
    } else {
        0
    };
    let norm = d.normalized_coords && !d.linear;
    // Linear memory and integer coordinates: the texel named, 0 outside (tex1Dfetch).
    let texel_at = |c: usize, i: i64| -> Option<u64> {
        if c >= dims {
            return Some(0);
        }
        if d.linear {
            return (0..size[c] as i64).contains(&i).then_some(i as u64);
        }
        address(i, size[c], d.address[c], norm)
    };
    let float_texels = matches!(d.format, Format::F16 | Format::F32)
        || (d.normalized_float && d.format.normalizable());
    let t = match coords {
        Coords::Int(i) => {
            let at = [0, 1, 2].map(|c| texel_at(c, i64::from(i[c])));
            read(d, at, layer, fetch)?
        }
        Coords::Float(f) => {
            let scaled = [0, 1, 2].map(|c| {
                if norm && c < dims {
                    f[c] * size[c] as f32
                } else {
                    f[c]
                }
            });
            if d.linear_filter && float_texels && !d.linear {
                // The 2^dims texel centres around the coordinate, weighted by its
                // fraction in 1/256 steps.
                let mut lo = [0i64; 3];
                let mut frac = [0f32; 3];
                for c in 0..dims {
                    let u = scaled[c] - 0.5;
                    let fl = u.floor();
                    lo[c] = if fl.is_finite() { fl as i64 } else { 0 };
                    frac[c] = ((u - fl) * 256.0).round() / 256.0;
                }
                let mut acc = [0f32; 4];
                for corner in 0..(1 << dims) {
                    let mut w = 1.0f32;
                    let mut at = [Some(0u64); 3];
                    for c in 0..dims {
                        let hi = corner >> c & 1 == 1;
                        w *= if hi { frac[c] } else { 1.0 - frac[c] };
                        at[c] = texel_at(c, lo[c] + i64::from(hi));
                    }
                    if w == 0.0 {
                        continue;
                    }
                    let v = match read(d, at, layer, fetch)?.unwrap_or_else(|| border(d)) {
                        Texel::F(v) => v,
                        Texel::I(v) => v.map(|x| x as f32),
                    };
                    for k in 0..4 {
                        acc[k] += w * v[k];
                    }
                }
                Some(Texel::F(acc))
            } else {
                let at = [0, 1, 2].map(|c| {
                    let fl = scaled[c].floor();
                    texel_at(c, if fl.is_finite() { fl as i64 } else { 0 })
                });
                read(d, at, layer, fetch)?
            }
        }
    };
    let t = t.unwrap_or_else(|| {
        if d.linear {
            Texel::I([0; 4])
        } else {
            border(d)
        }
    });
    Ok(match (t, ret) {
        (Texel::F(v), Result4::F32) => v.map(f32::to_bits),
        (Texel::I(v), Result4::F32) => v.map(|x| (x as f32).to_bits()),
        (Texel::I(v), _) => v.map(|x| x as u32),
        (Texel::F(v), Result4::S32) => v.map(|x| x as i32 as u32),
        (Texel::F(v), Result4::U32) => v.map(|x| x as u32),
    })
}

/// How a surface access outside the surface behaves (`.trap`, `.clamp`, `.zero`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// Faults.
    Trap,
    /// Takes the nearest element inside.
    Clamp,
    /// Reads zeros; a write does nothing.
    Zero,
}

/// The address a surface access of `bytes` bytes at byte column `x`, row `y` and slice
/// or layer `z` reaches: Ok(Some) inside (or clamped in), Ok(None) for a `.zero` access
/// outside, Err(()) for a `.trap` one.
pub(crate) fn surface_address(
    d: &Descriptor,
    x: i64,
    y: i64,
    z: i64,
    bytes: u64,
    bounds: Bounds,
) -> Result<Option<u64>, ()> {
    let row = d.width.saturating_mul(d.texel_bytes()) as i64;
    let limits = [
        row - bytes as i64 + 1,
        d.height.max(1) as i64,
        d.depth.max(1) as i64,
    ];
    let mut at = [x, y, z];
    for (c, v) in at.iter_mut().enumerate() {
        if usize::from(d.dims) <= c && !(c == 2 && d.layered) {
            *v = 0;
            continue;
        }
        if !(0..limits[c].max(0)).contains(v) {
            match bounds {
                Bounds::Trap => return Err(()),
                Bounds::Zero => return Ok(None),
                Bounds::Clamp => *v = (*v).clamp(0, (limits[c] - 1).max(0)),
            }
        }
    }
    let slice = d.pitch.saturating_mul(d.height);
    Ok(Some(
        d.base
            .wrapping_add((at[2] as u64).wrapping_mul(slice))
            .wrapping_add((at[1] as u64).wrapping_mul(d.pitch))
            .wrapping_add(at[0] as u64),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(format: Format, channels: u8, w: u64, h: u64) -> Descriptor {
        Descriptor {
            base: 0x1000,
            width: w,
            height: h,
            depth: 1,
            pitch: w * format.bytes() * u64::from(channels),
            format,
            channels,
            dims: if h > 1 { 2 } else { 1 },
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

    /// A fetch from `mem` (placed at 0x1000), refusing what lies outside it.
    fn from(mem: &[u8]) -> impl FnMut(u64, usize) -> Result<[u8; 16], u64> + '_ {
        move |a, n| {
            let o = a.checked_sub(0x1000).ok_or(a)? as usize;
            let s = mem.get(o..o + n).ok_or(a)?;
            let mut b = [0u8; 16];
            b[..n].copy_from_slice(s);
            Ok(b)
        }
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn at(d: &Descriptor, mem: &[u8], x: f32, y: f32) -> f32 {
        let r = sample(
            d,
            Coords::Float([x, y, 0.0]),
            0,
            Result4::F32,
            &mut from(mem),
        );
        f32::from_bits(r.unwrap()[0])
    }

    #[test]
    fn point_sampling_takes_the_texel_whose_cell_holds_the_coordinate() {
        // 4x2 floats: value = 10 * row + column.
        let mem = f32s(&[0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]);
        let d = desc(Format::F32, 1, 4, 2);
        assert_eq!(at(&d, &mem, 2.9, 1.2), 12.0);
        assert_eq!(at(&d, &mem, 0.0, 0.0), 0.0);
        // Clamp: outside takes the edge.
        assert_eq!(at(&d, &mem, -5.0, 7.0), 10.0);
        // Border: outside is the border color.
        let b = Descriptor {
            address: [AddressMode::Border; 3],
            border: [-7.0, 0.0, 0.0, 0.0],
            ..d
        };
        assert_eq!(at(&b, &mem, 4.5, 0.5), -7.0);
        // Normalized coordinates with wrap: 1.25 is 0.25 of the width, texel 1.
        let n = Descriptor {
            normalized_coords: true,
            address: [AddressMode::Wrap; 3],
            ..d
        };
        assert_eq!(at(&n, &mem, 1.25 + 0.01, 0.75), 11.0);
        // Mirror: -0.25 reflects to 0.25 of the width, texel 0 (the cell 0..1 of -1..0
        // reflected).
        let m = Descriptor {
            address: [AddressMode::Mirror; 3],
            ..n
        };
        assert_eq!(at(&m, &mem, -0.1, 0.25), 0.0);
        assert_eq!(at(&m, &mem, -0.3, 0.25), 1.0);
    }

    #[test]
    fn linear_filtering_blends_the_nearest_texel_centres_in_256ths() {
        let mem = f32s(&[0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]);
        let d = Descriptor {
            linear_filter: true,
            ..desc(Format::F32, 1, 4, 2)
        };
        // At a texel centre: the texel.
        assert_eq!(at(&d, &mem, 1.5, 0.5), 1.0);
        // Halfway between (1,0) and (2,0): 1.5; and between the rows: +5.
        assert_eq!(at(&d, &mem, 2.0, 0.5), 1.5);
        assert_eq!(at(&d, &mem, 2.0, 1.0), 6.5);
        // A third of the way: the weight is 85/256 (1/3 rounded to 1/256 steps).
        let v = at(&d, &mem, 1.5 + 1.0 / 3.0, 0.5);
        assert_eq!(v, 1.0 + 85.0 / 256.0);
        // Clamped at the edge: below the first centre, the first texel.
        assert_eq!(at(&d, &mem, 0.1, 0.5), 0.0);
    }

    #[test]
    fn integer_texels_read_as_normalized_floats_or_integers() {
        let mem = vec![0u8, 255, 128, 7, 200, 100, 50, 25];
        let d = Descriptor {
            normalized_float: true,
            ..desc(Format::U8, 4, 2, 1)
        };
        let r = sample(&d, Coords::Int([0, 0, 0]), 0, Result4::F32, &mut from(&mem)).unwrap();
        assert_eq!(
            r.map(f32::from_bits),
            [0.0, 1.0, 128.0 / 255.0, 7.0 / 255.0]
        );
        let i = Descriptor {
            normalized_float: false,
            ..d
        };
        let r = sample(&i, Coords::Int([1, 0, 0]), 0, Result4::U32, &mut from(&mem)).unwrap();
        assert_eq!(r, [200, 100, 50, 25]);
        // Signed 8-bit: -128 reads as -1 (clamped), not -128/127.
        let s = Descriptor {
            format: Format::S8,
            normalized_float: true,
            channels: 1,
            ..desc(Format::S8, 1, 8, 1)
        };
        let r = sample(
            &s,
            Coords::Int([4, 0, 0]),
            0,
            Result4::F32,
            &mut from(&[0, 0, 0, 0, 0x80]),
        );
        assert_eq!(f32::from_bits(r.unwrap()[0]), -1.0);
        // A one-channel float texture: the rest read 0, the fourth 1.
        let f = desc(Format::F32, 1, 2, 1);
        let r = sample(
            &f,
            Coords::Int([1, 0, 0]),
            0,
            Result4::F32,
            &mut from(&f32s(&[5.0, 6.0])),
        );
        assert_eq!(r.unwrap().map(f32::from_bits), [6.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn linear_memory_fetches_by_index_and_reads_zero_outside() {
        let mem = f32s(&[1.0, 2.0, 3.0]);
        let d = Descriptor {
            linear: true,
            ..desc(Format::F32, 1, 3, 1)
        };
        let get = |i: i32| {
            let r = sample(&d, Coords::Int([i, 0, 0]), 0, Result4::F32, &mut from(&mem));
            f32::from_bits(r.unwrap()[0])
        };
        assert_eq!((get(0), get(2), get(3), get(-1)), (1.0, 3.0, 0.0, 0.0));
        // A texture over memory the fetch refuses: its error.
        let gone = Descriptor { base: 0x10, ..d };
        let e = sample(
            &gone,
            Coords::Int([0, 0, 0]),
            0,
            Result4::F32,
            &mut from(&mem),
        );
        assert_eq!(e, Err(0x10));
    }

    #[test]
    fn half_floats_and_layers() {
        assert_eq!(half(0x3c00), 1.0);
        assert_eq!(half(0xc000), -2.0);
        assert_eq!(half(0x0001), 2f32.powi(-24));
        assert!(half(0x7e00).is_nan());
        // Two layers of 2x1 floats; layer 1 is read.
        let mem = f32s(&[1.0, 2.0, 3.0, 4.0]);
        let d = Descriptor {
            layered: true,
            depth: 2,
            ..desc(Format::F32, 1, 2, 1)
        };
        let r = sample(
            &d,
            Coords::Float([1.5, 0.5, 0.0]),
            1,
            Result4::F32,
            &mut from(&mem),
        );
        assert_eq!(f32::from_bits(r.unwrap()[0]), 4.0);
    }

    #[test]
    fn a_cubemap_direction_picks_its_face_and_place() {
        // Six 2x2 faces, texel value = 10 * face + index in the face.
        let mut v = vec![];
        for f in 0..6 {
            for i in 0..4 {
                v.push((10 * f + i) as f32);
            }
        }
        let mem = f32s(&v);
        let d = Descriptor {
            cubemap: true,
            layered: true,
            depth: 6,
            dims: 2,
            ..desc(Format::F32, 1, 2, 2)
        };
        let at = |x: f32, y: f32, z: f32| {
            let r = sample(
                &d,
                Coords::Float([x, y, z]),
                0,
                Result4::F32,
                &mut from(&mem),
            );
            f32::from_bits(r.unwrap()[0])
        };
        // +x, s = -z, t = -y: (1, -0.5, 0.5) is s = -0.5, t = 0.5: texel (0, 1) of face 0.
        assert_eq!(at(1.0, -0.5, 0.5), 2.0);
        // -y (face 3): s = x, t = -z: (0.5, -1, -0.5) is texel (1, 1).
        assert_eq!(at(0.5, -1.0, -0.5), 33.0);
        // -z (face 5): s = -x, t = -y: (0.5, 0.5, -1) is texel (0, 0).
        assert_eq!(at(0.5, 0.5, -1.0), 50.0);
        // +y (face 2), +z (face 4).
        assert_eq!(at(-0.5, 1.0, -0.5), 20.0);
        assert_eq!(at(0.5, 0.5, 1.0), 41.0);
    }

    #[test]
    fn surface_accesses_in_bytes_with_their_bounds_modes() {
        let d = Descriptor {
            surface: true,
            cubemap: false,
            ..desc(Format::F32, 1, 4, 2)
        };
        assert_eq!(
            surface_address(&d, 12, 1, 0, 4, Bounds::Trap),
            Ok(Some(0x1000 + 16 + 12))
        );
        assert_eq!(surface_address(&d, 13, 1, 0, 4, Bounds::Trap), Err(()));
        assert_eq!(surface_address(&d, 16, 0, 0, 4, Bounds::Zero), Ok(None));
        assert_eq!(
            surface_address(&d, 40, 5, 0, 4, Bounds::Clamp),
            Ok(Some(0x1000 + 16 + 12))
        );
    }
}
