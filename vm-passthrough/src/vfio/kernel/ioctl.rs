//! [`KernelVfio`]'s [`VfioBackend`]: region info and I/O on the device file, interrupts
//! (`VFIO_DEVICE_SET_IRQS`), `VFIO_DEVICE_GET_INFO` and `VFIO_DEVICE_RESET`, issued here rather
//! than through vfio-ioctls where it would drop the errno.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use vfio_bindings::bindings::vfio::{
    vfio_device_info, VFIO_BASE, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE,
};
use vfio_ioctls::VfioRegionInfoCap;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::ioctl::{ioctl, ioctl_with_mut_ref, ioctl_with_ptr};

use super::{KernelDma, KernelVfio};
use crate::vfio::backend::{MmapArea, VfioBackend};
use crate::vfio::types::{
    DeviceInfo, IrqInfo, RegionFlags, RegionInfo, SparseMmapArea, CONFIG_REGION_INDEX,
};
use crate::vfio::util::{errno, in_bounds};

vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_GET_INFO, VFIO_TYPE as u32, VFIO_BASE + 7);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_SET_IRQS, VFIO_TYPE as u32, VFIO_BASE + 10);
vmm_sys_util::ioctl_io_nr!(VFIO_DEVICE_RESET, VFIO_TYPE as u32, VFIO_BASE + 11);

impl KernelVfio {
    fn region_file_offset(&self, index: u32, offset: u64, len: u64) -> io::Result<u64> {
        let info = self.region_info(index).ok_or_else(|| errno(libc::EINVAL))?;
        if in_bounds(offset, len, info.size) {
            Ok(info.file_offset + offset)
        } else {
            Err(errno(libc::EINVAL))
        }
    }

    fn set_irqs(
        &self,
        flags: u32,
        index: u32,
        start: u32,
        count: u32,
        eventfds: &[&EventFd],
    ) -> io::Result<()> {
        // struct vfio_irq_set { argsz, flags, index, start, count; data[] }: five u32 header
        // fields followed by one s32 fd per vector, built as one u32 buffer so it is aligned.
        let mut set: Vec<u32> = vec![0, flags, index, start, count];
        set.extend(eventfds.iter().map(|fd| fd.as_raw_fd() as u32));
        set[0] = (set.len() * std::mem::size_of::<u32>()) as u32;
        // SAFETY: the buffer is a complete vfio_irq_set whose argsz covers exactly the header
        // plus `eventfds.len()` fds, all of which are open for the duration of the call; the
        // kernel only reads it. The fd is the VFIO device this ioctl belongs to.
        let rc = unsafe { ioctl_with_ptr(&self.device_file, VFIO_DEVICE_SET_IRQS(), set.as_ptr()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

pub(super) fn query_device_info(device: &File) -> io::Result<DeviceInfo> {
    let mut info = vfio_device_info {
        argsz: std::mem::size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    // SAFETY: `info` is a correctly sized vfio_device_info the kernel fills in (argsz says how
    // much it may write); the fd is a VFIO device.
    let rc = unsafe { ioctl_with_mut_ref(device, VFIO_DEVICE_GET_INFO(), &mut info) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(DeviceInfo {
        reset_supported: info.flags & VFIO_DEVICE_FLAGS_RESET != 0,
        num_regions: info.num_regions,
        num_irqs: info.num_irqs,
    })
}

impl VfioBackend for KernelVfio {
    type Dma = KernelDma;

    fn device_info(&self) -> DeviceInfo {
        self.info
    }

    fn region_info(&self, index: u32) -> Option<RegionInfo> {
        // vfio-ioctls keeps the regions it could query in a list, not by index; the standard
        // PCI regions (BARs, ROM, config) always exist, so up to the config region the list
        // position is the index. Device-specific regions are not supported yet.
        if index > CONFIG_REGION_INDEX || index >= self.info.num_regions {
            return None;
        }
        let flags = self.device.get_region_flags(index);
        let caps = self.device.get_region_caps(index);
        let sparse_mmap = caps.iter().find_map(|cap| match cap {
            VfioRegionInfoCap::SparseMmap(sparse) => Some(
                sparse
                    .areas
                    .iter()
                    .map(|a| SparseMmapArea {
                        offset: a.offset,
                        size: a.size,
                    })
                    .collect(),
            ),
            _ => None,
        });
        Some(RegionInfo {
            index,
            size: self.device.get_region_size(index),
            file_offset: self.device.get_region_offset(index),
            flags: RegionFlags {
                read: flags & VFIO_REGION_INFO_FLAG_READ != 0,
                write: flags & VFIO_REGION_INFO_FLAG_WRITE != 0,
                mmap: flags & VFIO_REGION_INFO_FLAG_MMAP != 0,
            },
            sparse_mmap,
            msix_mappable: caps.contains(&VfioRegionInfoCap::MsixMappable),
        })
    }

    fn region_read(&self, index: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = self.region_file_offset(index, offset, buf.len() as u64)?;
        self.device_file.read_exact_at(buf, at)
    }

    fn region_write(&self, index: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let at = self.region_file_offset(index, offset, data.len() as u64)?;
        self.device_file.write_all_at(data, at)
    }

    fn region_mmap(&self, index: u32, offset: u64, len: usize) -> io::Result<MmapArea> {
        let at = self.region_file_offset(index, offset, len as u64)?;
        MmapArea::map_shared(&self.device_file, at, len)
    }

    fn irq_info(&self, index: u32) -> Option<IrqInfo> {
        self.device.get_irq_info(index).map(|irq| IrqInfo {
            index: irq.index,
            count: irq.count,
            flags: irq.flags,
        })
    }

    fn irq_set_eventfds(&self, index: u32, eventfds: &[&EventFd]) -> io::Result<()> {
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        self.set_irqs(flags, index, 0, eventfds.len() as u32, eventfds)
    }

    fn irq_disable(&self, index: u32) -> io::Result<()> {
        self.set_irqs(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            index,
            0,
            0,
            &[],
        )
    }

    fn irq_unmask(&self, index: u32) -> io::Result<()> {
        self.set_irqs(
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK,
            index,
            0,
            1,
            &[],
        )
    }

    fn reset(&self) -> io::Result<()> {
        // SAFETY: VFIO_DEVICE_RESET takes no argument; the fd is a VFIO device.
        let rc = unsafe { ioctl(&self.device_file, VFIO_DEVICE_RESET()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
