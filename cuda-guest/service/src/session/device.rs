//! Session commands (`0x00..`) and device queries (`0x01..`): answered without a
//! context, the device queries by the service's device backend.

use super::{failed, invalid, truncate_utf8, Done, Outcome, Session};
use vmgpu_cuda_api::Device;
use vmgpu_cuda_proto::{ReplyBody, Status};

impl Session {
    /// The guest's device `ordinal`: it has one, 0 (the host device the operator gave).
    pub(super) fn dev(&self, ordinal: u32) -> Result<Device, Outcome> {
        if ordinal == 0 {
            Ok(self.device)
        } else {
            Err(failed(
                Status::ERROR_INVALID_DEVICE,
                format!("device {ordinal}: this guest has one device (0)"),
            ))
        }
    }

    /// `Ping`: the data back (inline data lent by the decoder when the frame was
    /// decoded in place).
    pub(super) fn ping(&self, data: Vec<u8>, lent: &[u8]) -> Done {
        Ok(ReplyBody::Data(if data.is_empty() {
            lent.to_vec()
        } else {
            data
        }))
    }

    /// `Init`.
    pub(super) fn init(&mut self, flags: u32) -> Done {
        if flags != 0 {
            return Err(invalid("cuInit flags must be 0"));
        }
        self.initialized = true;
        Ok(ReplyBody::Empty)
    }

    /// `DeviceGetCount`: the guest sees one device (the backend has it: checked when
    /// the service started).
    pub(super) fn device_get_count(&self) -> Done {
        self.inner.devices.device_count()?;
        Ok(ReplyBody::Count(1))
    }

    /// `DeviceGet`: the session's own ordinal.
    pub(super) fn device_get(&self, ordinal: u32) -> Done {
        self.dev(ordinal)?;
        Ok(ReplyBody::Device(ordinal))
    }

    /// `DeviceGetName`, at most `max_name` bytes.
    pub(super) fn device_get_name(&self, device: u32) -> Done {
        let d = self.dev(device)?;
        let mut name = self.inner.devices.device_name(d)?;
        truncate_utf8(&mut name, self.limits.max_name as usize);
        Ok(ReplyBody::Text(name))
    }

    /// `DeviceGetPciBusId`, at most `max_name` bytes.
    pub(super) fn device_get_pci_bus_id(&self, device: u32) -> Done {
        let d = self.dev(device)?;
        let mut id = self.inner.devices.device_pci_bus_id(d)?;
        truncate_utf8(&mut id, self.limits.max_name as usize);
        Ok(ReplyBody::Text(id))
    }

    /// `DeviceTotalMem`: the guest's memory quota, at most the device's.
    pub(super) fn device_total_mem(&self, device: u32) -> Done {
        let d = self.dev(device)?;
        let total = self.inner.devices.device_total_mem(d)?;
        Ok(ReplyBody::Size(total.min(self.quota.device_memory)))
    }
}
