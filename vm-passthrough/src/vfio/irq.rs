//! Device interrupts (INTx, MSI, MSI-X) delivered to eventfds through `VFIO_DEVICE_SET_IRQS`.

use std::fmt;

use vfio_bindings::bindings::vfio::{
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
};
use vmm_sys_util::eventfd::EventFd;

use crate::vfio::backend::{IrqInfo, VfioBackend};
use crate::vfio::device::AssignedDevice;
use crate::vfio::error::{AssignError, Result};

/// The PCI interrupt mechanisms VFIO can forward. Only one can be enabled at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IrqKind {
    /// Legacy level-triggered INTx; VFIO masks it after each delivery until unmasked.
    Intx,
    /// Message Signalled Interrupts.
    Msi,
    /// MSI-X.
    Msix,
}

impl IrqKind {
    /// The VFIO interrupt index of this kind.
    pub fn vfio_index(self) -> u32 {
        match self {
            IrqKind::Intx => VFIO_PCI_INTX_IRQ_INDEX,
            IrqKind::Msi => VFIO_PCI_MSI_IRQ_INDEX,
            IrqKind::Msix => VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

impl fmt::Display for IrqKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IrqKind::Intx => "INTx",
            IrqKind::Msi => "MSI",
            IrqKind::Msix => "MSI-X",
        })
    }
}

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
