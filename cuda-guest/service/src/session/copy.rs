//! Copies (`0x042.`): between the current context's device memory and inline data or
//! guest memory (scatter-gather lists, resolved through `vm-memory`), and within the
//! device. Asynchronous inline host-to-device copies keep their bytes (staged) until
//! their stream is synchronised.

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::{failed, invalid, norm, sg_total, Done, Outcome, Session};
use vmgpu_cuda_api::{Backend, DevicePtr, HostRegisterFlags, Stream};
use vmgpu_cuda_proto::{Features, HostDest, HostSource, ReplyBody, SgEntry, Status, StreamId};

/// Inline bytes of asynchronous host-to-device copies kept for the device (all the
/// session's contexts) before the session waits for their streams (the copies read
/// them when the stream reaches them).
const STAGING_CAP: usize = 64 << 20;

impl Session {
    /// `MemcpyHtoD` and `MemcpyHtoDAsync`.
    pub(super) fn memcpy_htod(
        &mut self,
        cx: u64,
        dst: DevicePtr,
        src: HostSource,
        stream: Option<StreamId>,
        lent: &[u8],
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        let be = self.backend()?;
        match src {
            HostSource::Inline(data) => {
                let data: &[u8] = if data.is_empty() { lent } else { &data };
                self.check_range(cx, dst, data.len() as u64, "destination")?;
                if data.is_empty() {
                    // Nothing to copy; a made-up stream is still refused.
                    if let Some(s) = stream {
                        self.stream(cx, s)?;
                    }
                    return Ok(ReplyBody::Empty);
                }
                match stream {
                    None => {
                        // SAFETY: the range lies inside a live allocation of the context.
                        unsafe { be.memcpy_htod(DevicePtr(dst.0), data)? }
                    }
                    Some(s) => {
                        if self.staged_bytes + data.len() > STAGING_CAP {
                            self.drain_staged(cx, &*be, data.len())?;
                        }
                        let Some(c) = self.contexts.get_mut(cx) else {
                            return Err(failed(Status::ERROR_INVALID_CONTEXT, "no context"));
                        };
                        let st = if s.0 <= 2 {
                            &Stream::DEFAULT
                        } else {
                            Self::found(&self.streams, "stream", s.0, cx)?
                        };
                        let copy = data.to_vec();
                        // SAFETY: the range lies inside a live allocation of the context;
                        // `copy` is kept in its `staged` (its heap buffer does not move)
                        // until the stream or the context has been synchronised (or the
                        // context torn down, which waits for its work first).
                        unsafe {
                            be.memcpy_htod_async(DevicePtr(dst.0), copy.as_ptr(), copy.len(), st)?
                        };
                        c.staged_bytes += copy.len();
                        self.staged_bytes += copy.len();
                        c.staged.push_back((norm(s), copy));
                    }
                }
                Ok(ReplyBody::Empty)
            }
            HostSource::Guest(entries) => {
                let total = sg_total(&entries)?;
                self.check_range(cx, dst, total, "destination")?;
                let pieces = self.resolve_sg(cx, &entries, mem)?;
                let st = match stream {
                    None => &Stream::DEFAULT,
                    Some(s) => self.stream(cx, s)?,
                };
                let mut off = 0u64;
                for (ptr, len) in pieces {
                    // SAFETY: the device range lies inside a live allocation (checked
                    // above); `ptr..ptr+len` is mapped guest RAM that the session keeps
                    // mapped (its clone of the guest memory) until its context is torn
                    // down, which waits for the copy; the guest is not to change it
                    // before synchronising (protocol, section 6).
                    unsafe {
                        be.memcpy_htod_async(DevicePtr(dst.0 + off), ptr as *const u8, len, st)?
                    };
                    off += len as u64;
                }
                if stream.is_none() {
                    be.stream_synchronize(&Stream::DEFAULT)?;
                }
                Ok(ReplyBody::Empty)
            }
        }
    }

    /// `MemcpyDtoH` and `MemcpyDtoHAsync` (whose reply waits for its stream: it
    /// carries the data).
    pub(super) fn memcpy_dtoh(
        &mut self,
        cx: u64,
        src: DevicePtr,
        bytes: u64,
        dst: HostDest,
        stream: Option<StreamId>,
        mem: Option<&GuestMemoryMmap>,
    ) -> Done {
        let be = self.backend()?;
        self.check_range(cx, src, bytes, "source")?;
        let n = usize::try_from(bytes).map_err(|_| invalid("size"))?;
        match dst {
            HostDest::Inline => {
                if bytes > u64::from(self.limits.max_inline) {
                    return Err(invalid("more than max_inline bytes"));
                }
                // Written whole by the copy below (dropped if it fails).
                let mut out = self.data_buffer(n);
                if n > 0 {
                    match stream {
                        None => {
                            // SAFETY: the range lies inside a live allocation.
                            unsafe { be.memcpy_dtoh(&mut out, DevicePtr(src.0))? }
                        }
                        Some(s) => {
                            let st = self.stream(cx, s)?;
                            // SAFETY: the device range lies inside a live allocation;
                            // `out` is written by nothing else and outlives the copy (the
                            // stream is synchronised before it is read).
                            unsafe {
                                be.memcpy_dtoh_async(out.as_mut_ptr(), DevicePtr(src.0), n, st)?
                            };
                            be.stream_synchronize(st)?;
                        }
                    }
                }
                Ok(ReplyBody::Data(out))
            }
            HostDest::Guest(entries) => {
                let total = sg_total(&entries)?;
                if total != bytes {
                    return Err(invalid("the entries do not add up to the size"));
                }
                let pieces = self.resolve_sg(cx, &entries, mem)?;
                let st = match stream {
                    None => &Stream::DEFAULT,
                    Some(s) => self.stream(cx, s)?,
                };
                let mut off = 0u64;
                for (ptr, len) in pieces {
                    // SAFETY: the device range lies inside a live allocation; the host
                    // piece is mapped guest RAM kept mapped by the session; guest memory
                    // is not a Rust object, and the guest does not use the buffer before
                    // the reply (the stream is synchronised below).
                    unsafe {
                        be.memcpy_dtoh_async(ptr as *mut u8, DevicePtr(src.0 + off), len, st)?
                    };
                    off += len as u64;
                }
                be.stream_synchronize(st)?;
                Ok(ReplyBody::Data(Vec::new()))
            }
        }
    }

    /// `MemcpyDtoD` and `MemcpyDtoDAsync`, both ranges in the current context.
    pub(super) fn memcpy_dtod(
        &mut self,
        cx: u64,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: Option<StreamId>,
    ) -> Done {
        self.check_range(cx, dst, bytes, "destination")?;
        self.check_range(cx, src, bytes, "source")?;
        let n = usize::try_from(bytes).map_err(|_| invalid("size"))?;
        let be = self.backend()?;
        match stream {
            None => {
                // SAFETY: both ranges lie inside live device allocations of the context
                // (checked above).
                unsafe { be.memcpy_dtod(DevicePtr(dst.0), DevicePtr(src.0), n)? }
            }
            Some(s) => {
                let st = self.stream(cx, s)?;
                // SAFETY: as above.
                unsafe { be.memcpy_dtod_async(DevicePtr(dst.0), DevicePtr(src.0), n, st)? }
            }
        }
        Ok(ReplyBody::Empty)
    }

    /// Makes room for `more` staged bytes: waits for the current context `cx` (an
    /// error of it is the request's), then, if that is not enough, for the session's
    /// other contexts that hold staged bytes (their errors are found by their own next
    /// synchronisation).
    fn drain_staged(&mut self, cx: u64, be: &dyn Backend, more: usize) -> Result<(), Outcome> {
        be.context_synchronize()?;
        self.release_staged(cx);
        if self.staged_bytes + more <= STAGING_CAP {
            return Ok(());
        }
        let others: Vec<u64> = self
            .contexts
            .iter()
            .filter(|(h, c)| *h != cx && c.staged_bytes > 0 && c.live.is_some())
            .map(|(h, _)| h)
            .collect();
        for h in others {
            if self.bind(h).is_ok() {
                let _ = be.context_synchronize();
                self.release_staged(h);
            }
        }
        self.bind(cx)
    }

    /// Drops the staged bytes of context `h` (its work was waited for).
    fn release_staged(&mut self, h: u64) {
        if let Some(c) = self.contexts.get_mut(h) {
            self.staged_bytes -= c.staged_bytes;
            c.staged_bytes = 0;
            c.staged.clear();
        }
    }

    /// Guest memory for a copy: `SCATTER_GATHER` granted, memory given, and each entry
    /// inside it. Returns host pieces (address, length) in order.
    fn resolve_sg(
        &mut self,
        cx: u64,
        entries: &[SgEntry],
        mem: Option<&GuestMemoryMmap>,
    ) -> Result<Vec<(usize, usize)>, Outcome> {
        if !self.features.contains(Features::SCATTER_GATHER) {
            return Err(failed(
                Status::ERROR_NOT_SUPPORTED,
                "guest memory copies need the SCATTER_GATHER feature (not on socket transports)",
            ));
        }
        let Some(mem) = mem else {
            return Err(failed(
                Status::ERROR_NOT_SUPPORTED,
                "this transport does not reach guest memory",
            ));
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let len = usize::try_from(e.len).map_err(|_| invalid("entry length"))?;
            for piece in GuestMemoryBackend::get_slices(mem, GuestAddress(e.gpa), len) {
                let s = piece.map_err(|err| {
                    invalid(format!(
                        "guest {}: guest memory {:#x}..+{:#x} is not all guest RAM: {err}",
                        self.guest, e.gpa, e.len
                    ))
                })?;
                out.push((s.ptr_guard().as_ptr() as usize, s.len()));
            }
        }
        // Keep the mapping alive while asynchronous copies may read or write it.
        self.guest_mem = Some(mem.clone());
        self.register_guest_memory(cx, mem);
        Ok(out)
    }

    /// Registers the guest's RAM with the driver once per context (`cuMemHostRegister`:
    /// copies from it run at pinned speed, without staging). Not portable: only that
    /// context knows it (with unified addressing its kernels could reach it, which is
    /// the guest's own RAM). A failure is not an error (the copies work from pageable
    /// memory too).
    fn register_guest_memory(&mut self, cx: u64, mem: &GuestMemoryMmap) {
        if self.on_simulator() {
            // The simulator copies from host memory directly; registering would only
            // be bookkeeping.
            return;
        }
        let Some(be) = self.backend.clone() else {
            return;
        };
        let Some(live) = self.contexts.get_mut(cx).and_then(|c| c.live.as_mut()) else {
            return;
        };
        if !live.registered.is_empty() {
            return;
        }
        for region in mem.iter() {
            let Ok(slice) = vm_memory::GuestMemoryRegion::get_slice(
                region,
                vm_memory::MemoryRegionAddress(0),
                vm_memory::GuestMemoryRegion::len(region) as usize,
            ) else {
                continue;
            };
            let (ptr, len) = (slice.ptr_guard_mut().as_ptr(), slice.len());
            // SAFETY: the region is mapped guest RAM, and the session keeps a clone of
            // the guest memory (its regions' mappings) until the session ends, after its
            // contexts were torn down, where the range is unregistered first.
            match unsafe { be.host_register(ptr, len, HostRegisterFlags::default()) } {
                Ok(()) => live.registered.push((ptr as usize, len)),
                Err(e) => log::debug!("guest {}: registering guest memory: {e}", self.guest),
            }
        }
    }
}
