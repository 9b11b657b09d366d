//! A small safe layer over any [`Backend`]: a device with its primary context
//! ([`Gpu`]), device buffers that free themselves ([`DeviceBuffer`]), pinned host
//! buffers ([`PinnedBuffer`]), streams ([`GpuStream`]) and events ([`GpuEvent`]).
//! Every operation makes the device's context current on the calling thread first.

use std::sync::Arc;

use super::{
    Backend, Context, Device, DevicePtr, DriverError, Event, EventFlags, HostAlloc, HostAllocFlags,
    MemInfo, Result, Stream, StreamFlags,
};

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn Backend>,
    device: Device,
    ctx: Context,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(e) = self.backend.primary_context_release(self.ctx) {
            log::warn!("releasing the primary context of {:?}: {e}", self.device);
        }
    }
}

/// One device of a backend with its primary context retained. Cheap to clone; buffers,
/// streams and events keep it alive.
#[derive(Debug, Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

impl Gpu {
    /// Retains `device`'s primary context and makes it current on this thread.
    pub fn new(backend: Arc<dyn Backend>, device: Device) -> Result<Gpu> {
        let ctx = backend.primary_context_retain(device)?;
        let gpu = Gpu {
            inner: Arc::new(Inner {
                backend,
                device,
                ctx,
            }),
        };
        gpu.bind()?;
        Ok(gpu)
    }

    /// Makes the context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.inner.backend.context_set_current(&self.inner.ctx)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Waits for all work of the context; returns its sticky error, if any.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.inner.backend.context_synchronize()
    }

    /// Free and total device memory.
    pub fn mem_info(&self) -> Result<MemInfo> {
        self.bind()?;
        self.inner.backend.mem_get_info()
    }

    /// A device buffer of `len` bytes, zeroed.
    pub fn alloc_zeroed(&self, len: usize) -> Result<DeviceBuffer> {
        self.bind()?;
        let ptr = self.inner.backend.mem_alloc(len)?;
        let buf = DeviceBuffer {
            gpu: self.clone(),
            ptr,
            len,
        };
        if len > 0 {
            // SAFETY: `ptr..ptr+len` is device memory just allocated by this backend.
            unsafe { self.inner.backend.memset_d8(ptr, 0, len) }?;
        }
        Ok(buf)
    }

    /// A device buffer holding a copy of `data`.
    pub fn htod(&self, data: &[u8]) -> Result<DeviceBuffer> {
        self.bind()?;
        let ptr = self.inner.backend.mem_alloc(data.len())?;
        let buf = DeviceBuffer {
            gpu: self.clone(),
            ptr,
            len: data.len(),
        };
        if !data.is_empty() {
            // SAFETY: `ptr..ptr+len` is device memory just allocated by this backend.
            unsafe { self.inner.backend.memcpy_htod(ptr, data) }?;
        }
        Ok(buf)
    }

    /// A new stream.
    pub fn stream(&self, flags: StreamFlags) -> Result<GpuStream> {
        self.bind()?;
        let stream = self.inner.backend.stream_create(flags)?;
        Ok(GpuStream {
            gpu: self.clone(),
            stream: Some(stream),
        })
    }

    /// A new event.
    pub fn event(&self, flags: EventFlags) -> Result<GpuEvent> {
        self.bind()?;
        let event = self.inner.backend.event_create(flags)?;
        Ok(GpuEvent {
            gpu: self.clone(),
            event: Some(event),
        })
    }

    /// A zeroed, page-locked host buffer of `len` bytes.
    pub fn pinned(&self, len: usize, flags: HostAllocFlags) -> Result<PinnedBuffer> {
        self.bind()?;
        let mem = self.inner.backend.host_alloc(len.max(1), flags)?;
        // SAFETY: `mem` is `len.max(1)` writable bytes just allocated, used by nothing else.
        unsafe { std::ptr::write_bytes(mem.as_ptr(), 0, mem.len()) };
        Ok(PinnedBuffer {
            gpu: self.clone(),
            mem: Some(mem),
            len,
        })
    }
}

fn check_len(operation: &'static str, want: usize, got: usize) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(DriverError::InvalidArgument {
            operation,
            reason: format!("lengths differ: {want} bytes on the device, {got} given"),
        })
    }
}

/// Device memory that frees itself.
#[derive(Debug)]
pub struct DeviceBuffer {
    gpu: Gpu,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer {
    /// Its device address (for kernel arguments).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Its device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Copies `src` (exactly its length) into the buffer.
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<()> {
        check_len("DeviceBuffer::copy_from_host", self.len, src.len())?;
        self.gpu.bind()?;
        // SAFETY: the range is this buffer's own device memory.
        unsafe { self.gpu.backend().memcpy_htod(self.ptr, src) }
    }

    /// Copies the buffer into `dst` (exactly its length).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        check_len("DeviceBuffer::copy_to_host", self.len, dst.len())?;
        self.gpu.bind()?;
        // SAFETY: the range is this buffer's own device memory.
        unsafe { self.gpu.backend().memcpy_dtoh(dst, self.ptr) }
    }

    /// The buffer's bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies `src` (same length) into the buffer on the device.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer) -> Result<()> {
        check_len("DeviceBuffer::copy_from_device", self.len, src.len)?;
        self.gpu.bind()?;
        // SAFETY: both ranges are device memory of live buffers.
        unsafe { self.gpu.backend().memcpy_dtod(self.ptr, src.ptr, self.len) }
    }

    /// Copies `src` (same length) into the buffer on the device, ordered on `stream`.
    pub fn copy_from_device_async(&mut self, src: &DeviceBuffer, stream: &GpuStream) -> Result<()> {
        check_len("DeviceBuffer::copy_from_device_async", self.len, src.len)?;
        self.gpu.bind()?;
        // SAFETY: both ranges are device memory; device memory freed while the copy is
        // pending is a device-side fault, never a write to host memory.
        unsafe {
            self.gpu
                .backend()
                .memcpy_dtod_async(self.ptr, src.ptr, self.len, stream.raw())
        }
    }

    /// Sets every byte to `value`.
    pub fn memset(&mut self, value: u8) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: the range is this buffer's own device memory.
        unsafe { self.gpu.backend().memset_d8(self.ptr, value, self.len) }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            if let Err(e) = self.gpu.backend().mem_free(self.ptr) {
                log::warn!("freeing device buffer {:#x}: {e}", self.ptr.0);
            }
        }
    }
}

/// Page-locked host memory that frees itself.
#[derive(Debug)]
pub struct PinnedBuffer {
    gpu: Gpu,
    mem: Option<HostAlloc>,
    len: usize,
}

impl PinnedBuffer {
    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.mem {
            // SAFETY: `mem` is at least `len` initialised bytes (zeroed at allocation),
            // alive while `self` is, and only written through `&mut self`.
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
            // copies into it are only issued through `unsafe` calls whose callers keep it
            // alive until they complete, so nothing uses it any more.
            if let Err(e) = unsafe { self.gpu.backend().host_free(mem) } {
                log::warn!("freeing pinned host memory: {e}");
            }
        }
    }
}

/// A stream that destroys itself.
#[derive(Debug)]
pub struct GpuStream {
    gpu: Gpu,
    stream: Option<Stream>,
}

impl GpuStream {
    /// The backend's handle.
    pub fn raw(&self) -> &Stream {
        self.stream.as_ref().unwrap_or(&Stream::DEFAULT)
    }
    /// Waits for all its work; returns its first error.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu.bind()?;
        self.gpu.backend().stream_synchronize(self.raw())
    }
    /// Whether all its work is done.
    pub fn query(&self) -> Result<bool> {
        self.gpu.bind()?;
        self.gpu.backend().stream_query(self.raw())
    }
    /// Makes later work wait for `event`.
    pub fn wait(&self, event: &GpuEvent) -> Result<()> {
        self.gpu.bind()?;
        self.gpu
            .backend()
            .stream_wait_event(self.raw(), event.raw())
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            if self.gpu.bind().is_ok() {
                if let Err(e) = self.gpu.backend().stream_destroy(s) {
                    log::warn!("destroying a stream: {e}");
                }
            }
        }
    }
}

/// An event that destroys itself.
#[derive(Debug)]
pub struct GpuEvent {
    gpu: Gpu,
    event: Option<Event>,
}

impl GpuEvent {
    /// The backend's handle.
    pub fn raw(&self) -> &Event {
        // `event` is Some until drop.
        self.event.as_ref().unwrap_or(&NO_EVENT)
    }
    /// Records it on `stream`.
    pub fn record(&self, stream: &GpuStream) -> Result<()> {
        self.gpu.bind()?;
        self.gpu.backend().event_record(self.raw(), stream.raw())
    }
    /// Waits for its last record.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu.bind()?;
        self.gpu.backend().event_synchronize(self.raw())
    }
    /// Whether its last record has been reached.
    pub fn query(&self) -> Result<bool> {
        self.gpu.bind()?;
        self.gpu.backend().event_query(self.raw())
    }
    /// Milliseconds from `start`'s record to this one's.
    pub fn elapsed_since(&self, start: &GpuEvent) -> Result<f32> {
        self.gpu.bind()?;
        self.gpu.backend().event_elapsed_ms(start.raw(), self.raw())
    }
}

/// Stands in for a destroyed event (never reached: events are taken only in drop).
const NO_EVENT: Event = Event::from_raw(u32::MAX, 0);

impl Drop for GpuEvent {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            if self.gpu.bind().is_ok() {
                if let Err(e) = self.gpu.backend().event_destroy(e) {
                    log::warn!("destroying an event: {e}");
                }
            }
        }
    }
}
