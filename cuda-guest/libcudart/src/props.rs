//! `struct cudaDeviceProp` of CUDA 13 (`driver_types.h`, 1,008 bytes) and how
//! `cudaGetDeviceProperties` fills it: each field from the driver attribute the runtime
//! reads for it (`cudaDeviceAttr` numbers are the driver's). Generated from the header
//! (the field list and each field's `cudaDevAttr*`); `unifiedFunctionPointers` has no
//! attribute and stays 0.

#![allow(non_snake_case, missing_docs)]

use std::ffi::{c_char, c_int, c_uint};

/// `struct cudaDeviceProp`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceProp {
    pub name: [c_char; 256],
    pub uuid: [u8; 16],
    pub luid: [c_char; 8],
    pub luidDeviceNodeMask: c_uint,
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: c_int,
    pub warpSize: c_int,
    pub memPitch: usize,
    pub maxThreadsPerBlock: c_int,
    pub maxThreadsDim: [c_int; 3],
    pub maxGridSize: [c_int; 3],
    pub totalConstMem: usize,
    pub major: c_int,
    pub minor: c_int,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    pub multiProcessorCount: c_int,
    pub integrated: c_int,
    pub canMapHostMemory: c_int,
    pub maxTexture1D: c_int,
    pub maxTexture1DMipmap: c_int,
    pub maxTexture2D: [c_int; 2],
    pub maxTexture2DMipmap: [c_int; 2],
    pub maxTexture2DLinear: [c_int; 3],
    pub maxTexture2DGather: [c_int; 2],
    pub maxTexture3D: [c_int; 3],
    pub maxTexture3DAlt: [c_int; 3],
    pub maxTextureCubemap: c_int,
    pub maxTexture1DLayered: [c_int; 2],
    pub maxTexture2DLayered: [c_int; 3],
    pub maxTextureCubemapLayered: [c_int; 2],
    pub maxSurface1D: c_int,
    pub maxSurface2D: [c_int; 2],
    pub maxSurface3D: [c_int; 3],
    pub maxSurface1DLayered: [c_int; 2],
    pub maxSurface2DLayered: [c_int; 3],
    pub maxSurfaceCubemap: c_int,
    pub maxSurfaceCubemapLayered: [c_int; 2],
    pub surfaceAlignment: usize,
    pub concurrentKernels: c_int,
    pub ECCEnabled: c_int,
    pub pciBusID: c_int,
    pub pciDeviceID: c_int,
    pub pciDomainID: c_int,
    pub tccDriver: c_int,
    pub asyncEngineCount: c_int,
    pub unifiedAddressing: c_int,
    pub memoryBusWidth: c_int,
    pub l2CacheSize: c_int,
    pub persistingL2CacheMaxSize: c_int,
    pub maxThreadsPerMultiProcessor: c_int,
    pub streamPrioritiesSupported: c_int,
    pub globalL1CacheSupported: c_int,
    pub localL1CacheSupported: c_int,
    pub sharedMemPerMultiprocessor: usize,
    pub regsPerMultiprocessor: c_int,
    pub managedMemory: c_int,
    pub isMultiGpuBoard: c_int,
    pub multiGpuBoardGroupID: c_int,
    pub hostNativeAtomicSupported: c_int,
    pub pageableMemoryAccess: c_int,
    pub concurrentManagedAccess: c_int,
    pub computePreemptionSupported: c_int,
    pub canUseHostPointerForRegisteredMem: c_int,
    pub cooperativeLaunch: c_int,
    pub sharedMemPerBlockOptin: usize,
    pub pageableMemoryAccessUsesHostPageTables: c_int,
    pub directManagedMemAccessFromHost: c_int,
    pub maxBlocksPerMultiProcessor: c_int,
    pub accessPolicyMaxWindowSize: c_int,
    pub reservedSharedMemPerBlock: usize,
    pub hostRegisterSupported: c_int,
    pub sparseCudaArraySupported: c_int,
    pub hostRegisterReadOnlySupported: c_int,
    pub timelineSemaphoreInteropSupported: c_int,
    pub memoryPoolsSupported: c_int,
    pub gpuDirectRDMASupported: c_int,
    pub gpuDirectRDMAFlushWritesOptions: c_uint,
    pub gpuDirectRDMAWritesOrdering: c_int,
    pub memoryPoolSupportedHandleTypes: c_uint,
    pub deferredMappingCudaArraySupported: c_int,
    pub ipcEventSupported: c_int,
    pub clusterLaunch: c_int,
    pub unifiedFunctionPointers: c_int,
    pub deviceNumaConfig: c_int,
    pub deviceNumaId: c_int,
    pub mpsEnabled: c_int,
    pub hostNumaId: c_int,
    pub gpuPciDeviceID: c_uint,
    pub gpuPciSubsystemID: c_uint,
    pub hostNumaMultinodeIpcSupported: c_int,
    pub reserved: [c_int; 56],
}

impl DeviceProp {
    /// All zero (what the runtime leaves in the fields nothing fills).
    pub fn zeroed() -> DeviceProp {
        // SAFETY: every field is an integer or an array of integers: all-zero bytes are
        // a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// Fills every attribute-backed field with `attr(number)`.
    pub fn fill(&mut self, mut attr: impl FnMut(c_int) -> c_int) {
        self.sharedMemPerBlock = attr(8) as usize;
        self.regsPerBlock = attr(12);
        self.warpSize = attr(10);
        self.memPitch = attr(11) as usize;
        self.maxThreadsPerBlock = attr(1);
        self.maxThreadsDim = [attr(2), attr(3), attr(4)];
        self.maxGridSize = [attr(5), attr(6), attr(7)];
        self.totalConstMem = attr(9) as usize;
        self.major = attr(75);
        self.minor = attr(76);
        self.textureAlignment = attr(14) as usize;
        self.texturePitchAlignment = attr(51) as usize;
        self.multiProcessorCount = attr(16);
        self.integrated = attr(18);
        self.canMapHostMemory = attr(19);
        self.maxTexture1D = attr(21);
        self.maxTexture1DMipmap = attr(77);
        self.maxTexture2D = [attr(22), attr(23)];
        self.maxTexture2DMipmap = [attr(73), attr(74)];
        self.maxTexture2DLinear = [attr(70), attr(71), attr(72)];
        self.maxTexture2DGather = [attr(45), attr(46)];
        self.maxTexture3D = [attr(24), attr(25), attr(26)];
        self.maxTexture3DAlt = [attr(47), attr(48), attr(49)];
        self.maxTextureCubemap = attr(52);
        self.maxTexture1DLayered = [attr(42), attr(43)];
        self.maxTexture2DLayered = [attr(27), attr(28), attr(29)];
        self.maxTextureCubemapLayered = [attr(53), attr(54)];
        self.maxSurface1D = attr(55);
        self.maxSurface2D = [attr(56), attr(57)];
        self.maxSurface3D = [attr(58), attr(59), attr(60)];
        self.maxSurface1DLayered = [attr(61), attr(62)];
        self.maxSurface2DLayered = [attr(63), attr(64), attr(65)];
        self.maxSurfaceCubemap = attr(66);
        self.maxSurfaceCubemapLayered = [attr(67), attr(68)];
        self.surfaceAlignment = attr(30) as usize;
        self.concurrentKernels = attr(31);
        self.ECCEnabled = attr(32);
        self.pciBusID = attr(33);
        self.pciDeviceID = attr(34);
        self.pciDomainID = attr(50);
        self.tccDriver = attr(35);
        self.asyncEngineCount = attr(40);
        self.unifiedAddressing = attr(41);
        self.memoryBusWidth = attr(37);
        self.l2CacheSize = attr(38);
        self.persistingL2CacheMaxSize = attr(108);
        self.maxThreadsPerMultiProcessor = attr(39);
        self.streamPrioritiesSupported = attr(78);
        self.globalL1CacheSupported = attr(79);
        self.localL1CacheSupported = attr(80);
        self.sharedMemPerMultiprocessor = attr(81) as usize;
        self.regsPerMultiprocessor = attr(82);
        self.managedMemory = attr(83);
        self.isMultiGpuBoard = attr(84);
        self.multiGpuBoardGroupID = attr(85);
        self.hostNativeAtomicSupported = attr(86);
        self.pageableMemoryAccess = attr(88);
        self.concurrentManagedAccess = attr(89);
        self.computePreemptionSupported = attr(90);
        self.canUseHostPointerForRegisteredMem = attr(91);
        self.cooperativeLaunch = attr(95);
        self.sharedMemPerBlockOptin = attr(97) as usize;
        self.pageableMemoryAccessUsesHostPageTables = attr(100);
        self.directManagedMemAccessFromHost = attr(101);
        self.maxBlocksPerMultiProcessor = attr(106);
        self.accessPolicyMaxWindowSize = attr(109);
        self.reservedSharedMemPerBlock = attr(111) as usize;
        self.hostRegisterSupported = attr(99);
        self.sparseCudaArraySupported = attr(112);
        self.hostRegisterReadOnlySupported = attr(113);
        self.timelineSemaphoreInteropSupported = attr(114);
        self.memoryPoolsSupported = attr(115);
        self.gpuDirectRDMASupported = attr(116);
        self.gpuDirectRDMAFlushWritesOptions = attr(117) as c_uint;
        self.gpuDirectRDMAWritesOrdering = attr(118);
        self.memoryPoolSupportedHandleTypes = attr(119) as c_uint;
        self.deferredMappingCudaArraySupported = attr(121);
        self.ipcEventSupported = attr(125);
        self.clusterLaunch = attr(120);
        self.deviceNumaConfig = attr(130);
        self.deviceNumaId = attr(131);
        self.mpsEnabled = attr(133);
        self.hostNumaId = attr(134);
        self.gpuPciDeviceID = attr(139) as c_uint;
        self.gpuPciSubsystemID = attr(140) as c_uint;
        self.hostNumaMultinodeIpcSupported = attr(143);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_cuda_13s() {
        // sizeof and two offsets as gcc computes them from driver_types.h 13.0.
        assert_eq!(std::mem::size_of::<DeviceProp>(), 1008);
        assert_eq!(std::mem::offset_of!(DeviceProp, totalGlobalMem), 288);
        assert_eq!(
            std::mem::offset_of!(DeviceProp, hostNumaMultinodeIpcSupported),
            780
        );
        assert_eq!(std::mem::offset_of!(DeviceProp, reserved), 784);
    }
}
