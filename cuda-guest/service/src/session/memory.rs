//! Device memory (`0x040.`) and memsets (`0x041.`): allocations of the current
//! context, counted against the session's quota, and the range check of every copy
//! and memset.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::{failed, invalid, Done, Outcome, Session};
use vmgpu_cuda_api::DevicePtr;
use vmgpu_cuda_proto::{MemsetWidth, ReplyBody, Status, StreamId};

impl Session {
    /// `MemAlloc`, within the memory and object quotas.
    pub(super) fn mem_alloc(&mut self, cx: u64, bytes: u64) -> Done {
        if bytes == 0 {
            return Err(invalid("cuMemAlloc of 0 bytes"));
        }
        self.memory_quota(bytes, "an allocation")?;
        self.object_quota("device allocation")?;
        let n = usize::try_from(bytes).map_err(|_| failed(Status::ERROR_OUT_OF_MEMORY, "size"))?;
        let p = self.backend()?.mem_alloc(n)?;
        self.allocs.insert((cx, p.0), bytes);
        self.mem_used += bytes;
        self.inner
            .stats
            .device_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(ReplyBody::DevicePtr(DevicePtr(p.0)))
    }

    /// `MemFree` of the start of a live allocation of the current context.
    pub(super) fn mem_free(&mut self, cx: u64, ptr: DevicePtr) -> Done {
        let Some(size) = self.allocs.get(&(cx, ptr.0)).copied() else {
            return Err(invalid(format!(
                "{:#x} is not the start of a live allocation of this session's current context",
                ptr.0
            )));
        };
        self.backend()?.mem_free(DevicePtr(ptr.0))?;
        self.allocs.remove(&(cx, ptr.0));
        self.mem_used -= size;
        self.inner
            .stats
            .device_bytes
            .fetch_sub(size, Ordering::Relaxed);
        Ok(ReplyBody::Empty)
    }

    /// `MemGetInfo`: the quota (at most the device's memory) as the total, less what
    /// the session holds in all its contexts as free (at most what the device has free).
    pub(super) fn mem_get_info(&mut self) -> Done {
        let dev = self.backend()?.mem_get_info()?;
        let total = dev.total.min(self.quota.device_memory);
        let free = total.saturating_sub(self.mem_used).min(dev.free);
        Ok(ReplyBody::MemInfo { free, total })
    }

    /// `Memset` and `MemsetAsync` of 8, 16 or 32-bit elements.
    pub(super) fn memset(
        &mut self,
        cx: u64,
        dst: DevicePtr,
        value: u32,
        count: u64,
        width: MemsetWidth,
        stream: Option<StreamId>,
    ) -> Done {
        let bytes = count
            .checked_mul(width.bytes())
            .ok_or_else(|| invalid("memset size overflows"))?;
        if count == 0 {
            // Nothing to set; a made-up stream is still refused.
            if let Some(s) = stream {
                self.stream(cx, s)?;
            }
            return Ok(ReplyBody::Empty);
        }
        if !dst.0.is_multiple_of(width.bytes()) {
            return Err(invalid(format!(
                "{:#x} is not {}-byte aligned",
                dst.0,
                width.bytes()
            )));
        }
        self.check_range(cx, dst, bytes, "destination")?;
        let n = usize::try_from(count).map_err(|_| invalid("size"))?;
        let be = self.backend()?;
        let d = DevicePtr(dst.0);
        let st = match stream {
            None => None,
            Some(s) => Some(self.stream(cx, s)?),
        };
        // SAFETY: the range lies inside a live device allocation of the current context
        // (checked above).
        unsafe {
            match (st, width) {
                (None, MemsetWidth::W8) => be.memset_d8(d, value as u8, n)?,
                (None, MemsetWidth::W16) => be.memset_d16(d, value as u16, n)?,
                (None, MemsetWidth::W32) => be.memset_d32(d, value, n)?,
                (Some(st), MemsetWidth::W8) => be.memset_d8_async(d, value as u8, n, st)?,
                (Some(st), MemsetWidth::W16) => be.memset_d16_async(d, value as u16, n, st)?,
                (Some(st), MemsetWidth::W32) => be.memset_d32_async(d, value, n, st)?,
            }
        }
        Ok(ReplyBody::Empty)
    }

    /// `ptr..ptr+len` inside one live allocation of context `cx`, or one of its
    /// modules' variables whose address the guest asked for (`CUDA_ERROR_INVALID_VALUE`
    /// otherwise: another context's memory too).
    pub(super) fn check_range(
        &self,
        cx: u64,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Result<(), Outcome> {
        let fits = |base: u64, size: u64| {
            ptr.0
                .checked_sub(base)
                .and_then(|off| off.checked_add(len))
                .is_some_and(|end| end <= size)
        };
        let in_alloc = self
            .allocs
            .range((cx, 0)..=(cx, ptr.0))
            .next_back()
            .is_some_and(|(&(_, base), &size)| fits(base, size));
        let in_variable = |vars: &BTreeMap<u64, u64>| {
            vars.range(..=ptr.0)
                .next_back()
                .is_some_and(|(&base, &size)| fits(base, size))
        };
        if in_alloc || self.modules.of(cx).any(|(_, m)| in_variable(&m.variables)) {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what} {:#x}..+{len} is not inside one live allocation of this session's current context",
                ptr.0
            )))
        }
    }
}
