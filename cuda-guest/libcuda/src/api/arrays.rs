//! CUDA arrays, texture objects and surface objects.
//!
//! An array is device memory laid out row by row, rows a texel row apart (what the
//! simulator's texture unit reads; a GPU's tiled layout is its driver's business): the
//! handle is its device address, so copies reach it through the ordinary paths in
//! either mode. A texture or surface object is a descriptor
//! ([`vmgpu_cuda_api::texture::Descriptor`]) written into a small allocation whose
//! address is the object handle; the simulator's `tex`, `suld` and `sust` read it there.
//! Objects need a device that reads such descriptors (the simulator, in-process or
//! behind the service: [`texture::CAPABILITY_ATTRIBUTE`]); on another,
//! `cuTexObjectCreate` answers `CUDA_ERROR_NOT_SUPPORTED` rather than giving a GPU a
//! handle it would misread.

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::{LazyLock, Mutex, MutexGuard};

use vmgpu_cuda_api::texture::{
    self, AddressMode, Array3DDescriptor, Descriptor, Format, ResourceDesc, TextureDesc,
};

use super::{call, current, driver, nonnull, out, ptr};
use crate::fail::{Fail, R};
use crate::ffi::*;

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArrayDescriptor {
    width: usize,
    height: usize,
    format: c_uint,
    channels: c_uint,
}

/// `CUDA_ARRAY3D_LAYERED`.
const ARRAY3D_LAYERED: c_uint = 0x01;
/// `CUDA_ARRAY3D_SURFACE_LDST`.
const ARRAY3D_SURFACE_LDST: c_uint = 0x02;
/// `CUDA_ARRAY3D_CUBEMAP`.
const ARRAY3D_CUBEMAP: c_uint = 0x04;
/// `CUDA_ARRAY3D_TEXTURE_GATHER`.
const ARRAY3D_TEXTURE_GATHER: c_uint = 0x08;

/// A CUDA array: its descriptor as created, and its format.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Array {
    desc: Array3DDescriptor,
    format: Format,
}

impl Array {
    /// Bytes of a row.
    pub(crate) fn pitch(&self) -> u64 {
        self.desc.width as u64 * self.format.bytes() * u64::from(self.desc.channels)
    }
    /// Rows of a slice.
    pub(crate) fn height(&self) -> u64 {
        self.desc.height.max(1) as u64
    }
    fn bytes(&self) -> Option<u64> {
        self.pitch()
            .checked_mul(self.height())?
            .checked_mul(self.desc.depth.max(1) as u64)
    }
}

/// A texture or surface object: the descriptors it was made from.
#[derive(Debug, Clone, Copy)]
struct Object {
    res: ResourceDesc,
    tex: Option<TextureDesc>,
}

#[derive(Default)]
struct Tables {
    arrays: HashMap<u64, Array>,
    objects: HashMap<u64, Object>,
}

static TABLES: LazyLock<Mutex<Tables>> = LazyLock::new(|| Mutex::new(Tables::default()));

fn tables() -> MutexGuard<'static, Tables> {
    TABLES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The array whose handle is `a`.
pub(crate) fn array(a: u64) -> R<Array> {
    tables()
        .arrays
        .get(&a)
        .copied()
        .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_HANDLE, format!("array {a:#x}")))
}

fn format(code: c_uint) -> R<Format> {
    Format::from_code(code).ok_or_else(|| {
        Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("array format {code:#x} (8-, 16- and 32-bit integers, half and float are supported)"),
        )
    })
}

fn create(p: *mut Handle, d: Array3DDescriptor) -> R<()> {
    if p.is_null() {
        return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pHandle"));
    }
    let fmt = format(d.format)?;
    if !matches!(d.channels, 1 | 2 | 4) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{} channels (1, 2 or 4)", d.channels),
        ));
    }
    if d.width == 0 || (d.depth > 0 && d.height == 0 && d.flags & ARRAY3D_LAYERED == 0) {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("array extent {}x{}x{}", d.width, d.height, d.depth),
        ));
    }
    let known = ARRAY3D_LAYERED | ARRAY3D_SURFACE_LDST | ARRAY3D_TEXTURE_GATHER | ARRAY3D_CUBEMAP;
    if d.flags & !known != 0 {
        return Err(Fail::new(
            CUDA_ERROR_NOT_SUPPORTED,
            format!(
                "array flags {:#x} (layered, cubemap, surface load/store and texture gather are supported)",
                d.flags
            ),
        ));
    }
    if d.flags & ARRAY3D_CUBEMAP != 0
        && (d.width != d.height || d.depth == 0 || !d.depth.is_multiple_of(6))
    {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "a cubemap is square with 6 faces a cube: {}x{}x{}",
                d.width, d.height, d.depth
            ),
        ));
    }
    let a = Array {
        desc: d,
        format: fmt,
    };
    let bytes = a.bytes().ok_or_else(|| {
        Fail::new(
            CUDA_ERROR_OUT_OF_MEMORY,
            format!("array {}x{}x{}", d.width, d.height, d.depth),
        )
    })?;
    let base = driver()?.mem_alloc(current()?, bytes)?;
    tables().arrays.insert(base, a);
    // SAFETY: checked non-null; the program's CUarray slot.
    unsafe { out(p, ptr(base)) }
}

entry! {
    /// `cuArrayCreate_v2`: a 1-D (height 0) or 2-D array.
    fn cuArrayCreate_v2(p: *mut Handle, d: *const ArrayDescriptor) {
        // SAFETY: null or the program's descriptor.
        let d = unsafe { d.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null pAllocateArray"))?;
        create(p, Array3DDescriptor { width: d.width, height: d.height, depth: 0, format: d.format, channels: d.channels, flags: 0 })
    }
}

entry! {
    /// `cuArray3DCreate_v2`: 1-, 2- or 3-D, or layered.
    fn cuArray3DCreate_v2(p: *mut Handle, d: *const Array3DDescriptor) {
        // SAFETY: null or the program's descriptor.
        let d = unsafe { d.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null pAllocateArray"))?;
        create(p, *d)
    }
}

entry! {
    /// `cuArrayDestroy`.
    fn cuArrayDestroy(a: Handle) {
        let a = nonnull(a, "array")?;
        array(a)?;
        driver()?.mem_free(current()?, a)?;
        tables().arrays.remove(&a);
        Ok(())
    }
}

entry! {
    /// `cuArrayGetDescriptor_v2`.
    fn cuArrayGetDescriptor_v2(d: *mut ArrayDescriptor, a: Handle) {
        let a = array(nonnull(a, "array")?)?;
        let x = a.desc;
        // SAFETY: `out` refuses null.
        unsafe { out(d, ArrayDescriptor { width: x.width, height: x.height, format: x.format, channels: x.channels }) }
    }
}

entry! {
    /// `cuArray3DGetDescriptor_v2`.
    fn cuArray3DGetDescriptor_v2(d: *mut Array3DDescriptor, a: Handle) {
        let a = array(nonnull(a, "array")?)?;
        // SAFETY: `out` refuses null.
        unsafe { out(d, a.desc) }
    }
}

/// `CU_RESOURCE_TYPE_*`.
const RES_ARRAY: c_uint = 0;
const RES_MIPMAPPED: c_uint = 1;
const RES_LINEAR: c_uint = 2;
const RES_PITCH2D: c_uint = 3;
/// `CU_TRSF_READ_AS_INTEGER`, `CU_TRSF_NORMALIZED_COORDINATES`.
const TRSF_READ_AS_INTEGER: c_uint = 0x01;
const TRSF_NORMALIZED_COORDINATES: c_uint = 0x02;

/// The memory a resource names, as a descriptor with clamped point sampling.
fn resource(r: &ResourceDesc, surface: bool) -> R<Descriptor> {
    let word = |i: usize| r.res[i];
    let low = |w: u64| w as u32;
    let high = |w: u64| (w >> 32) as u32;
    let bad = |why: String| Fail::new(CUDA_ERROR_INVALID_VALUE, why);
    let plain =
        |base: u64, fmt: Format, channels: u32, w: u64, h: u64, d: u64, pitch: u64| Descriptor {
            base,
            width: w,
            height: h,
            depth: d,
            pitch,
            format: fmt,
            channels: channels as u8,
            dims: 1,
            layered: false,
            linear: false,
            normalized_coords: false,
            normalized_float: false,
            linear_filter: false,
            surface,
            cubemap: false,
            address: [AddressMode::Clamp; 3],
            border: [0.0; 4],
        };
    let channels = |c: u32| {
        if matches!(c, 1 | 2 | 4) {
            Ok(c)
        } else {
            Err(bad(format!("{c} channels (1, 2 or 4)")))
        }
    };
    let d = match r.res_type {
        RES_ARRAY => {
            let a = array(word(0))?;
            let x = a.desc;
            if surface && x.flags & ARRAY3D_SURFACE_LDST == 0 {
                return Err(bad(
                    "a surface needs an array made with CUDA_ARRAY3D_SURFACE_LDST".into(),
                ));
            }
            let cubemap = x.flags & ARRAY3D_CUBEMAP != 0;
            let layered = x.flags & ARRAY3D_LAYERED != 0 || cubemap;
            let dims = if x.height == 0 {
                1
            } else if x.depth == 0 || layered {
                2
            } else {
                3
            };
            Descriptor {
                dims,
                layered,
                cubemap,
                ..plain(
                    word(0),
                    a.format,
                    x.channels,
                    x.width as u64,
                    a.height(),
                    x.depth.max(1) as u64,
                    a.pitch(),
                )
            }
        }
        RES_LINEAR if !surface => {
            let fmt = format(low(word(1)))?;
            let c = channels(high(word(1)))?;
            let texel = fmt.bytes() * u64::from(c);
            Descriptor {
                linear: true,
                ..plain(word(0), fmt, c, word(2) / texel, 1, 1, word(2))
            }
        }
        RES_PITCH2D if !surface => {
            let fmt = format(low(word(1)))?;
            let c = channels(high(word(1)))?;
            Descriptor {
                dims: 2,
                ..plain(word(0), fmt, c, word(2), word(3), 1, word(4))
            }
        }
        RES_MIPMAPPED => {
            return Err(Fail::new(
                CUDA_ERROR_NOT_SUPPORTED,
                "mipmapped arrays are not supported",
            ))
        }
        t => {
            return Err(bad(format!(
                "resource type {t}{}",
                if surface {
                    " for a surface (arrays only)"
                } else {
                    ""
                }
            )))
        }
    };
    if d.extent().is_none() || d.width == 0 {
        return Err(bad(format!(
            "a resource of {}x{} texels with a pitch of {} bytes",
            d.width, d.height, d.pitch
        )));
    }
    Ok(d)
}

/// Writes `d` into a new allocation of the current context: the object's handle.
fn place(d: &Descriptor) -> R<u64> {
    let e = driver()?;
    let c = current()?;
    e.simulator_feature(c, "texture and surface objects")?;
    let h = e.mem_alloc(c, texture::SIZE as u64)?;
    let bytes = d.encode();
    // SAFETY: `bytes` is a live buffer of `texture::SIZE` bytes; the copy is synchronous.
    if let Err(f) = unsafe { e.memcpy_htod(c, h, bytes.as_ptr(), bytes.len(), None, false) } {
        let _ = e.mem_free(c, h);
        return Err(f);
    }
    Ok(h)
}

entry! {
    /// `cuTexObjectCreate`: arrays (1-, 2-, 3-D, layered), linear memory (fetched by
    /// index) and pitched 2-D memory; point or linear filtering, every address mode,
    /// normalized coordinates, integer or normalized-float reads. Resource views are
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    fn cuTexObjectCreate(p: *mut u64, res: *const ResourceDesc, tex: *const TextureDesc, view: *const c_void) {
        if p.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pTexObject"));
        }
        if !view.is_null() {
            return Err(Fail::new(CUDA_ERROR_NOT_SUPPORTED, "resource view descriptors are not supported"));
        }
        // SAFETY: null or the program's descriptors.
        let (res, tex) = unsafe { (res.as_ref(), tex.as_ref()) };
        let (Some(res), Some(tex)) = (res, tex) else {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pResDesc or pTexDesc"));
        };
        let mut d = resource(res, false)?;
        for (i, a) in tex.address.iter().enumerate() {
            d.address[i] = AddressMode::from_code(*a)
                .ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, format!("address mode {a}")))?;
        }
        d.normalized_coords = tex.flags & TRSF_NORMALIZED_COORDINATES != 0;
        d.normalized_float = tex.flags & TRSF_READ_AS_INTEGER == 0 && d.format.normalizable();
        d.linear_filter = match tex.filter {
            0 => false,
            1 => true,
            f => return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, format!("filter mode {f}"))),
        };
        let float = matches!(d.format, Format::F16 | Format::F32) || d.normalized_float;
        if d.linear_filter && !float {
            return Err(Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                "linear filtering needs float texels (a float format, or 8/16-bit integers read as normalized floats)",
            ));
        }
        d.border = tex.border;
        let h = place(&d)?;
        tables().objects.insert(h, Object { res: *res, tex: Some(*tex) });
        // SAFETY: checked non-null; the program's CUtexObject.
        unsafe { out(p, h) }
    }
}

/// The object `o` (texture or surface as `surface` says): its descriptors.
fn object(o: u64, surface: bool) -> R<Object> {
    tables()
        .objects
        .get(&o)
        .copied()
        .filter(|x| x.tex.is_none() == surface)
        .ok_or_else(|| {
            Fail::new(
                CUDA_ERROR_INVALID_VALUE,
                format!(
                    "{o:#x} is not a {} object",
                    if surface { "surface" } else { "texture" }
                ),
            )
        })
}

fn destroy(o: u64, surface: bool) -> R<()> {
    object(o, surface)?;
    driver()?.mem_free(current()?, o)?;
    tables().objects.remove(&o);
    Ok(())
}

entry! {
    /// `cuTexObjectDestroy`.
    fn cuTexObjectDestroy(o: u64) { destroy(o, false) }
}

entry! {
    /// `cuTexObjectGetResourceDesc`.
    fn cuTexObjectGetResourceDesc(r: *mut ResourceDesc, o: u64) {
        let x = object(o, false)?;
        // SAFETY: `out` refuses null.
        unsafe { out(r, x.res) }
    }
}

entry! {
    /// `cuTexObjectGetTextureDesc`.
    fn cuTexObjectGetTextureDesc(t: *mut TextureDesc, o: u64) {
        let x = object(o, false)?;
        // SAFETY: `out` refuses null.
        unsafe { out(t, x.tex.expect("a texture object has its texture descriptor")) }
    }
}

entry! {
    /// `cuSurfObjectCreate`: a surface over an array made with
    /// `CUDA_ARRAY3D_SURFACE_LDST`.
    fn cuSurfObjectCreate(p: *mut u64, res: *const ResourceDesc) {
        if p.is_null() {
            return Err(Fail::new(CUDA_ERROR_INVALID_VALUE, "null pSurfObject"));
        }
        // SAFETY: null or the program's descriptor.
        let res = unsafe { res.as_ref() }.ok_or_else(|| Fail::new(CUDA_ERROR_INVALID_VALUE, "null pResDesc"))?;
        let d = resource(res, true)?;
        let h = place(&d)?;
        tables().objects.insert(h, Object { res: *res, tex: None });
        // SAFETY: checked non-null; the program's CUsurfObject.
        unsafe { out(p, h) }
    }
}

entry! {
    /// `cuSurfObjectDestroy`.
    fn cuSurfObjectDestroy(o: u64) { destroy(o, true) }
}

entry! {
    /// `cuSurfObjectGetResourceDesc`.
    fn cuSurfObjectGetResourceDesc(r: *mut ResourceDesc, o: u64) {
        let x = object(o, true)?;
        // SAFETY: `out` refuses null.
        unsafe { out(r, x.res) }
    }
}

/// A 1-D copy into or out of an array at byte `offset`: the array's address there,
/// checked against its size.
fn array_at(a: Handle, offset: usize, n: usize) -> R<CUdeviceptr> {
    let base = nonnull(a, "array")?;
    let bytes = array(base)?.bytes().unwrap_or(0);
    if (offset as u64)
        .checked_add(n as u64)
        .is_none_or(|end| end > bytes)
    {
        return Err(Fail::new(
            CUDA_ERROR_INVALID_VALUE,
            format!("{n} bytes at offset {offset} of an array of {bytes} bytes"),
        ));
    }
    Ok(base + offset as u64)
}

entry! {
    /// `cuMemcpyHtoA_v2`: bytes into an array's rows, from `offset`.
    fn cuMemcpyHtoA_v2(a: Handle, offset: usize, src: *const c_void, n: usize) {
        let d = array_at(a, offset, n)?;
        // SAFETY: the program's `n` bytes.
        unsafe { super::htod(d, src, n, None) }
    }
}

entry! {
    /// `cuMemcpyHtoAAsync_v2`.
    fn cuMemcpyHtoAAsync_v2(a: Handle, offset: usize, src: *const c_void, n: usize, s: Handle) {
        let d = array_at(a, offset, n)?;
        // SAFETY: the program's `n` bytes, kept until the stream passes the copy.
        unsafe { super::htod(d, src, n, Some(super::strm(s, false))) }
    }
}

entry! {
    /// `cuMemcpyAtoH_v2`.
    fn cuMemcpyAtoH_v2(dst: *mut c_void, a: Handle, offset: usize, n: usize) {
        let s = array_at(a, offset, n)?;
        // SAFETY: the program's `n` bytes.
        unsafe { super::dtoh(dst, s, n, None) }
    }
}

entry! {
    /// `cuMemcpyAtoHAsync_v2`.
    fn cuMemcpyAtoHAsync_v2(dst: *mut c_void, a: Handle, offset: usize, n: usize, st: Handle) {
        let s = array_at(a, offset, n)?;
        // SAFETY: the program's `n` bytes, kept until the stream passes the copy.
        unsafe { super::dtoh(dst, s, n, Some(super::strm(st, false))) }
    }
}

entry! {
    /// `cuMemcpyDtoA_v2`.
    fn cuMemcpyDtoA_v2(a: Handle, offset: usize, src: CUdeviceptr, n: usize) {
        super::dtod(array_at(a, offset, n)?, src, n, None)
    }
}

entry! {
    /// `cuMemcpyAtoD_v2`.
    fn cuMemcpyAtoD_v2(dst: CUdeviceptr, a: Handle, offset: usize, n: usize) {
        super::dtod(dst, array_at(a, offset, n)?, n, None)
    }
}

entry! {
    /// `cuMemcpyAtoA_v2`.
    fn cuMemcpyAtoA_v2(dst: Handle, dst_offset: usize, src: Handle, src_offset: usize, n: usize) {
        super::dtod(array_at(dst, dst_offset, n)?, array_at(src, src_offset, n)?, n, None)
    }
}
