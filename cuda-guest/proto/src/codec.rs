//! How each field type of a payload travels: the [`Wire`] trait, implemented for every
//! type a row of the command table (`commands.rs`) may name. The generated encoders and
//! decoders call it field by field, in the row's order; a new field type is one impl
//! here.
//!
//! Decoding checks every length and count against the [`Limits`] and against the bytes
//! left in the frame before allocating (the [`Reader`] does), and every error names the
//! field (or the part of it) and its offset in the frame.

use super::error::{EncodeError, FieldError};
use super::request::{HostDest, HostSource, KernelParams, MemsetWidth, SgEntry};
use super::wire::{Reader, Writer};
use super::{
    ContextId, DevicePtr, EventId, FunctionId, FunctionInfo, Limits, ModuleId, ParamLayout,
    StreamId,
};
use vmgpu_cuda_api::LaunchConfig;

/// The names a field goes by in error messages: its own, and those of its parts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    /// The field itself (`image`): what a fixed-size value, and an encoding error, names.
    pub(crate) name: &'static str,
    /// Its length prefix (`image_len`), for strings and blobs.
    pub(crate) len: &'static str,
    /// Its three parts (`grid_x`, `grid_y`, `grid_z`), for `[u32; 3]`.
    pub(crate) xyz: [&'static str; 3],
}

/// A field of type `T` on the wire. Implemented by `T` itself for fixed-size values, and
/// by a marker type where the same Rust type travels in several ways (a `Vec<u8>` that
/// is a module image, bounded by `max_module`, is [`Blob<MaxModule>`]; one that is inline
/// data, left in the receive buffer by a lending decoder, is [`Lent<MaxInline>`]).
pub(crate) trait Wire<T = Self> {
    /// Appends the value.
    fn put(v: &T, f: Field, w: &mut Writer<'_>) -> Result<(), EncodeError>;
    /// Reads the value, checking it against `limits` before allocating anything for it.
    fn take(f: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<T, FieldError>;
    /// A valid value of every shape the type has, within [`Limits::default`], for the
    /// property tests of every row.
    #[cfg(test)]
    fn sample(g: &mut Gen) -> T;
}

/// A field whose decoding needs an earlier field of the same payload, declared
/// `field: Type [earlier]` in its row: [`HostDest`] needs the copy's `bytes` (the
/// inline limit applies to it, and a scatter-gather list must add up to it).
pub(crate) trait WireAfter<T = Self> {
    /// The earlier field's type.
    type Earlier;
    /// Appends the value.
    fn put(v: &T, f: Field, w: &mut Writer<'_>) -> Result<(), EncodeError>;
    /// Reads the value; `earlier` is the earlier field's offset in the frame and value.
    fn take(
        earlier: &(usize, Self::Earlier),
        f: Field,
        r: &mut Reader<'_>,
        limits: &Limits,
    ) -> Result<T, FieldError>;
    /// A valid value, with the earlier field changed to agree with it.
    #[cfg(test)]
    fn sample(earlier: &mut Self::Earlier, g: &mut Gen) -> T;
}

// ---------------------------------------------------------------- fixed-size values

impl Wire for u32 {
    fn put(v: &u32, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(*v);
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<u32, FieldError> {
        r.u32(f.name)
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> u32 {
        g.u64() as u32
    }
}

impl Wire for i32 {
    fn put(v: &i32, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.i32(*v);
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<i32, FieldError> {
        r.i32(f.name)
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> i32 {
        g.u64() as i32
    }
}

impl Wire for u64 {
    fn put(v: &u64, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u64(*v);
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<u64, FieldError> {
        r.u64(f.name)
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> u64 {
        g.u64()
    }
}

/// Handles and device addresses: a `u64`.
macro_rules! wire_u64_newtype {
    ($($t:ident),*) => {$(
        impl Wire for $t {
            fn put(v: &$t, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                w.u64(v.0);
                Ok(())
            }
            fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<$t, FieldError> {
                r.u64(f.name).map($t)
            }
            #[cfg(test)]
            fn sample(g: &mut Gen) -> $t {
                $t(g.u64())
            }
        }
    )*};
}

wire_u64_newtype!(ContextId, ModuleId, FunctionId, StreamId, EventId, DevicePtr);

/// Milliseconds as `f32` bits.
impl Wire for f32 {
    fn put(v: &f32, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(v.to_bits());
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<f32, FieldError> {
        r.u32(f.name).map(f32::from_bits)
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> f32 {
        // Finite: NaN != NaN would fail the comparison, not the codec.
        let v = f32::from_bits(g.u64() as u32);
        if v.is_finite() {
            v
        } else {
            g.below(1 << 20) as f32 / 8.0
        }
    }
}

/// A UUID: 16 bytes.
impl Wire for [u8; 16] {
    fn put(v: &[u8; 16], _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.bytes(v);
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<[u8; 16], FieldError> {
        r.uuid(f.name)
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.iter_mut().for_each(|b| *b = g.u64() as u8);
        a
    }
}

/// `x`, `y`, `z` (grid and block dimensions), each a `u32` named `<field>_x` and so on.
impl Wire for [u32; 3] {
    fn put(v: &[u32; 3], _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        v.iter().for_each(|x| w.u32(*x));
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<[u32; 3], FieldError> {
        Ok([r.u32(f.xyz[0])?, r.u32(f.xyz[1])?, r.u32(f.xyz[2])?])
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> [u32; 3] {
        [g.u64() as u32, g.u64() as u32, g.u64() as u32]
    }
}

/// A launch's configuration: grid x, y, z, block x, y, z (`u32` each), then the dynamic
/// shared memory per block (`u32`).
impl Wire for LaunchConfig {
    fn put(v: &LaunchConfig, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        v.grid.iter().chain(&v.block).for_each(|x| w.u32(*x));
        w.u32(v.shared_bytes);
        Ok(())
    }
    fn take(_: Field, r: &mut Reader<'_>, _: &Limits) -> Result<LaunchConfig, FieldError> {
        Ok(LaunchConfig {
            grid: [r.u32("grid_x")?, r.u32("grid_y")?, r.u32("grid_z")?],
            block: [r.u32("block_x")?, r.u32("block_y")?, r.u32("block_z")?],
            shared_bytes: r.u32("shared_bytes")?,
        })
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> LaunchConfig {
        LaunchConfig {
            grid: [g.u64() as u32, g.u64() as u32, g.u64() as u32],
            block: [g.u64() as u32, g.u64() as u32, g.u64() as u32],
            shared_bytes: g.u64() as u32,
        }
    }
}

/// A memset's element width: `u32`, 1, 2 or 4.
impl Wire for MemsetWidth {
    fn put(v: &MemsetWidth, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(*v as u32);
        Ok(())
    }
    fn take(f: Field, r: &mut Reader<'_>, _: &Limits) -> Result<MemsetWidth, FieldError> {
        let offset = r.offset();
        let v = r.u32(f.name)?;
        MemsetWidth::from_u32(v).ok_or(FieldError::InvalidValue {
            field: f.name,
            offset,
            value: v.into(),
        })
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> MemsetWidth {
        [MemsetWidth::W8, MemsetWidth::W16, MemsetWidth::W32][g.below(3) as usize]
    }
}

// ---------------------------------------------------------------- strings and blobs

/// Which limit of the session bounds a string or blob.
pub(crate) trait Bound {
    /// The limit.
    fn max(limits: &Limits) -> u32;
    /// The limit of [`Limits::default`], for samples.
    #[cfg(test)]
    fn default_max() -> u32 {
        Self::max(&Limits::default())
    }
}

/// `max_inline`: inline data of a copy or a ping.
#[derive(Debug)]
pub(crate) struct MaxInline;
/// `max_module`: a module image.
#[derive(Debug)]
pub(crate) struct MaxModule;
/// `max_name`: a kernel name, a device name, a PCI bus id.
#[derive(Debug)]
pub(crate) struct MaxName;

impl Bound for MaxInline {
    fn max(l: &Limits) -> u32 {
        l.max_inline
    }
}
impl Bound for MaxModule {
    fn max(l: &Limits) -> u32 {
        l.max_module
    }
}
impl Bound for MaxName {
    fn max(l: &Limits) -> u32 {
        l.max_name
    }
}

/// A blob (`<field>_len: u32`, then the bytes) of at most `B` bytes, copied out of the
/// frame.
#[derive(Debug)]
pub(crate) struct Blob<B>(std::marker::PhantomData<B>);

impl<B: Bound> Wire<Vec<u8>> for Blob<B> {
    fn put(v: &Vec<u8>, f: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.blob(f.name, v)
    }
    fn take(f: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<Vec<u8>, FieldError> {
        r.blob(f.len, B::max(limits))
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> Vec<u8> {
        g.bytes(B::default_max().min(300))
    }
}

/// Bulk data (`<field>_len: u32`, then the bytes, which errors call `<field>`) of at
/// most `B` bytes, which a lending decoder leaves in the receive buffer
/// ([`RequestFrame::decode_lent`](super::RequestFrame::decode_lent)).
#[derive(Debug)]
pub(crate) struct Lent<B>(std::marker::PhantomData<B>);

impl<B: Bound> Wire<Vec<u8>> for Lent<B> {
    fn put(v: &Vec<u8>, f: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.blob(f.name, v)
    }
    fn take(f: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<Vec<u8>, FieldError> {
        let n = r.len_u32(f.len, B::max(limits))?;
        r.data(f.name, n.into())
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> Vec<u8> {
        g.bytes(B::default_max().min(300))
    }
}

/// A string (`<field>_len: u32`, then that many bytes of UTF-8) of at most `B` bytes.
#[derive(Debug)]
pub(crate) struct Str<B>(std::marker::PhantomData<B>);

impl<B: Bound> Wire<String> for Str<B> {
    fn put(v: &String, f: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.blob(f.name, v.as_bytes())
    }
    fn take(f: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<String, FieldError> {
        r.string(f.len, B::max(limits))
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> String {
        const CHARS: [char; 8] = ['a', 'Z', '_', '0', ' ', 'é', '€', '𝄞'];
        let mut s = String::new();
        for _ in 0..g.below(40) {
            let c = CHARS[g.below(CHARS.len() as u64) as usize];
            if s.len() + c.len_utf8() <= B::default_max() as usize {
                s.push(c);
            }
        }
        s
    }
}

// ---------------------------------------------------------------- copies

const KIND_INLINE: u32 = 0;
const KIND_GUEST: u32 = 1;

/// `kind: u32`: 0 inline, 1 guest memory.
fn kind(r: &mut Reader<'_>) -> Result<u32, FieldError> {
    let offset = r.offset();
    match r.u32("kind")? {
        k @ (KIND_INLINE | KIND_GUEST) => Ok(k),
        k => Err(FieldError::InvalidValue {
            field: "kind",
            offset,
            value: k.into(),
        }),
    }
}

/// `count: u32` then the entries (`gpa: u64`, `len: u64`, non-zero, not wrapping); their
/// total must be `bytes` (the field at `bytes_at`).
fn sg_list(
    r: &mut Reader<'_>,
    limits: &Limits,
    bytes: u64,
    bytes_at: usize,
) -> Result<Vec<SgEntry>, FieldError> {
    let count = r.len_u32("count", limits.max_sg_entries)?;
    r.check_items("sg_entries", count, 16)?;
    let mut list = Vec::with_capacity(count as usize);
    let mut total: u128 = 0;
    for _ in 0..count {
        let gpa = r.u64("sg_gpa")?;
        let len_at = r.offset();
        let len = r.u64("sg_len")?;
        if len == 0 || gpa.checked_add(len).is_none() {
            return Err(FieldError::InvalidValue {
                field: "sg_len",
                offset: len_at,
                value: len,
            });
        }
        total += u128::from(len);
        list.push(SgEntry { gpa, len });
    }
    if total != u128::from(bytes) {
        return Err(FieldError::Mismatch {
            field: "bytes",
            offset: bytes_at,
            found: bytes,
            expected: u64::try_from(total).unwrap_or(u64::MAX),
        });
    }
    Ok(list)
}

fn write_sg(w: &mut Writer<'_>, list: &[SgEntry]) -> Result<(), EncodeError> {
    w.len_u32("sg_entries", list.len())?;
    for e in list {
        w.u64(e.gpa);
        w.u64(e.len);
    }
    Ok(())
}

fn sg_total(list: &[SgEntry]) -> u64 {
    list.iter().fold(0u64, |t, e| t.wrapping_add(e.len))
}

#[cfg(test)]
fn sample_sg(g: &mut Gen) -> Vec<SgEntry> {
    (0..g.below(8))
        .map(|_| SgEntry {
            gpa: g.below(1 << 48),
            len: 1 + g.below(1 << 20),
        })
        .collect()
}

/// A host-to-device copy's source: `bytes: u64`, `kind: u32`, `count: u32`, then `count`
/// data bytes (kind 0, inline: `count == bytes`, at most `max_inline`) or `count`
/// scatter-gather entries (kind 1, guest memory: their lengths add up to `bytes`).
impl Wire for HostSource {
    fn put(v: &HostSource, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match v {
            HostSource::Inline(data) => {
                w.u64(data.len() as u64);
                w.u32(KIND_INLINE);
                w.blob("data", data)
            }
            HostSource::Guest(list) => {
                w.u64(sg_total(list));
                w.u32(KIND_GUEST);
                write_sg(w, list)
            }
        }
    }
    fn take(_: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<HostSource, FieldError> {
        let bytes_at = r.offset();
        let bytes = r.u64("bytes")?;
        if kind(r)? == KIND_GUEST {
            return Ok(HostSource::Guest(sg_list(r, limits, bytes, bytes_at)?));
        }
        let count_at = r.offset();
        let count = r.len_u32("count", limits.max_inline)?;
        if u64::from(count) != bytes {
            return Err(FieldError::Mismatch {
                field: "count",
                offset: count_at,
                found: count.into(),
                expected: bytes,
            });
        }
        Ok(HostSource::Inline(r.data("data", count.into())?))
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> HostSource {
        if g.below(2) == 0 {
            HostSource::Inline(g.bytes(600))
        } else {
            HostSource::Guest(sample_sg(g))
        }
    }
}

/// A device-to-host copy's destination, after the copy's `bytes: u64`: `kind: u32`, then
/// `count: u32` 0 (kind 0, inline: `bytes` at most `max_inline`, the data comes in the
/// reply) or `count` scatter-gather entries adding up to `bytes` (kind 1).
impl WireAfter for HostDest {
    type Earlier = u64;
    fn put(v: &HostDest, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match v {
            HostDest::Inline => {
                w.u32(KIND_INLINE);
                w.u32(0);
                Ok(())
            }
            HostDest::Guest(list) => {
                w.u32(KIND_GUEST);
                write_sg(w, list)
            }
        }
    }
    fn take(
        &(bytes_at, bytes): &(usize, u64),
        _: Field,
        r: &mut Reader<'_>,
        limits: &Limits,
    ) -> Result<HostDest, FieldError> {
        if kind(r)? == KIND_GUEST {
            return Ok(HostDest::Guest(sg_list(r, limits, bytes, bytes_at)?));
        }
        if bytes > limits.max_inline.into() {
            return Err(FieldError::LimitExceeded {
                field: "bytes",
                offset: bytes_at,
                value: bytes,
                max: limits.max_inline.into(),
            });
        }
        let count_at = r.offset();
        let count = r.u32("count")?;
        if count != 0 {
            return Err(FieldError::InvalidValue {
                field: "count",
                offset: count_at,
                value: count.into(),
            });
        }
        Ok(HostDest::Inline)
    }
    #[cfg(test)]
    fn sample(bytes: &mut u64, g: &mut Gen) -> HostDest {
        if g.below(2) == 0 {
            *bytes %= u64::from(Limits::default().max_inline) + 1;
            HostDest::Inline
        } else {
            let list = sample_sg(g);
            *bytes = sg_total(&list);
            HostDest::Guest(list)
        }
    }
}

// ---------------------------------------------------------------- parameters

/// `count` parameter slots (`offset: u32`, `size: u32`): in order, without overlap, each
/// ending within `end_max`. The count is checked against the bytes left first.
fn slots(r: &mut Reader<'_>, count: u32, end_max: u32) -> Result<Vec<ParamLayout>, FieldError> {
    r.check_items("param_slots", count, 8)?;
    let mut v = Vec::with_capacity(count as usize);
    let mut end = 0u64;
    for _ in 0..count {
        let at = r.offset();
        let offset = r.u32("param_offset")?;
        let size = r.u32("param_size")?;
        let stop = u64::from(offset) + u64::from(size);
        if u64::from(offset) < end {
            return Err(FieldError::Mismatch {
                field: "param_offset",
                offset: at,
                found: offset.into(),
                expected: end,
            });
        }
        if stop > u64::from(end_max) {
            return Err(FieldError::LimitExceeded {
                field: "param_size",
                offset: at + 4,
                value: stop,
                max: end_max.into(),
            });
        }
        end = stop;
        v.push(ParamLayout { offset, size });
    }
    Ok(v)
}

#[cfg(test)]
fn sample_slots(g: &mut Gen, max_end: u64) -> (Vec<ParamLayout>, u64) {
    let mut v = Vec::new();
    let mut end = 0u64;
    for _ in 0..g.below(9) {
        let offset = end + g.below(8);
        let size = g.below(17);
        if offset + size > max_end {
            break;
        }
        v.push(ParamLayout {
            offset: offset as u32,
            size: size as u32,
        });
        end = offset + size;
    }
    (v, end)
}

/// A launch's parameters: `param_count: u32` (at most `max_params`), `param_bytes: u32`
/// (at most `max_param_bytes`), the slots (`offset: u32`, `size: u32`, in order, without
/// overlap, inside the bytes), then the bytes.
impl Wire for KernelParams {
    fn put(v: &KernelParams, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        v.check()?;
        w.len_u32("param_count", v.slots.len())?;
        w.len_u32("param_bytes", v.bytes.len())?;
        for s in &v.slots {
            w.u32(s.offset);
            w.u32(s.size);
        }
        w.bytes(&v.bytes);
        Ok(())
    }
    fn take(_: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<KernelParams, FieldError> {
        let count = r.len_u32("param_count", limits.max_params)?;
        let blob_len = r.len_u32("param_bytes", limits.max_param_bytes)?;
        let slots = slots(r, count, blob_len)?;
        let bytes = r.take("param_data", blob_len.into())?.to_vec();
        Ok(KernelParams { slots, bytes })
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> KernelParams {
        let (slots, end) = sample_slots(g, 1 << 10);
        let len = end + g.below(8);
        KernelParams {
            slots,
            bytes: (0..len).map(|_| g.u64() as u8).collect(),
        }
    }
}

/// `PARAMS_UNKNOWN` in a function's `param_count`: the server does not know the layout.
const PARAMS_UNKNOWN: u32 = u32::MAX;

/// A kernel and its parameter layout: `function: u64`, `param_count: u32` (`0xffffffff`:
/// unknown; else at most `max_params`), then `param_count` slots (`offset: u32`,
/// `size: u32`, in order, without overlap, ending within `max_param_bytes`).
impl Wire for FunctionInfo {
    fn put(v: &FunctionInfo, _: Field, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u64(v.function.0);
        match &v.params {
            None => w.u32(PARAMS_UNKNOWN),
            Some(p) => {
                if p.len() >= PARAMS_UNKNOWN as usize {
                    return Err(EncodeError::TooLong {
                        field: "param_count",
                        len: p.len() as u64,
                    });
                }
                w.u32(p.len() as u32);
                for s in p {
                    w.u32(s.offset);
                    w.u32(s.size);
                }
            }
        }
        Ok(())
    }
    fn take(_: Field, r: &mut Reader<'_>, limits: &Limits) -> Result<FunctionInfo, FieldError> {
        let function = FunctionId(r.u64("function")?);
        let at = r.offset();
        let count = r.u32("param_count")?;
        if count == PARAMS_UNKNOWN {
            return Ok(FunctionInfo {
                function,
                params: None,
            });
        }
        if count > limits.max_params {
            return Err(FieldError::LimitExceeded {
                field: "param_count",
                offset: at,
                value: count.into(),
                max: limits.max_params.into(),
            });
        }
        // Inside the most parameter bytes a launch may carry, so a client can lay out a
        // buffer from them without a surprise.
        let params = slots(r, count, limits.max_param_bytes)?;
        Ok(FunctionInfo {
            function,
            params: Some(params),
        })
    }
    #[cfg(test)]
    fn sample(g: &mut Gen) -> FunctionInfo {
        let function = FunctionId(g.u64());
        if g.below(4) == 0 {
            return FunctionInfo {
                function,
                params: None,
            };
        }
        let max = Limits::default().max_param_bytes;
        FunctionInfo {
            function,
            params: Some(sample_slots(g, max.into()).0),
        }
    }
}

// ---------------------------------------------------------------- samples

/// A deterministic source of sample values (splitmix64), favouring the edges (0, 1,
/// all ones) now and then.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Gen(u64);

#[cfg(test)]
impl Gen {
    /// A source started from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Gen(seed)
    }

    fn raw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Any `u64`, the edges more often than by chance.
    pub(crate) fn u64(&mut self) -> u64 {
        match self.raw() % 16 {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => self.raw() % 0x1000,
            _ => self.raw(),
        }
    }

    /// Below `n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.raw() % n.max(1)
    }

    /// At most `max` bytes.
    pub(crate) fn bytes(&mut self, max: u32) -> Vec<u8> {
        (0..self.below(u64::from(max) + 1))
            .map(|_| self.raw() as u8)
            .collect()
    }
}
