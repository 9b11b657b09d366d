//! Device interrupts (INTx, MSI, MSI-X) delivered to eventfds through `VFIO_DEVICE_SET_IRQS`.

use vmm_sys_util::eventfd::EventFd;

use crate::vfio::backend::VfioBackend;
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::types::{IrqInfo, IrqKind};

impl<B: VfioBackend> AssignedDevice<B> {
    /// How many vectors of `kind` the device has; fails if it has none.
    pub fn irq_info(&self, kind: IrqKind) -> Result<IrqInfo> {
        match self.backend.irq_info(kind.vfio_index()) {
            Some(info) if info.count > 0 => Ok(info),
            _ => Err(AssignError::IrqUnsupported {
                address: self.address,
                kind,
            }),
        }
    }

    /// Enables `kind` with vector `i` signalling `eventfds[i]`; at least one eventfd and at most
    /// as many as the device has vectors. The eventfds stay owned by the caller (VFIO holds its
    /// own reference), typically to be registered as KVM irqfds.
    pub fn enable_irq(&self, kind: IrqKind, eventfds: &[&EventFd]) -> Result<()> {
        let info = self.irq_info(kind)?;
        if eventfds.is_empty() || eventfds.len() > info.count as usize {
            return Err(AssignError::IrqVectorCount {
                address: self.address,
                kind,
                requested: eventfds.len(),
                available: info.count,
            });
        }
        self.backend
            .irq_set_eventfds(kind.vfio_index(), eventfds)
            .map_err(|source| self.set_irqs_error(kind, "enable", source))?;
        log::debug!(
            "{}: {kind} enabled with {} vector(s)",
            self.address,
            eventfds.len()
        );
        Ok(())
    }

    /// Disables `kind`; the device stops signalling its eventfds.
    pub fn disable_irq(&self, kind: IrqKind) -> Result<()> {
        self.irq_info(kind)?;
        self.backend
            .irq_disable(kind.vfio_index())
            .map_err(|source| self.set_irqs_error(kind, "disable", source))?;
        log::debug!("{}: {kind} disabled", self.address);
        Ok(())
    }

    /// Unmasks INTx after the guest handled it (VFIO masks INTx on every delivery so a
    /// level-triggered line cannot storm the host).
    pub fn unmask_intx(&self) -> Result<()> {
        let kind = IrqKind::Intx;
        self.irq_info(kind)?;
        self.backend
            .irq_unmask(kind.vfio_index())
            .map_err(|source| self.set_irqs_error(kind, "unmask", source))
    }

    fn set_irqs_error(
        &self,
        kind: IrqKind,
        action: &'static str,
        source: std::io::Error,
    ) -> AssignError {
        AssignError::SetIrqs {
            address: self.address,
            kind,
            action,
            source,
        }
    }
}
