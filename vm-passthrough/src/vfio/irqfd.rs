//! Routing device interrupts straight into a KVM guest: the eventfds given to
//! [`AssignedDevice::enable_irq`](crate::vfio::AssignedDevice::enable_irq) are registered as
//! irqfds on the VMM's `VmFd`, so KVM injects the guest interrupt without a VMM round trip.

use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::vfio::error::{AssignError, Result};

/// Registers each `(eventfd, gsi)` pair as a KVM irqfd. All or nothing: on failure the pairs
/// registered so far are unregistered again and the error names the failing GSI.
pub fn register_irqfds(vm: &VmFd, routes: &[(&EventFd, u32)]) -> Result<()> {
    for (done, (eventfd, gsi)) in routes.iter().enumerate() {
        if let Err(source) = vm.register_irqfd(eventfd, *gsi) {
            if let Err(e) = unregister_irqfds(vm, &routes[..done]) {
                log::error!("rolling back irqfds after failure on GSI {gsi}: {e}");
            }
            return Err(AssignError::Irqfd { gsi: *gsi, source });
        }
        log::debug!("irqfd registered for GSI {gsi}");
    }
    Ok(())
}

/// Unregisters irqfds registered with [`register_irqfds`]; reports the first failure after
/// trying every pair.
pub fn unregister_irqfds(vm: &VmFd, routes: &[(&EventFd, u32)]) -> Result<()> {
    let mut first_error = None;
    for (eventfd, gsi) in routes {
        if let Err(source) = vm.unregister_irqfd(eventfd, *gsi) {
            first_error.get_or_insert(AssignError::Irqfd { gsi: *gsi, source });
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use kvm_ioctls::Kvm;

    use super::*;

    /// A VM with an in-kernel interrupt controller. This test needs `/dev/kvm` (this project's
    /// machines and CI have it) and fails rather than skip without it.
    fn vm_with_irqchip() -> VmFd {
        let kvm = Kvm::new()
            .unwrap_or_else(|e| panic!("irqfd test needs KVM: opening /dev/kvm failed: {e}"));
        let vm = kvm
            .create_vm()
            .unwrap_or_else(|e| panic!("KVM_CREATE_VM failed: {e}"));
        vm.create_irq_chip()
            .unwrap_or_else(|e| panic!("KVM_CREATE_IRQCHIP failed: {e}"));
        vm
    }

    #[test]
    fn failed_registration_rolls_back_the_earlier_ones() {
        let vm = vm_with_irqchip();
        let (first, second) = (EventFd::new(0).unwrap(), EventFd::new(0).unwrap());
        // One eventfd cannot back two irqfds: the third route reuses `first`, fails with EBUSY...
        let err = register_irqfds(&vm, &[(&first, 5), (&second, 6), (&first, 7)]).unwrap_err();
        match err {
            AssignError::Irqfd { gsi, source } => {
                assert_eq!((gsi, source.errno()), (7, libc::EBUSY))
            }
            other => panic!("unexpected {other:?}"),
        }
        // ...and the routes registered before it are gone again, so they can be re-registered.
        register_irqfds(&vm, &[(&first, 5), (&second, 6)]).unwrap();
        unregister_irqfds(&vm, &[(&first, 5), (&second, 6)]).unwrap();
    }
}
