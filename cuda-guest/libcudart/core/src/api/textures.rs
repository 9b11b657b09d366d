//! CUDA arrays, texture and surface objects through the runtime: the runtime's channel
//! descriptors and resource/texture descriptors turned into the driver's, on the
//! driver's arrays and objects (`libcuda.so.1`'s `api/arrays.rs`).
//!
//! `struct cudaResourceDesc` grew a reserved tail and `flags` in CUDA 13; both sonames
//! read only the fields they share.

use std::ffi::{c_int, c_uint, c_void};

use super::{
    bound, call, out, DriverMemcpy3D, Memcpy3DParms, Size3, DEFAULT, DEVICE_TO_DEVICE,
    DEVICE_TO_HOST, HOST_TO_DEVICE, HOST_TO_HOST,
};
use crate::driver::{CUdeviceptr, Handle};
use crate::errors::*;
use crate::state::{cu, Fail, R};
use vmgpu_cuda_api::texture::{
    Array3DDescriptor, ResourceDesc as DriverResourceDesc, TextureDesc as DriverTextureDesc,
};

/// `struct cudaChannelFormatDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelFormatDesc {
    x: c_int,
    y: c_int,
    z: c_int,
    w: c_int,
    f: c_int,
}

/// `cudaChannelFormatKind`: signed, unsigned, float.
const KIND_SIGNED: c_int = 0;
const KIND_UNSIGNED: c_int = 1;
const KIND_FLOAT: c_int = 2;

/// The driver's format and channel count of a channel descriptor (equal widths, 1, 2
/// or 4 channels).
fn driver_format(d: &ChannelFormatDesc) -> R<(c_uint, c_uint)> {
    let bits = [d.x, d.y, d.z, d.w];
    let channels = bits.iter().take_while(|&&b| b > 0).count();
    let bad = || Fail::new(cudaErrorInvalidChannelDescriptor, format!("{d:?}"));
    if !matches!(channels, 1 | 2 | 4)
        || bits[..channels].iter().any(|&b| b != d.x)
        || bits[channels..].iter().any(|&b| b != 0)
    {
        return Err(bad());
    }
    let format = match (d.f, d.x) {
        (KIND_UNSIGNED, 8) => 0x01,
        (KIND_UNSIGNED, 16) => 0x02,
        (KIND_UNSIGNED, 32) => 0x03,
        (KIND_SIGNED, 8) => 0x08,
        (KIND_SIGNED, 16) => 0x09,
        (KIND_SIGNED, 32) => 0x0a,
        (KIND_FLOAT, 16) => 0x10,
        (KIND_FLOAT, 32) => 0x20,
        _ => return Err(bad()),
    };
    Ok((format, channels as c_uint))
}

/// The channel descriptor of a driver format and channel count.
fn channel_desc(format: c_uint, channels: c_uint) -> ChannelFormatDesc {
    let (f, bits) = match format {
        0x01 => (KIND_UNSIGNED, 8),
        0x02 => (KIND_UNSIGNED, 16),
        0x03 => (KIND_UNSIGNED, 32),
        0x08 => (KIND_SIGNED, 8),
        0x09 => (KIND_SIGNED, 16),
        0x0a => (KIND_SIGNED, 32),
        0x10 => (KIND_FLOAT, 16),
        _ => (KIND_FLOAT, 32),
    };
    let b = |i: c_uint| if i < channels { bits } else { 0 };
    ChannelFormatDesc {
        x: b(0),
        y: b(1),
        z: b(2),
        w: b(3),
        f,
    }
}

/// `cudaCreateChannelDesc`.
#[no_mangle]
pub extern "C" fn cudaCreateChannelDesc(
    x: c_int,
    y: c_int,
    z: c_int,
    w: c_int,
    f: c_int,
) -> ChannelFormatDesc {
    ChannelFormatDesc { x, y, z, w, f }
}

/// Makes an array of `extent` texels (`width` x `height` x `depth`, 0 for an absent
/// dimension) of `desc`.
///
/// # Safety
/// `a` and `desc` are null or the program's.
unsafe fn malloc_array(
    a: *mut Handle,
    desc: *const ChannelFormatDesc,
    extent: Size3,
    flags: c_uint,
) -> R<()> {
    let rt = bound()?;
    // SAFETY: null or the program's descriptor.
    let desc =
        unsafe { desc.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null desc"))?;
    let (format, channels) = driver_format(desc)?;
    let d = Array3DDescriptor {
        width: extent.x,
        height: extent.y,
        depth: extent.z,
        format,
        channels,
        flags,
    };
    cu!(
        rt.d,
        cuArray3DCreate_v2(a, (&d as *const Array3DDescriptor).cast())
    )
}

rt! {
    /// `cudaMallocArray`: a 1-D (height 0) or 2-D array.
    fn cudaMallocArray(a: *mut Handle, desc: *const ChannelFormatDesc, width: usize, height: usize, flags: c_uint) {
        // SAFETY: the program's arguments.
        unsafe { malloc_array(a, desc, Size3 { x: width, y: height, z: 0 }, flags) }
    }
}
rt! {
    /// `cudaMalloc3DArray`.
    fn cudaMalloc3DArray(a: *mut Handle, desc: *const ChannelFormatDesc, extent: Size3, flags: c_uint) {
        // SAFETY: the program's arguments.
        unsafe { malloc_array(a, desc, extent, flags) }
    }
}
rt! {
    /// `cudaFreeArray` (null does nothing).
    fn cudaFreeArray(a: Handle) {
        if a.is_null() {
            return Ok(());
        }
        let rt = bound()?;
        cu!(rt.d, cuArrayDestroy(a))
    }
}

/// The driver's descriptor of array `a`.
fn array_desc(a: Handle) -> R<Array3DDescriptor> {
    let rt = bound()?;
    let mut d = Array3DDescriptor::default();
    cu!(
        rt.d,
        cuArray3DGetDescriptor_v2((&mut d as *mut Array3DDescriptor).cast(), a)
    )?;
    Ok(d)
}

rt! {
    /// `cudaArrayGetInfo`.
    fn cudaArrayGetInfo(desc: *mut ChannelFormatDesc, extent: *mut Size3, flags: *mut c_uint, a: Handle) {
        let d = array_desc(a)?;
        // SAFETY: each pointer is optional; written only when non-null.
        unsafe {
            if !desc.is_null() {
                out(desc, channel_desc(d.format, d.channels))?;
            }
            if !extent.is_null() {
                out(extent, Size3 { x: d.width, y: d.height, z: d.depth })?;
            }
            if !flags.is_null() {
                out(flags, d.flags)?;
            }
        }
        Ok(())
    }
}
rt! {
    /// `cudaGetChannelDesc`.
    fn cudaGetChannelDesc(desc: *mut ChannelFormatDesc, a: Handle) {
        let d = array_desc(a)?;
        // SAFETY: `out` refuses null.
        unsafe { out(desc, channel_desc(d.format, d.channels)) }
    }
}

/// Bytes of one texel of array `a`.
fn texel_bytes(a: Handle) -> R<usize> {
    let d = array_desc(a)?;
    let per = match d.format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        _ => 4,
    };
    Ok(per * d.channels as usize)
}

/// A 2-D copy to (`to_array`) or from an array, `x` bytes and `y` rows into it; the
/// other side `mem` with its pitch, as `kind` says.
#[allow(clippy::too_many_arguments)]
fn copy_2d_array(
    to_array: bool,
    a: Handle,
    x: usize,
    y: usize,
    mem: usize,
    pitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: Option<Handle>,
) -> R<()> {
    let rt = bound()?;
    // CUmemorytype of the linear side: host 1, device 2, unified 4.
    let linear = match (kind, to_array) {
        (DEFAULT, _) => 4,
        (HOST_TO_DEVICE, true) | (DEVICE_TO_HOST, false) => 1,
        (DEVICE_TO_DEVICE, _) => 2,
        (HOST_TO_HOST, _) | (HOST_TO_DEVICE, false) | (DEVICE_TO_HOST, true) => {
            return Err(Fail::new(
                cudaErrorInvalidMemcpyDirection,
                format!(
                    "cudaMemcpyKind {kind} with an array on the {} side",
                    if to_array { "destination" } else { "source" }
                ),
            ))
        }
        (k, _) => {
            return Err(Fail::new(
                cudaErrorInvalidMemcpyDirection,
                format!("cudaMemcpyKind {k}"),
            ))
        }
    };
    let mut c = DriverMemcpy3D {
        width,
        height,
        depth: 1,
        ..DriverMemcpy3D::default()
    };
    if to_array {
        (c.dst_type, c.dst_array, c.dst_x, c.dst_y) = (3, a as usize, x, y);
        (
            c.src_type,
            c.src_host,
            c.src_device,
            c.src_pitch,
            c.src_height,
        ) = (linear, mem, mem as CUdeviceptr, pitch, height);
    } else {
        (c.src_type, c.src_array, c.src_x, c.src_y) = (3, a as usize, x, y);
        (
            c.dst_type,
            c.dst_host,
            c.dst_device,
            c.dst_pitch,
            c.dst_height,
        ) = (linear, mem, mem as CUdeviceptr, pitch, height);
    }
    let p = (&c as *const DriverMemcpy3D).cast();
    match stream {
        None => cu!(rt.d, cuMemcpy3D_v2(p)),
        Some(s) => cu!(rt.d, cuMemcpy3DAsync_v2(p, s)),
    }
}

rt! {
    /// `cudaMemcpy2DToArray`.
    fn cudaMemcpy2DToArray(a: Handle, x: usize, y: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int) {
        copy_2d_array(true, a, x, y, src as usize, spitch, width, height, kind, None)
    }
}
rt! {
    /// `cudaMemcpy2DToArrayAsync`.
    fn cudaMemcpy2DToArrayAsync(a: Handle, x: usize, y: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, s: Handle) {
        copy_2d_array(true, a, x, y, src as usize, spitch, width, height, kind, Some(s))
    }
}
rt! {
    /// `cudaMemcpy2DFromArray`.
    fn cudaMemcpy2DFromArray(dst: *mut c_void, dpitch: usize, a: Handle, x: usize, y: usize, width: usize, height: usize, kind: c_int) {
        copy_2d_array(false, a, x, y, dst as usize, dpitch, width, height, kind, None)
    }
}
rt! {
    /// `cudaMemcpy2DFromArrayAsync`.
    fn cudaMemcpy2DFromArrayAsync(dst: *mut c_void, dpitch: usize, a: Handle, x: usize, y: usize, width: usize, height: usize, kind: c_int, s: Handle) {
        copy_2d_array(false, a, x, y, dst as usize, dpitch, width, height, kind, Some(s))
    }
}

/// `cudaMemcpyToArray`/`FromArray` (deprecated): `count` bytes from row `y`, byte `x`
/// on, the array's rows taken one after another.
#[allow(clippy::too_many_arguments)]
fn copy_1d_array(
    to_array: bool,
    a: Handle,
    x: usize,
    y: usize,
    mem: usize,
    count: usize,
    kind: c_int,
    stream: Option<Handle>,
) -> R<()> {
    let d = array_desc(a)?;
    let row = d.width * texel_bytes(a)?;
    let offset = y
        .checked_mul(row)
        .and_then(|o| o.checked_add(x))
        .ok_or_else(|| Fail::new(cudaErrorInvalidValue, "offset"))?;
    // As one row of `count` bytes at `offset` of an array seen as a single row.
    let rt = bound()?;
    let kind = match kind {
        DEFAULT if to_array => {
            if super::is_device(rt, mem as *const c_void) {
                DEVICE_TO_DEVICE
            } else {
                HOST_TO_DEVICE
            }
        }
        DEFAULT => {
            if super::is_device(rt, mem as *const c_void) {
                DEVICE_TO_DEVICE
            } else {
                DEVICE_TO_HOST
            }
        }
        k => k,
    };
    match (to_array, kind, stream) {
        (true, HOST_TO_DEVICE, None) => cu!(
            rt.d,
            cuMemcpyHtoA_v2(a, offset, mem as *const c_void, count)
        ),
        (true, HOST_TO_DEVICE, Some(s)) => cu!(
            rt.d,
            cuMemcpyHtoAAsync_v2(a, offset, mem as *const c_void, count, s)
        ),
        (true, DEVICE_TO_DEVICE, _) => {
            cu!(rt.d, cuMemcpyDtoA_v2(a, offset, mem as CUdeviceptr, count))
        }
        (false, DEVICE_TO_HOST, None) => {
            cu!(rt.d, cuMemcpyAtoH_v2(mem as *mut c_void, a, offset, count))
        }
        (false, DEVICE_TO_HOST, Some(s)) => cu!(
            rt.d,
            cuMemcpyAtoHAsync_v2(mem as *mut c_void, a, offset, count, s)
        ),
        (false, DEVICE_TO_DEVICE, _) => {
            cu!(rt.d, cuMemcpyAtoD_v2(mem as CUdeviceptr, a, offset, count))
        }
        (_, k, _) => Err(Fail::new(
            cudaErrorInvalidMemcpyDirection,
            format!(
                "cudaMemcpyKind {k} with an array on the {} side",
                if to_array { "destination" } else { "source" }
            ),
        )),
    }
}

rt! {
    /// `cudaMemcpyToArray`.
    fn cudaMemcpyToArray(a: Handle, x: usize, y: usize, src: *const c_void, count: usize, kind: c_int) {
        copy_1d_array(true, a, x, y, src as usize, count, kind, None)
    }
}
rt! {
    /// `cudaMemcpyToArrayAsync`.
    fn cudaMemcpyToArrayAsync(a: Handle, x: usize, y: usize, src: *const c_void, count: usize, kind: c_int, s: Handle) {
        copy_1d_array(true, a, x, y, src as usize, count, kind, Some(s))
    }
}
rt! {
    /// `cudaMemcpyFromArray`.
    fn cudaMemcpyFromArray(dst: *mut c_void, a: Handle, x: usize, y: usize, count: usize, kind: c_int) {
        copy_1d_array(false, a, x, y, dst as usize, count, kind, None)
    }
}
rt! {
    /// `cudaMemcpyFromArrayAsync`.
    fn cudaMemcpyFromArrayAsync(dst: *mut c_void, a: Handle, x: usize, y: usize, count: usize, kind: c_int, s: Handle) {
        copy_1d_array(false, a, x, y, dst as usize, count, kind, Some(s))
    }
}

/// The start of `struct cudaResourceDesc` both sonames share: the type, then the
/// union's first 56 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceDesc {
    res_type: c_int,
    res: [u64; 7],
}

/// The driver's resource descriptor of the runtime's.
///
/// # Safety
/// `r` is null or the program's `struct cudaResourceDesc`.
unsafe fn driver_resource(r: *const ResourceDesc) -> R<DriverResourceDesc> {
    // SAFETY: null or the program's descriptor; only the shared start is read.
    let r =
        unsafe { r.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pResDesc"))?;
    let mut d = DriverResourceDesc {
        res_type: r.res_type as c_uint,
        res: [0; 16],
        flags: 0,
    };
    // `struct cudaChannelFormatDesc` (20 bytes) at union offset 8 of linear and pitch2D.
    let channel = |w: &[u64]| -> ChannelFormatDesc {
        let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let i = |k: usize| c_int::from_le_bytes(b[4 * k..4 * k + 4].try_into().expect("4 bytes"));
        ChannelFormatDesc {
            x: i(0),
            y: i(1),
            z: i(2),
            w: i(3),
            f: i(4),
        }
    };
    match r.res_type {
        // Array: the handle.
        0 => d.res[0] = r.res[0],
        // Linear: devPtr, format|channels, size.
        2 => {
            let (f, c) = driver_format(&channel(&r.res[1..4]))?;
            d.res[0] = r.res[0];
            d.res[1] = u64::from(f) | u64::from(c) << 32;
            d.res[2] = r.res[4];
        }
        // Pitch 2-D: devPtr, format|channels, width, height, pitch.
        3 => {
            let (f, c) = driver_format(&channel(&r.res[1..4]))?;
            d.res[0] = r.res[0];
            d.res[1] = u64::from(f) | u64::from(c) << 32;
            d.res[2] = r.res[4];
            d.res[3] = r.res[5];
            d.res[4] = r.res[6];
        }
        1 => {
            return Err(Fail::new(
                cudaErrorNotSupported,
                "mipmapped arrays are not supported",
            ))
        }
        t => {
            return Err(Fail::new(
                cudaErrorInvalidValue,
                format!("resource type {t}"),
            ))
        }
    }
    Ok(d)
}

/// `struct cudaTextureDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TextureDesc {
    address: [c_int; 3],
    filter: c_int,
    read_mode: c_int,
    srgb: c_int,
    border: [f32; 4],
    normalized: c_int,
    max_anisotropy: c_uint,
    mipmap_filter: c_int,
    mipmap_bias: f32,
    min_mipmap_clamp: f32,
    max_mipmap_clamp: f32,
    disable_trilinear: c_int,
    seamless_cubemap: c_int,
}

rt! {
    /// `cudaCreateTextureObject` (resource views: `cudaErrorNotSupported`).
    fn cudaCreateTextureObject(o: *mut u64, res: *const ResourceDesc, tex: *const TextureDesc, view: *const c_void) {
        let rt = bound()?;
        if !view.is_null() {
            return Err(Fail::new(cudaErrorNotSupported, "resource view descriptors are not supported"));
        }
        // SAFETY: the program's descriptor.
        let r = unsafe { driver_resource(res) }?;
        // SAFETY: null or the program's descriptor.
        let t = unsafe { tex.as_ref() }.ok_or_else(|| Fail::new(cudaErrorInvalidValue, "null pTexDesc"))?;
        // CU_TRSF_READ_AS_INTEGER (element type), CU_TRSF_NORMALIZED_COORDINATES,
        // CU_TRSF_SRGB.
        let flags = u32::from(t.read_mode == 0)
            | u32::from(t.normalized != 0) << 1
            | u32::from(t.srgb != 0) << 4;
        let d = DriverTextureDesc {
            address: t.address.map(|a| a as c_uint),
            filter: t.filter as c_uint,
            flags,
            max_anisotropy: t.max_anisotropy,
            mipmap_filter: t.mipmap_filter as c_uint,
            mipmap_bias: t.mipmap_bias,
            min_mipmap_clamp: t.min_mipmap_clamp,
            max_mipmap_clamp: t.max_mipmap_clamp,
            border: t.border,
            reserved: [0; 12],
        };
        cu!(rt.d, cuTexObjectCreate(o, (&r as *const DriverResourceDesc).cast(), (&d as *const DriverTextureDesc).cast(), std::ptr::null()))
    }
}
rt! {
    /// `cudaDestroyTextureObject` (0 does nothing).
    fn cudaDestroyTextureObject(o: u64) {
        if o == 0 {
            return Ok(());
        }
        let rt = bound()?;
        cu!(rt.d, cuTexObjectDestroy(o))
    }
}
rt! {
    /// `cudaCreateSurfaceObject`.
    fn cudaCreateSurfaceObject(o: *mut u64, res: *const ResourceDesc) {
        let rt = bound()?;
        // SAFETY: the program's descriptor.
        let r = unsafe { driver_resource(res) }?;
        cu!(rt.d, cuSurfObjectCreate(o, (&r as *const DriverResourceDesc).cast()))
    }
}
rt! {
    /// `cudaDestroySurfaceObject` (0 does nothing).
    fn cudaDestroySurfaceObject(o: u64) {
        if o == 0 {
            return Ok(());
        }
        let rt = bound()?;
        cu!(rt.d, cuSurfObjectDestroy(o))
    }
}

/// A `cudaMemcpy3DParms` side that is an array: positions and widths in elements
/// there, in bytes for the driver.
pub(super) fn array_extent_bytes(p: &Memcpy3DParms) -> R<(usize, usize, usize)> {
    let elem = if !p.src_array.is_null() {
        texel_bytes(p.src_array)?
    } else if !p.dst_array.is_null() {
        texel_bytes(p.dst_array)?
    } else {
        1
    };
    let src_x = if p.src_array.is_null() {
        p.src_pos.x
    } else {
        p.src_pos.x * elem
    };
    let dst_x = if p.dst_array.is_null() {
        p.dst_pos.x
    } else {
        p.dst_pos.x * elem
    };
    Ok((src_x, dst_x, p.extent.x * elem))
}
