//! The IOMMU side of the kernel's VFIO: [`KernelDma`] (a legacy container or an iommufd IOAS,
//! optionally registered with a KVM VFIO device), the constructors of
//! [`Container<KernelDma>`](crate::vfio::Container), and DMA map/unmap with their errno.

use std::io;
use std::sync::Arc;

use vfio_ioctls::{VfioContainer, VfioDeviceFd, VfioError, VfioOps};

use crate::vfio::backend::DmaBackend;
use crate::vfio::container::Container;
use crate::vfio::error::{AssignError, Result};
use crate::vfio::util::errno;

/// The IOMMU side of a kernel VFIO container: a legacy container (`/dev/vfio/vfio`, type1v2
/// IOMMU) or an iommufd IOAS, optionally registered with a KVM VFIO device.
pub struct KernelDma {
    pub(super) ops: Arc<dyn VfioOps>,
    pub(super) iommufd: bool,
}

impl std::fmt::Debug for KernelDma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDma")
            .field("iommufd", &self.iommufd)
            .finish_non_exhaustive()
    }
}

impl KernelDma {
    /// Whether devices open through their cdev bound to an iommufd IOAS (else through their
    /// group in a legacy container).
    pub fn is_iommufd(&self) -> bool {
        self.iommufd
    }

    pub(super) fn legacy(
        kvm_device: Option<Arc<VfioDeviceFd>>,
    ) -> std::result::Result<Self, VfioError> {
        Ok(KernelDma {
            ops: Arc::new(VfioContainer::new(kvm_device)?),
            iommufd: false,
        })
    }

    #[cfg(feature = "iommufd")]
    pub(super) fn iommufd(
        kvm_device: Option<Arc<VfioDeviceFd>>,
    ) -> std::result::Result<Self, VfioError> {
        let iommufd = iommufd_ioctls::IommuFd::new().map_err(VfioError::NewVfioIommufd)?;
        let vfio_iommufd = vfio_ioctls::VfioIommufd::new(Arc::new(iommufd), None, kvm_device)?;
        Ok(KernelDma {
            ops: Arc::new(vfio_iommufd),
            iommufd: true,
        })
    }
}

impl DmaBackend for KernelDma {
    unsafe fn dma_map(&self, iova: u64, size: u64, host_addr: *mut u8) -> io::Result<()> {
        let size = usize::try_from(size).map_err(|_| errno(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds `DmaBackend::dma_map`'s contract, which is the contract
        // of `VfioOps::vfio_dma_map`.
        unsafe { self.ops.vfio_dma_map(iova, size, host_addr) }.map_err(dma_errno)
    }

    fn dma_unmap(&self, iova: u64, size: u64) -> io::Result<()> {
        let size = usize::try_from(size).map_err(|_| errno(libc::EOVERFLOW))?;
        self.ops.vfio_dma_unmap(iova, size).map_err(dma_errno)
    }
}

/// The KVM VFIO pseudo-device of `vm` (`KVM_CREATE_DEVICE` with `KVM_DEV_TYPE_VFIO`), in the form
/// vfio-ioctls registers groups (`KVM_DEV_VFIO_GROUP_ADD`) and cdevs with.
#[cfg(feature = "kvm")]
fn kvm_vfio_device(vm: &kvm_ioctls::VmFd) -> Result<Arc<VfioDeviceFd>> {
    let mut device = kvm_bindings::kvm_create_device {
        type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
        fd: 0,
        flags: 0,
    };
    let fd = vm
        .create_device(&mut device)
        .map_err(|source| AssignError::KvmVfioDevice { source })?;
    log::debug!("KVM VFIO device created");
    Ok(Arc::new(VfioDeviceFd::new_from_kvm(fd)))
}

impl Container<KernelDma> {
    /// A new legacy VFIO container (`/dev/vfio/vfio`); its type1v2 IOMMU is set up when the first
    /// group joins.
    pub fn new() -> Result<Self> {
        let dma = KernelDma::legacy(None).map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// A new legacy VFIO container whose groups are registered with a KVM VFIO device created on
    /// `vm` (`KVM_DEV_VFIO_GROUP_ADD` as each group joins), as a VMM on KVM needs: KVM then
    /// knows the VM's DMA may be non-coherent, and the devices' drivers may use the VM.
    #[cfg(feature = "kvm")]
    pub fn with_kvm_device(vm: &kvm_ioctls::VmFd) -> Result<Self> {
        let dma = KernelDma::legacy(Some(kvm_vfio_device(vm)?))
            .map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// A new iommufd with one IOAS; devices open in it through their VFIO cdev.
    #[cfg(feature = "iommufd")]
    pub fn new_iommufd() -> Result<Self> {
        let dma = KernelDma::iommufd(None).map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }

    /// Like [`Container::new_iommufd`], with the devices' cdevs registered with a KVM VFIO device
    /// created on `vm`.
    #[cfg(all(feature = "iommufd", feature = "kvm"))]
    pub fn iommufd_with_kvm_device(vm: &kvm_ioctls::VmFd) -> Result<Self> {
        let dma = KernelDma::iommufd(Some(kvm_vfio_device(vm)?))
            .map_err(|source| AssignError::Container { source })?;
        Ok(Container::with_dma_backend(dma))
    }
}

/// The errno behind a DMA map/unmap failure, whichever IOMMU interface reported it.
fn dma_errno(error: VfioError) -> io::Error {
    match error {
        VfioError::IommuDmaMap(e) | VfioError::IommuDmaUnmap(e) => errno(e.errno()),
        #[cfg(feature = "iommufd")]
        VfioError::IommufdIoctlError(
            iommufd_ioctls::IommufdError::IommuIoasMap(e)
            | iommufd_ioctls::IommufdError::IommuIoasUnmap(e),
        ) => errno(e.errno()),
        // The kernel unmapped a different length than asked: the range bisects a mapping
        // or covers none.
        VfioError::InvalidDmaUnmapSize => errno(libc::EINVAL),
        other => io::Error::other(other),
    }
}
