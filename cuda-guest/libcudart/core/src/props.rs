//! `struct cudaDeviceProp` of CUDA 13 (`driver_types.h` 13.0, 1,008 bytes) and of CUDA 12
//! (12.9, 1,032 bytes), and how `cudaGetDeviceProperties` fills them: each field from the
//! driver attribute the runtime reads for it (`cudaDeviceAttr` numbers are the driver's).
//!
//! One table (`device_props!`), in the headers' order: a field of both versions, or one
//! of one version only (`in 12`: the deprecated fields 13 removed; `in 13`: the fields 13
//! took from 12's `reserved`). It was generated from the headers (the field list and
//! each field's `cudaDevAttr*`); the layout tests below check it against gcc's offsets.
//! `unifiedFunctionPointers` and the LUID have no attribute and stay 0.

#![allow(non_snake_case, missing_docs)]

use std::ffi::{c_char, c_int, c_uint};

/// What a `struct cudaDeviceProp` is filled from besides the attributes.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    /// The device's name, NUL-terminated.
    pub name: [c_char; 256],
    /// Its UUID.
    pub uuid: [u8; 16],
    /// Its memory in bytes.
    pub total_mem: usize,
}

/// A version's `struct cudaDeviceProp`.
pub trait DeviceProp: Copy {
    /// All zero (what the runtime leaves in the fields nothing fills).
    fn zeroed() -> Self;
    /// Fills every field from `id` or from `attr(number)`.
    fn fill(&mut self, id: &Identity, attr: &mut dyn FnMut(c_int) -> c_int);
}

/// Defines `DeviceProp12` and `DeviceProp13` from one field table: `name: type = source`,
/// the source an attribute `(n)`, attributes `[n, ...]` (an array), `name`, `uuid`,
/// `total_mem` (of [`Identity`]) or `none`; `, in 12` / `, in 13` for a field of one
/// version.
macro_rules! device_props {
    ($($f:ident: $t:ty = $v:tt $(, in $only:tt)?;)*) => {
        device_props!(@struct 12 DeviceProp12 [] $($f: $t = $v $(, in $only)?;)*);
        device_props!(@struct 13 DeviceProp13 [] $($f: $t = $v $(, in $only)?;)*);
    };
    (@struct $ver:tt $S:ident [$(($ff:ident: $tt:ty = $vv:tt))*]) => {
        #[doc = concat!("`struct cudaDeviceProp` of CUDA ", stringify!($ver), ".")]
        #[repr(C)]
        #[derive(Debug, Clone, Copy)]
        pub struct $S {
            $(pub $ff: $tt,)*
        }

        impl DeviceProp for $S {
            fn zeroed() -> Self {
                // SAFETY: every field is an integer or an array of integers: all-zero
                // bytes are a valid value.
                unsafe { std::mem::zeroed() }
            }

            fn fill(&mut self, id: &Identity, attr: &mut dyn FnMut(c_int) -> c_int) {
                let p = self;
                $(device_props!(@set p, id, attr, $ff, $vv);)*
            }
        }
    };
    // A field of the other version: left out.
    (@struct 12 $S:ident [$($acc:tt)*] $f:ident: $t:ty = $v:tt, in 13; $($rest:tt)*) => {
        device_props!(@struct 12 $S [$($acc)*] $($rest)*);
    };
    (@struct 13 $S:ident [$($acc:tt)*] $f:ident: $t:ty = $v:tt, in 12; $($rest:tt)*) => {
        device_props!(@struct 13 $S [$($acc)*] $($rest)*);
    };
    // A field of both, or of this version.
    (@struct $ver:tt $S:ident [$($acc:tt)*] $f:ident: $t:ty = $v:tt $(, in $only:tt)?; $($rest:tt)*) => {
        device_props!(@struct $ver $S [$($acc)* ($f: $t = $v)] $($rest)*);
    };
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, none) => {};
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, name) => { $p.$f = $id.name; };
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, uuid) => { $p.$f = $id.uuid; };
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, total_mem) => { $p.$f = $id.total_mem; };
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, ($n:literal)) => { $p.$f = $attr($n) as _; };
    (@set $p:ident, $id:ident, $attr:ident, $f:ident, [$($n:literal),*]) => { $p.$f = [$($attr($n)),*]; };
}

device_props! {
    name: [c_char; 256] = name;
    uuid: [u8; 16] = uuid;
    luid: [c_char; 8] = none;
    luidDeviceNodeMask: c_uint = none;
    totalGlobalMem: usize = total_mem;
    sharedMemPerBlock: usize = (8);
    regsPerBlock: c_int = (12);
    warpSize: c_int = (10);
    memPitch: usize = (11);
    maxThreadsPerBlock: c_int = (1);
    maxThreadsDim: [c_int; 3] = [2, 3, 4];
    maxGridSize: [c_int; 3] = [5, 6, 7];
    clockRate: c_int = (13), in 12;
    totalConstMem: usize = (9);
    major: c_int = (75);
    minor: c_int = (76);
    textureAlignment: usize = (14);
    texturePitchAlignment: usize = (51);
    deviceOverlap: c_int = (15), in 12;
    multiProcessorCount: c_int = (16);
    kernelExecTimeoutEnabled: c_int = (17), in 12;
    integrated: c_int = (18);
    canMapHostMemory: c_int = (19);
    computeMode: c_int = (20), in 12;
    maxTexture1D: c_int = (21);
    maxTexture1DMipmap: c_int = (77);
    maxTexture1DLinear: c_int = (69), in 12;
    maxTexture2D: [c_int; 2] = [22, 23];
    maxTexture2DMipmap: [c_int; 2] = [73, 74];
    maxTexture2DLinear: [c_int; 3] = [70, 71, 72];
    maxTexture2DGather: [c_int; 2] = [45, 46];
    maxTexture3D: [c_int; 3] = [24, 25, 26];
    maxTexture3DAlt: [c_int; 3] = [47, 48, 49];
    maxTextureCubemap: c_int = (52);
    maxTexture1DLayered: [c_int; 2] = [42, 43];
    maxTexture2DLayered: [c_int; 3] = [27, 28, 29];
    maxTextureCubemapLayered: [c_int; 2] = [53, 54];
    maxSurface1D: c_int = (55);
    maxSurface2D: [c_int; 2] = [56, 57];
    maxSurface3D: [c_int; 3] = [58, 59, 60];
    maxSurface1DLayered: [c_int; 2] = [61, 62];
    maxSurface2DLayered: [c_int; 3] = [63, 64, 65];
    maxSurfaceCubemap: c_int = (66);
    maxSurfaceCubemapLayered: [c_int; 2] = [67, 68];
    surfaceAlignment: usize = (30);
    concurrentKernels: c_int = (31);
    ECCEnabled: c_int = (32);
    pciBusID: c_int = (33);
    pciDeviceID: c_int = (34);
    pciDomainID: c_int = (50);
    tccDriver: c_int = (35);
    asyncEngineCount: c_int = (40);
    unifiedAddressing: c_int = (41);
    memoryClockRate: c_int = (36), in 12;
    memoryBusWidth: c_int = (37);
    l2CacheSize: c_int = (38);
    persistingL2CacheMaxSize: c_int = (108);
    maxThreadsPerMultiProcessor: c_int = (39);
    streamPrioritiesSupported: c_int = (78);
    globalL1CacheSupported: c_int = (79);
    localL1CacheSupported: c_int = (80);
    sharedMemPerMultiprocessor: usize = (81);
    regsPerMultiprocessor: c_int = (82);
    managedMemory: c_int = (83);
    isMultiGpuBoard: c_int = (84);
    multiGpuBoardGroupID: c_int = (85);
    hostNativeAtomicSupported: c_int = (86);
    singleToDoublePrecisionPerfRatio: c_int = (87), in 12;
    pageableMemoryAccess: c_int = (88);
    concurrentManagedAccess: c_int = (89);
    computePreemptionSupported: c_int = (90);
    canUseHostPointerForRegisteredMem: c_int = (91);
    cooperativeLaunch: c_int = (95);
    cooperativeMultiDeviceLaunch: c_int = (96), in 12;
    sharedMemPerBlockOptin: usize = (97);
    pageableMemoryAccessUsesHostPageTables: c_int = (100);
    directManagedMemAccessFromHost: c_int = (101);
    maxBlocksPerMultiProcessor: c_int = (106);
    accessPolicyMaxWindowSize: c_int = (109);
    reservedSharedMemPerBlock: usize = (111);
    hostRegisterSupported: c_int = (99);
    sparseCudaArraySupported: c_int = (112);
    hostRegisterReadOnlySupported: c_int = (113);
    timelineSemaphoreInteropSupported: c_int = (114);
    memoryPoolsSupported: c_int = (115);
    gpuDirectRDMASupported: c_int = (116);
    gpuDirectRDMAFlushWritesOptions: c_uint = (117);
    gpuDirectRDMAWritesOrdering: c_int = (118);
    memoryPoolSupportedHandleTypes: c_uint = (119);
    deferredMappingCudaArraySupported: c_int = (121);
    ipcEventSupported: c_int = (125);
    clusterLaunch: c_int = (120);
    unifiedFunctionPointers: c_int = none;
    deviceNumaConfig: c_int = (130), in 13;
    deviceNumaId: c_int = (131), in 13;
    mpsEnabled: c_int = (133), in 13;
    hostNumaId: c_int = (134), in 13;
    gpuPciDeviceID: c_uint = (139), in 13;
    gpuPciSubsystemID: c_uint = (140), in 13;
    hostNumaMultinodeIpcSupported: c_int = (143), in 13;
    reserved: [c_int; 63] = none, in 12;
    reserved: [c_int; 56] = none, in 13;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_layout_is_cuda_13s() {
        // sizeof and offsets as gcc computes them from driver_types.h 13.0.
        assert_eq!(size_of::<DeviceProp13>(), 1008);
        assert_eq!(offset_of!(DeviceProp13, totalGlobalMem), 288);
        assert_eq!(offset_of!(DeviceProp13, hostNumaMultinodeIpcSupported), 780);
        assert_eq!(offset_of!(DeviceProp13, reserved), 784);
    }

    #[test]
    fn the_layout_is_cuda_12s() {
        // sizeof and offsets as gcc computes them from driver_types.h 12.9: every field
        // 13 does not have, and the ones around them.
        assert_eq!(size_of::<DeviceProp12>(), 1032);
        for (offset, expected) in [
            (offset_of!(DeviceProp12, totalGlobalMem), 288),
            (offset_of!(DeviceProp12, clockRate), 348),
            (offset_of!(DeviceProp12, totalConstMem), 352),
            (offset_of!(DeviceProp12, deviceOverlap), 384),
            (offset_of!(DeviceProp12, computeMode), 404),
            (offset_of!(DeviceProp12, maxTexture1DLinear), 416),
            (offset_of!(DeviceProp12, memoryClockRate), 608),
            (
                offset_of!(DeviceProp12, singleToDoublePrecisionPerfRatio),
                668,
            ),
            (offset_of!(DeviceProp12, cooperativeMultiDeviceLaunch), 692),
            (offset_of!(DeviceProp12, unifiedFunctionPointers), 776),
            (offset_of!(DeviceProp12, reserved), 780),
        ] {
            assert_eq!(offset, expected);
        }
    }

    #[test]
    fn each_field_is_filled_from_its_attribute() {
        let id = Identity {
            name: [1; 256],
            uuid: [2; 16],
            total_mem: 3,
        };
        let mut p = DeviceProp12::zeroed();
        p.fill(&id, &mut |a| a + 1000);
        assert_eq!((p.name[0], p.uuid[15], p.totalGlobalMem), (1, 2, 3));
        assert_eq!((p.clockRate, p.maxGridSize), (1013, [1005, 1006, 1007]));
        assert_eq!(
            (p.sharedMemPerBlock, p.cooperativeMultiDeviceLaunch),
            (1008, 1096)
        );
        assert_eq!((p.unifiedFunctionPointers, p.reserved[62]), (0, 0));
        let mut p = DeviceProp13::zeroed();
        p.fill(&id, &mut |a| a + 1000);
        assert_eq!(
            (p.hostNumaMultinodeIpcSupported, p.gpuPciDeviceID),
            (1143, 1139)
        );
        assert_eq!(p.luid, [0; 8]);
    }
}
