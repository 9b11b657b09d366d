//! Device buffers with typed views, pinned and registered host memory.

use std::marker::PhantomData;
use std::ops::{Bound, Deref, DerefMut, RangeBounds};

use super::{Gpu, GpuStream};
use crate::driver::{DevicePtr, DriverError, HostAlloc, HostRegisterFlags, Result};

/// What a [`DeviceData`] type is as a kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScalarKind {
    /// An integer (signed or not).
    Int,
    /// A floating-point number.
    Float,
    /// Anything else (bytes of a by-value struct).
    Other,
}

/// Plain data that can live in device memory and be copied byte for byte.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes is a valid value of the type, and the
/// type has no padding bytes (so a value can be viewed as initialised bytes).
pub unsafe trait DeviceData: Copy + Send + Sync + 'static {
    /// What the type is as a kernel argument.
    const KIND: ScalarKind;
    /// Its name in messages.
    const NAME: &'static str;
}

macro_rules! device_data {
    ($($t:ty => $k:ident),* $(,)?) => {$(
        // SAFETY: a primitive number: every bit pattern is a value, no padding.
        unsafe impl DeviceData for $t {
            const KIND: ScalarKind = ScalarKind::$k;
            const NAME: &'static str = stringify!($t);
        }
    )*};
}
device_data!(u8 => Int, i8 => Int, u16 => Int, i16 => Int, u32 => Int, i32 => Int,
             u64 => Int, i64 => Int, f32 => Float, f64 => Float);

// SAFETY: an array of `DeviceData` has no padding between elements and every bit
// pattern of each element is valid.
unsafe impl<T: DeviceData, const N: usize> DeviceData for [T; N] {
    const KIND: ScalarKind = ScalarKind::Other;
    const NAME: &'static str = "array";
}

/// The bytes of a slice of plain data.
pub fn as_bytes<T: DeviceData>(v: &[T]) -> &[u8] {
    // SAFETY: `T: DeviceData` has no padding, so all `size_of_val(v)` bytes are
    // initialised; the borrow keeps them alive and unchanged.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// The bytes of a slice of plain data, writable.
pub fn as_bytes_mut<T: DeviceData>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`, and every bit pattern written through the bytes is a
    // valid `T`; the exclusive borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

fn check_len(operation: &'static str, want: usize, got: usize) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(DriverError::InvalidArgument {
            operation,
            reason: format!("lengths differ: {want} elements on the device, {got} given"),
        })
    }
}

fn range_of(len: usize, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start <= end && end <= len {
        Ok((start, end))
    } else {
        Err(DriverError::InvalidArgument {
            operation: "DeviceBuffer::slice",
            reason: format!("range {start}..{end} is outside 0..{len}"),
        })
    }
}

/// Device memory holding `len` values of `T`, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer<T: DeviceData = u8> {
    pub(super) gpu: Gpu,
    pub(super) ptr: DevicePtr,
    pub(super) len: usize,
    pub(super) generation: u64,
    pub(super) _t: PhantomData<T>,
}

/// A read-only view of part of a [`DeviceBuffer`].
#[derive(Debug, Clone, Copy)]
pub struct DeviceSlice<'a, T: DeviceData> {
    gpu: &'a Gpu,
    ptr: DevicePtr,
    len: usize,
    generation: u64,
    _t: PhantomData<&'a T>,
}

/// A writable view of part of a [`DeviceBuffer`].
#[derive(Debug)]
pub struct DeviceSliceMut<'a, T: DeviceData> {
    gpu: &'a Gpu,
    ptr: DevicePtr,
    len: usize,
    generation: u64,
    _t: PhantomData<&'a mut T>,
}

impl<T: DeviceData> DeviceBuffer<T> {
    /// Its device address (for raw kernel arguments).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Its length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }
    /// The whole buffer as a view.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            gpu: &self.gpu,
            ptr: self.ptr,
            len: self.len,
            generation: self.generation,
            _t: PhantomData,
        }
    }
    /// The whole buffer as a writable view.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            gpu: &self.gpu,
            ptr: self.ptr,
            len: self.len,
            generation: self.generation,
            _t: PhantomData,
        }
    }
    /// Elements `range` as a view (an error when out of range).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>> {
        let (s, e) = range_of(self.len, range)?;
        Ok(DeviceSlice {
            gpu: &self.gpu,
            ptr: self.ptr.offset((s * std::mem::size_of::<T>()) as u64),
            len: e - s,
            generation: self.generation,
            _t: PhantomData,
        })
    }
    /// Elements `range` as a writable view (an error when out of range).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_, T>> {
        let (s, e) = range_of(self.len, range)?;
        Ok(DeviceSliceMut {
            gpu: &self.gpu,
            ptr: self.ptr.offset((s * std::mem::size_of::<T>()) as u64),
            len: e - s,
            generation: self.generation,
            _t: PhantomData,
        })
    }
    /// Copies `src` (exactly its length) into the buffer.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.as_mut_slice().copy_from_host(src)
    }
    /// Copies the buffer into `dst` (exactly its length).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }
    /// The buffer's values.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_vec()
    }
    /// Copies `src` (same length) into the buffer on the device (ordered on the legacy
    /// default stream; the host does not wait).
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.as_mut_slice().copy_from_device(&src.as_slice())
    }
    /// Copies `src` (same length) into the buffer on the device, ordered on `stream`.
    pub fn copy_from_device_async(
        &mut self,
        src: &DeviceBuffer<T>,
        stream: &GpuStream,
    ) -> Result<()> {
        self.as_mut_slice()
            .copy_from_device_async(&src.as_slice(), stream)
    }
    /// Sets every byte to `value`.
    pub fn memset(&mut self, value: u8) -> Result<()> {
        self.as_mut_slice().memset(value)
    }
}

impl<T: DeviceData> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.gpu.generation() != self.generation || self.gpu.bind().is_err() {
            return;
        }
        if let Err(e) = self.gpu.backend().mem_free(self.ptr) {
            log::warn!("freeing device buffer {:#x}: {e}", self.ptr.0);
        }
    }
}

impl<'a, T: DeviceData> DeviceSlice<'a, T> {
    /// Its device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Copies the view into `dst` (exactly its length).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_len("DeviceSlice::copy_to_host", self.len, dst.len())?;
        self.gpu.enter(self.generation)?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is live device memory of the buffer this view borrows.
        unsafe { self.gpu.backend().memcpy_dtoh(as_bytes_mut(dst), self.ptr) }
    }
    /// The view's values.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // SAFETY: every bit pattern, all zeros included, is a valid `T: DeviceData`.
        let zero: T = unsafe { std::mem::zeroed() };
        let mut v = vec![zero; self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
    /// Elements `range` of the view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>> {
        let (s, e) = range_of(self.len, range)?;
        Ok(DeviceSlice {
            ptr: self.ptr.offset((s * std::mem::size_of::<T>()) as u64),
            len: e - s,
            ..*self
        })
    }
}

impl<'a, T: DeviceData> DeviceSliceMut<'a, T> {
    /// Its device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Its length in elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// A read-only view of the same elements.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            gpu: self.gpu,
            ptr: self.ptr,
            len: self.len,
            generation: self.generation,
            _t: PhantomData,
        }
    }
    /// Copies `src` (exactly its length) into the view.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_len("DeviceSliceMut::copy_from_host", self.len, src.len())?;
        self.gpu.enter(self.generation)?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is live device memory of the buffer this view borrows.
        unsafe { self.gpu.backend().memcpy_htod(self.ptr, as_bytes(src)) }
    }
    /// Copies device `src` (same length) into the view, ordered on the legacy default
    /// stream.
    pub fn copy_from_device(&mut self, src: &DeviceSlice<'_, T>) -> Result<()> {
        check_len("DeviceSliceMut::copy_from_device", self.len, src.len)?;
        self.gpu.enter(self.generation)?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are device memory of live buffers.
        unsafe {
            self.gpu
                .backend()
                .memcpy_dtod(self.ptr, src.ptr, self.byte_len())
        }
    }
    /// Copies device `src` (same length) into the view, ordered on `stream`.
    pub fn copy_from_device_async(
        &mut self,
        src: &DeviceSlice<'_, T>,
        stream: &GpuStream,
    ) -> Result<()> {
        check_len("DeviceSliceMut::copy_from_device_async", self.len, src.len)?;
        self.gpu.enter(self.generation)?;
        stream.check()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are device memory; device memory freed while the copy is
        // pending is a device-side fault, never a write to host memory.
        unsafe {
            self.gpu
                .backend()
                .memcpy_dtod_async(self.ptr, src.ptr, self.byte_len(), stream.raw())
        }
    }
    /// Sets every byte to `value`.
    pub fn memset(&mut self, value: u8) -> Result<()> {
        self.gpu.enter(self.generation)?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is live device memory of the borrowed buffer.
        unsafe {
            self.gpu
                .backend()
                .memset_d8(self.ptr, value, self.byte_len())
        }
    }
    /// Sets every byte to `value`, ordered on `stream`.
    pub fn memset_async(&mut self, value: u8, stream: &GpuStream) -> Result<()> {
        self.gpu.enter(self.generation)?;
        stream.check()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is device memory of the borrowed buffer.
        unsafe {
            self.gpu
                .backend()
                .memset_d8_async(self.ptr, value, self.byte_len(), stream.raw())
        }
    }
    /// Sets every 32-bit word to `value` (the view's start must be 4-byte aligned and
    /// its byte length a multiple of 4).
    pub fn memset_u32(&mut self, value: u32) -> Result<()> {
        if !self.byte_len().is_multiple_of(4) {
            return Err(DriverError::InvalidArgument {
                operation: "DeviceSliceMut::memset_u32",
                reason: format!("{} bytes is not a whole number of words", self.byte_len()),
            });
        }
        self.gpu.enter(self.generation)?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is live device memory of the borrowed buffer.
        unsafe {
            self.gpu
                .backend()
                .memset_d32(self.ptr, value, self.byte_len() / 4)
        }
    }
}

/// Host memory an asynchronous copy may own until the device has reached it: its bytes
/// stay where they are when the value is moved.
///
/// # Safety
/// `host_ptr` and `host_len` describe memory owned by the value, valid for reads and
/// writes, that does not move when the value is moved and that nothing else accesses
/// while the value is owned by a [`super::GpuFuture`].
pub unsafe trait HostMemory: Send + 'static {
    /// The start.
    fn host_ptr(&mut self) -> *mut u8;
    /// The length in bytes.
    fn host_len(&self) -> usize;
}

// SAFETY: a vector's heap buffer does not move when the vector does; its `len`
// elements are initialised plain data owned by it.
unsafe impl<T: DeviceData> HostMemory for Vec<T> {
    fn host_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr().cast()
    }
    fn host_len(&self) -> usize {
        std::mem::size_of_val(self.as_slice())
    }
}

// SAFETY: the pinned allocation is owned by the buffer and does not move with it.
unsafe impl HostMemory for PinnedBuffer {
    fn host_ptr(&mut self) -> *mut u8 {
        self.as_ptr()
    }
    fn host_len(&self) -> usize {
        self.len
    }
}

// SAFETY: the registered vector's heap buffer is owned by the value and does not move.
unsafe impl<T: DeviceData> HostMemory for RegisteredBuffer<T> {
    fn host_ptr(&mut self) -> *mut u8 {
        self.data.as_mut_ptr().cast()
    }
    fn host_len(&self) -> usize {
        std::mem::size_of_val(self.data.as_slice())
    }
}

/// Page-locked host memory that frees itself (plain host memory on the simulator).
#[derive(Debug)]
pub struct PinnedBuffer {
    pub(super) gpu: Gpu,
    pub(super) mem: Option<HostAlloc>,
    pub(super) len: usize,
}

impl PinnedBuffer {
    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.mem {
            // SAFETY: `mem` is at least `len` initialised bytes (zeroed at allocation),
            // alive while `self` is, and only written through `&mut self` (or by copies
            // that own `self`).
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr(), self.len) },
            None => &[],
        }
    }
    /// Its bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &self.mem {
            // SAFETY: as in `as_slice`, and `&mut self` makes the borrow exclusive.
            Some(m) => unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), self.len) },
            None => &mut [],
        }
    }
    /// Its start, for asynchronous copies.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.as_ptr())
    }
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Some(mem) = self.mem.take() {
            // SAFETY: the allocation came from this backend's host_alloc; asynchronous
            // copies into it own the buffer until the device has passed them (or are
            // issued through `unsafe` calls whose callers keep it alive), so nothing uses
            // it any more. A reset (which would free it on the driver) is refused while
            // any pinned buffer lives.
            if let Err(e) = unsafe { self.gpu.backend().host_free(mem) } {
                log::warn!("freeing pinned host memory: {e}");
            }
        }
        self.gpu.pinned_dropped();
    }
}

/// A host vector registered with the driver (`cuMemHostRegister`), so that copies from
/// and to it run at pinned speed; unregistered on drop or by [`RegisteredBuffer::into_vec`].
#[derive(Debug)]
pub struct RegisteredBuffer<T: DeviceData> {
    pub(super) gpu: Gpu,
    pub(super) data: Vec<T>,
    pub(super) registered: bool,
    pub(super) generation: u64,
}

impl<T: DeviceData> RegisteredBuffer<T> {
    pub(super) fn new(gpu: &Gpu, mut data: Vec<T>, flags: HostRegisterFlags) -> Result<Self> {
        let bytes = std::mem::size_of_val(data.as_slice());
        gpu.bind()?;
        // SAFETY: the range is the vector's initialised elements, owned by the value
        // returned, which never reallocates it and unregisters it before freeing it.
        unsafe {
            gpu.backend()
                .host_register(data.as_mut_ptr().cast(), bytes, flags)
        }?;
        Ok(RegisteredBuffer {
            gpu: gpu.clone(),
            data,
            registered: true,
            generation: gpu.generation(),
        })
    }

    fn unregister(&mut self) {
        if !std::mem::take(&mut self.registered)
            || self.gpu.generation() != self.generation
            || self.gpu.bind().is_err()
        {
            return;
        }
        // SAFETY: the range was registered by `new`; asynchronous copies own the buffer
        // until they are done, so none is pending.
        if let Err(e) = unsafe {
            self.gpu
                .backend()
                .host_unregister(self.data.as_mut_ptr().cast())
        } {
            log::warn!("unregistering host memory: {e}");
        }
    }

    /// Unregisters the memory and gives the vector back.
    pub fn into_vec(mut self) -> Vec<T> {
        self.unregister();
        std::mem::take(&mut self.data)
    }
}

impl<T: DeviceData> Deref for RegisteredBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: DeviceData> DerefMut for RegisteredBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T: DeviceData> Drop for RegisteredBuffer<T> {
    fn drop(&mut self) {
        self.unregister();
    }
}
