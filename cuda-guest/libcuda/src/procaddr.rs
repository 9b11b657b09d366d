//! `cuGetProcAddress` and `cuGetProcAddress_v2`: a base name (`cuMemAlloc`), a CUDA
//! version and flags select one exported variant, as the driver does: the newest
//! variant introduced at or before the version asked for (`cuMemAlloc` at 3020 and
//! later is `cuMemAlloc_v2`; `cuCtxCreate` is `_v2` from 3020 and `_v3` from 11040 —
//! cuda.h 12.9's `cudaTypedefs.h` still maps `PFN_cuCtxCreate` to `_v11040`, so
//! `cuCtxCreate_v4` is reached by its own name only), and with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` the
//! per-thread-default-stream variant (`_ptds`/`_ptsz`) where one exists.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::api::*;
use crate::ffi::*;

/// One variant: the base name asked for, the CUDA version that introduced it, whether
/// it is the per-thread-default-stream variant, its exported name and address.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// The name given to `cuGetProcAddress` (`cuMemAlloc`).
    pub base: &'static str,
    /// The CUDA version that introduced this variant (e.g. 3020).
    pub version: i32,
    /// Whether this is the `_ptds`/`_ptsz` variant.
    pub per_thread: bool,
    /// The exported symbol (`cuMemAlloc_v2`).
    pub symbol: &'static str,
    /// Its address.
    pub address: usize,
}

macro_rules! variants {
    ($( $base:literal $version:literal $pt:literal $sym:ident; )*) => {
        fn build() -> Vec<Variant> {
            let mut v = vec![$(
                Variant {
                    base: $base,
                    version: $version,
                    per_thread: $pt,
                    symbol: stringify!($sym),
                    address: $sym as *const () as usize,
                },
            )*];
            for (name, f) in UNSUPPORTED {
                let (base, pt) = match name.strip_suffix("_ptsz").or_else(|| name.strip_suffix("_ptds")) {
                    Some(b) => (b, true),
                    None => (*name, false),
                };
                // `cuGraphInstantiate_v2` is asked for as `cuGraphInstantiate`, ...
                let base = match base.rsplit_once("_v") {
                    Some((b, v)) if !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) => b,
                    _ => base,
                };
                v.push(Variant { base, version: 0, per_thread: pt, symbol: name, address: *f as *const () as usize });
            }
            v
        }
    };
}

variants! {
    "cuInit" 2000 false cuInit;
    "cuDriverGetVersion" 2020 false cuDriverGetVersion;
    "cuGetErrorName" 6000 false cuGetErrorName;
    "cuGetErrorString" 6000 false cuGetErrorString;
    "cuGetExportTable" 3000 false cuGetExportTable;
    "cuGetProcAddress" 11030 false cuGetProcAddress;
    "cuGetProcAddress" 12000 false cuGetProcAddress_v2;
    "cuDeviceGet" 2000 false cuDeviceGet;
    "cuDeviceGetCount" 2000 false cuDeviceGetCount;
    "cuDeviceGetName" 2000 false cuDeviceGetName;
    "cuDeviceGetUuid" 9020 false cuDeviceGetUuid;
    "cuDeviceGetUuid" 11040 false cuDeviceGetUuid_v2;
    "cuDeviceGetPCIBusId" 4010 false cuDeviceGetPCIBusId;
    "cuDeviceGetByPCIBusId" 4010 false cuDeviceGetByPCIBusId;
    "cuDeviceGetAttribute" 2000 false cuDeviceGetAttribute;
    "cuDeviceTotalMem" 3020 false cuDeviceTotalMem_v2;
    "cuDeviceComputeCapability" 2000 false cuDeviceComputeCapability;
    "cuDevicePrimaryCtxRetain" 7000 false cuDevicePrimaryCtxRetain;
    "cuDevicePrimaryCtxRelease" 7000 false cuDevicePrimaryCtxRelease;
    "cuDevicePrimaryCtxRelease" 11000 false cuDevicePrimaryCtxRelease_v2;
    "cuDevicePrimaryCtxReset" 7000 false cuDevicePrimaryCtxReset;
    "cuDevicePrimaryCtxReset" 11000 false cuDevicePrimaryCtxReset_v2;
    "cuDevicePrimaryCtxGetState" 7000 false cuDevicePrimaryCtxGetState;
    "cuDevicePrimaryCtxSetFlags" 7000 false cuDevicePrimaryCtxSetFlags;
    "cuDevicePrimaryCtxSetFlags" 11000 false cuDevicePrimaryCtxSetFlags_v2;
    "cuCtxCreate" 2000 false cuCtxCreate;
    "cuCtxCreate" 3020 false cuCtxCreate_v2;
    "cuCtxCreate" 11040 false cuCtxCreate_v3;
    "cuCtxCreate_v4" 12050 false cuCtxCreate_v4;
    "cuCtxDestroy" 2000 false cuCtxDestroy;
    "cuCtxDestroy" 4000 false cuCtxDestroy_v2;
    "cuCtxSetCurrent" 4000 false cuCtxSetCurrent;
    "cuCtxGetCurrent" 4000 false cuCtxGetCurrent;
    "cuCtxPushCurrent" 2000 false cuCtxPushCurrent;
    "cuCtxPushCurrent" 4000 false cuCtxPushCurrent_v2;
    "cuCtxPopCurrent" 2000 false cuCtxPopCurrent;
    "cuCtxPopCurrent" 4000 false cuCtxPopCurrent_v2;
    "cuCtxSynchronize" 2000 false cuCtxSynchronize;
    "cuCtxGetDevice" 2000 false cuCtxGetDevice;
    "cuCtxGetApiVersion" 3020 false cuCtxGetApiVersion;
    "cuCtxGetFlags" 7000 false cuCtxGetFlags;
    "cuCtxGetStreamPriorityRange" 5050 false cuCtxGetStreamPriorityRange;
    "cuCtxSetCacheConfig" 3020 false cuCtxSetCacheConfig;
    "cuCtxGetCacheConfig" 3020 false cuCtxGetCacheConfig;
    "cuMemGetInfo" 3020 false cuMemGetInfo_v2;
    "cuModuleLoad" 2000 false cuModuleLoad;
    "cuModuleLoadData" 2000 false cuModuleLoadData;
    "cuModuleLoadFatBinary" 2000 false cuModuleLoadFatBinary;
    "cuArrayCreate" 3020 false cuArrayCreate_v2;
    "cuArray3DCreate" 3020 false cuArray3DCreate_v2;
    "cuArrayDestroy" 2000 false cuArrayDestroy;
    "cuArrayGetDescriptor" 3020 false cuArrayGetDescriptor_v2;
    "cuArray3DGetDescriptor" 3020 false cuArray3DGetDescriptor_v2;
    "cuTexObjectCreate" 5000 false cuTexObjectCreate;
    "cuTexObjectDestroy" 5000 false cuTexObjectDestroy;
    "cuTexObjectGetResourceDesc" 5000 false cuTexObjectGetResourceDesc;
    "cuTexObjectGetTextureDesc" 5000 false cuTexObjectGetTextureDesc;
    "cuSurfObjectCreate" 5000 false cuSurfObjectCreate;
    "cuSurfObjectDestroy" 5000 false cuSurfObjectDestroy;
    "cuSurfObjectGetResourceDesc" 5000 false cuSurfObjectGetResourceDesc;
    "cuMemcpyHtoA" 3020 false cuMemcpyHtoA_v2;
    "cuMemcpyHtoAAsync" 3020 false cuMemcpyHtoAAsync_v2;
    "cuMemcpyAtoH" 3020 false cuMemcpyAtoH_v2;
    "cuMemcpyAtoHAsync" 3020 false cuMemcpyAtoHAsync_v2;
    "cuMemcpyDtoA" 3020 false cuMemcpyDtoA_v2;
    "cuMemcpyAtoD" 3020 false cuMemcpyAtoD_v2;
    "cuMemcpyAtoA" 3020 false cuMemcpyAtoA_v2;
    "cuGraphKernelNodeSetParams" 10000 false cuGraphKernelNodeSetParams;
    "cuGraphKernelNodeSetParams" 12000 false cuGraphKernelNodeSetParams_v2;
    "cuGraphExecKernelNodeSetParams" 10010 false cuGraphExecKernelNodeSetParams;
    "cuGraphExecKernelNodeSetParams" 12000 false cuGraphExecKernelNodeSetParams_v2;
    "cuGraphMemcpyNodeSetParams" 10000 false cuGraphMemcpyNodeSetParams;
    "cuGraphExecMemcpyNodeSetParams" 10020 false cuGraphExecMemcpyNodeSetParams;
    "cuGraphMemsetNodeSetParams" 10000 false cuGraphMemsetNodeSetParams;
    "cuGraphExecMemsetNodeSetParams" 10020 false cuGraphExecMemsetNodeSetParams;
    "cuGraphHostNodeSetParams" 10000 false cuGraphHostNodeSetParams;
    "cuGraphExecHostNodeSetParams" 10020 false cuGraphExecHostNodeSetParams;
    "cuGraphExecUpdate" 12000 false cuGraphExecUpdate_v2;
    "cuGraphNodeGetDependencies" 10000 false cuGraphNodeGetDependencies;
    "cuGraphNodeGetDependencies" 12030 false cuGraphNodeGetDependencies_v2;
    "cuGraphNodeGetDependentNodes" 10000 false cuGraphNodeGetDependentNodes;
    "cuGraphNodeGetDependentNodes" 12030 false cuGraphNodeGetDependentNodes_v2;
    "cuThreadExchangeStreamCaptureMode" 10010 false cuThreadExchangeStreamCaptureMode;
    "cuCtxGetSharedMemConfig" 4020 false cuCtxGetSharedMemConfig;
    "cuCtxSetSharedMemConfig" 4020 false cuCtxSetSharedMemConfig;
    "cuFuncGetName" 12030 false cuFuncGetName;
    "cuStreamGetFlags" 5050 false cuStreamGetFlags;
    "cuStreamGetFlags" 7000 true cuStreamGetFlags_ptsz;
    "cuStreamGetPriority" 5050 false cuStreamGetPriority;
    "cuStreamGetPriority" 7000 true cuStreamGetPriority_ptsz;
    "cuStreamGetId" 12000 false cuStreamGetId;
    "cuStreamGetId" 12000 true cuStreamGetId_ptsz;
    "cuStreamSetAttribute" 11000 false cuStreamSetAttribute;
    "cuStreamSetAttribute" 11000 true cuStreamSetAttribute_ptsz;
    "cuStreamGetAttribute" 11000 false cuStreamGetAttribute;
    "cuStreamGetAttribute" 11000 true cuStreamGetAttribute_ptsz;
    "cuStreamCopyAttributes" 11000 false cuStreamCopyAttributes;
    "cuStreamCopyAttributes" 11000 true cuStreamCopyAttributes_ptsz;
    "cuCtxResetPersistingL2Cache" 11000 false cuCtxResetPersistingL2Cache;
    "cuMemAllocPitch" 3020 false cuMemAllocPitch_v2;
    "cuMemcpy" 4000 false cuMemcpy;
    "cuMemcpy" 7000 true cuMemcpy_ptds;
    "cuMemcpyAsync" 4000 false cuMemcpyAsync;
    "cuMemcpyAsync" 7000 true cuMemcpyAsync_ptsz;
    "cuMemcpy2D" 3020 false cuMemcpy2D_v2;
    "cuMemcpy2D" 7000 true cuMemcpy2D_v2_ptds;
    "cuMemcpy2DUnaligned" 3020 false cuMemcpy2DUnaligned_v2;
    "cuMemcpy2DUnaligned" 7000 true cuMemcpy2DUnaligned_v2_ptds;
    "cuMemcpy2DAsync" 3020 false cuMemcpy2DAsync_v2;
    "cuMemcpy2DAsync" 7000 true cuMemcpy2DAsync_v2_ptsz;
    "cuMemcpy3D" 3020 false cuMemcpy3D_v2;
    "cuMemcpy3D" 7000 true cuMemcpy3D_v2_ptds;
    "cuMemcpy3DAsync" 3020 false cuMemcpy3DAsync_v2;
    "cuMemcpy3DAsync" 7000 true cuMemcpy3DAsync_v2_ptsz;
    "cuMemsetD2D8" 3020 false cuMemsetD2D8_v2;
    "cuMemsetD2D8" 7000 true cuMemsetD2D8_v2_ptds;
    "cuMemsetD2D16" 3020 false cuMemsetD2D16_v2;
    "cuMemsetD2D16" 7000 true cuMemsetD2D16_v2_ptds;
    "cuMemsetD2D32" 3020 false cuMemsetD2D32_v2;
    "cuMemsetD2D32" 7000 true cuMemsetD2D32_v2_ptds;
    "cuMemsetD2D8Async" 3020 false cuMemsetD2D8Async;
    "cuMemsetD2D8Async" 7000 true cuMemsetD2D8Async_ptsz;
    "cuMemsetD2D16Async" 3020 false cuMemsetD2D16Async;
    "cuMemsetD2D16Async" 7000 true cuMemsetD2D16Async_ptsz;
    "cuMemsetD2D32Async" 3020 false cuMemsetD2D32Async;
    "cuMemsetD2D32Async" 7000 true cuMemsetD2D32Async_ptsz;
    "cuStreamGetCtx" 9020 false cuStreamGetCtx;
    "cuStreamGetCtx" 9020 true cuStreamGetCtx_ptsz;
    "cuStreamGetCtx" 12050 false cuStreamGetCtx_v2;
    "cuStreamGetCtx" 12050 true cuStreamGetCtx_v2_ptsz;
    "cuStreamGetDevice" 12080 false cuStreamGetDevice;
    "cuStreamGetDevice" 12080 true cuStreamGetDevice_ptsz;
    "cuModuleLoadDataEx" 2010 false cuModuleLoadDataEx;
    "cuModuleUnload" 2000 false cuModuleUnload;
    "cuModuleGetFunction" 2000 false cuModuleGetFunction;
    "cuModuleGetGlobal" 3020 false cuModuleGetGlobal_v2;
    "cuFuncSetAttribute" 9000 false cuFuncSetAttribute;
    "cuFuncGetAttribute" 2020 false cuFuncGetAttribute;
    "cuDeviceGetDefaultMemPool" 11020 false cuDeviceGetDefaultMemPool;
    "cuDeviceGetMemPool" 11020 false cuDeviceGetMemPool;
    "cuMemPoolGetAttribute" 11020 false cuMemPoolGetAttribute;
    "cuMemPoolSetAttribute" 11020 false cuMemPoolSetAttribute;
    "cuMemPoolTrimTo" 11020 false cuMemPoolTrimTo;
    "cuMemPoolGetAccess" 11020 false cuMemPoolGetAccess;
    "cuMemAllocFromPoolAsync" 11020 false cuMemAllocFromPoolAsync;
    "cuMemAllocFromPoolAsync" 11020 true cuMemAllocFromPoolAsync_ptsz;
    "cuStreamIsCapturing" 10000 false cuStreamIsCapturing;
    "cuStreamIsCapturing" 10000 true cuStreamIsCapturing_ptsz;
    "cuStreamBeginCapture" 10010 false cuStreamBeginCapture_v2;
    "cuStreamBeginCapture" 10010 true cuStreamBeginCapture_v2_ptsz;
    "cuStreamEndCapture" 10000 false cuStreamEndCapture;
    "cuStreamEndCapture" 10000 true cuStreamEndCapture_ptsz;
    "cuStreamGetCaptureInfo" 10010 false cuStreamGetCaptureInfo;
    "cuStreamGetCaptureInfo" 11030 false cuStreamGetCaptureInfo_v2;
    "cuStreamGetCaptureInfo" 11030 true cuStreamGetCaptureInfo_v2_ptsz;
    "cuStreamGetCaptureInfo" 12030 false cuStreamGetCaptureInfo_v3;
    "cuStreamGetCaptureInfo" 12030 true cuStreamGetCaptureInfo_v3_ptsz;
    "cuStreamBeginCaptureToGraph" 12030 false cuStreamBeginCaptureToGraph;
    "cuStreamBeginCaptureToGraph" 12030 true cuStreamBeginCaptureToGraph_ptsz;
    "cuStreamUpdateCaptureDependencies" 11030 false cuStreamUpdateCaptureDependencies;
    "cuStreamUpdateCaptureDependencies" 11030 true cuStreamUpdateCaptureDependencies_ptsz;
    "cuStreamUpdateCaptureDependencies" 12030 false cuStreamUpdateCaptureDependencies_v2;
    "cuStreamUpdateCaptureDependencies" 12030 true cuStreamUpdateCaptureDependencies_v2_ptsz;
    "cuGraphAddNode" 12020 false cuGraphAddNode;
    "cuGraphAddNode" 12030 false cuGraphAddNode_v2;
    "cuGraphConditionalHandleCreate" 12030 false cuGraphConditionalHandleCreate;
    "cuGraphCreate" 10000 false cuGraphCreate;
    "cuGraphAddKernelNode" 10000 false cuGraphAddKernelNode;
    "cuGraphAddKernelNode" 12000 false cuGraphAddKernelNode_v2;
    "cuGraphAddMemcpyNode" 10000 false cuGraphAddMemcpyNode;
    "cuGraphAddMemsetNode" 10000 false cuGraphAddMemsetNode;
    "cuGraphAddHostNode" 10000 false cuGraphAddHostNode;
    "cuGraphAddEmptyNode" 10000 false cuGraphAddEmptyNode;
    "cuGraphAddChildGraphNode" 10000 false cuGraphAddChildGraphNode;
    "cuGraphChildGraphNodeGetGraph" 10000 false cuGraphChildGraphNodeGetGraph;
    "cuGraphAddEventRecordNode" 11010 false cuGraphAddEventRecordNode;
    "cuGraphAddEventWaitNode" 11010 false cuGraphAddEventWaitNode;
    "cuGraphEventRecordNodeGetEvent" 11010 false cuGraphEventRecordNodeGetEvent;
    "cuGraphEventRecordNodeSetEvent" 11010 false cuGraphEventRecordNodeSetEvent;
    "cuGraphEventWaitNodeGetEvent" 11010 false cuGraphEventWaitNodeGetEvent;
    "cuGraphEventWaitNodeSetEvent" 11010 false cuGraphEventWaitNodeSetEvent;
    "cuGraphExecEventRecordNodeSetEvent" 11010 false cuGraphExecEventRecordNodeSetEvent;
    "cuGraphExecEventWaitNodeSetEvent" 11010 false cuGraphExecEventWaitNodeSetEvent;
    "cuLaunchCooperativeKernel" 9000 false cuLaunchCooperativeKernel;
    "cuLaunchCooperativeKernel" 9000 true cuLaunchCooperativeKernel_ptsz;
    "cuGraphAddMemAllocNode" 11040 false cuGraphAddMemAllocNode;
    "cuGraphAddMemFreeNode" 11040 false cuGraphAddMemFreeNode;
    "cuGraphMemAllocNodeGetParams" 11040 false cuGraphMemAllocNodeGetParams;
    "cuGraphMemFreeNodeGetParams" 11040 false cuGraphMemFreeNodeGetParams;
    "cuDeviceGetGraphMemAttribute" 11040 false cuDeviceGetGraphMemAttribute;
    "cuDeviceSetGraphMemAttribute" 11040 false cuDeviceSetGraphMemAttribute;
    "cuDeviceGraphMemTrim" 11040 false cuDeviceGraphMemTrim;
    "cuGraphAddDependencies" 10000 false cuGraphAddDependencies;
    "cuGraphAddDependencies" 12030 false cuGraphAddDependencies_v2;
    "cuGraphGetNodes" 10000 false cuGraphGetNodes;
    "cuGraphGetRootNodes" 10000 false cuGraphGetRootNodes;
    "cuGraphNodeGetType" 10000 false cuGraphNodeGetType;
    "cuGraphClone" 10000 false cuGraphClone;
    "cuGraphDestroy" 10000 false cuGraphDestroy;
    "cuGraphInstantiate" 11000 false cuGraphInstantiate_v2;
    "cuGraphInstantiate" 12000 false cuGraphInstantiateWithFlags;
    "cuGraphInstantiateWithFlags" 11040 false cuGraphInstantiateWithFlags;
    "cuGraphInstantiateWithParams" 12000 false cuGraphInstantiateWithParams;
    "cuGraphInstantiateWithParams" 12000 true cuGraphInstantiateWithParams_ptsz;
    "cuGraphExecDestroy" 10000 false cuGraphExecDestroy;
    "cuGraphLaunch" 10000 false cuGraphLaunch;
    "cuGraphLaunch" 10000 true cuGraphLaunch_ptsz;
    "cuGraphUpload" 11010 false cuGraphUpload;
    "cuGraphUpload" 11010 true cuGraphUpload_ptsz;
    "cuMemAllocManaged" 6000 false cuMemAllocManaged;
    "cuMemcpyPeer" 4000 false cuMemcpyPeer;
    "cuMemcpyPeer" 7000 true cuMemcpyPeer_ptds;
    "cuMemcpyPeerAsync" 4000 false cuMemcpyPeerAsync;
    "cuMemcpyPeerAsync" 7000 true cuMemcpyPeerAsync_ptsz;
    "cuDeviceCanAccessPeer" 4000 false cuDeviceCanAccessPeer;
    "cuCtxEnablePeerAccess" 4000 false cuCtxEnablePeerAccess;
    "cuCtxDisablePeerAccess" 4000 false cuCtxDisablePeerAccess;
    "cuMemAdvise" 8000 false cuMemAdvise;
    "cuMemAdvise" 12020 false cuMemAdvise_v2;
    "cuMemPrefetchAsync" 8000 false cuMemPrefetchAsync;
    "cuMemPrefetchAsync" 8000 true cuMemPrefetchAsync_ptsz;
    "cuMemPrefetchAsync" 12020 false cuMemPrefetchAsync_v2;
    "cuMemPrefetchAsync" 12020 true cuMemPrefetchAsync_v2_ptsz;
    "cuStreamAttachMemAsync" 6000 false cuStreamAttachMemAsync;
    "cuStreamAttachMemAsync" 7000 true cuStreamAttachMemAsync_ptsz;
    "cuUserObjectCreate" 11030 false cuUserObjectCreate;
    "cuUserObjectRetain" 11030 false cuUserObjectRetain;
    "cuUserObjectRelease" 11030 false cuUserObjectRelease;
    "cuGraphRetainUserObject" 11030 false cuGraphRetainUserObject;
    "cuGraphReleaseUserObject" 11030 false cuGraphReleaseUserObject;
    "cuLaunchKernelEx" 11060 false cuLaunchKernelEx;
    "cuLaunchKernelEx" 11060 true cuLaunchKernelEx_ptsz;
    "cuOccupancyMaxActiveBlocksPerMultiprocessor" 6050 false cuOccupancyMaxActiveBlocksPerMultiprocessor;
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" 7000 false cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags;
    "cuOccupancyMaxPotentialBlockSize" 6050 false cuOccupancyMaxPotentialBlockSize;
    "cuOccupancyMaxPotentialBlockSizeWithFlags" 7000 false cuOccupancyMaxPotentialBlockSizeWithFlags;
    "cuOccupancyAvailableDynamicSMemPerBlock" 10020 false cuOccupancyAvailableDynamicSMemPerBlock;
    "cuPointerGetAttribute" 4000 false cuPointerGetAttribute;
    "cuPointerGetAttributes" 7000 false cuPointerGetAttributes;
    "cuMemGetAddressRange" 3020 false cuMemGetAddressRange_v2;
    "cuCtxGetLimit" 3010 false cuCtxGetLimit;
    "cuCtxSetLimit" 3010 false cuCtxSetLimit;
    "cuLibraryLoadData" 12000 false cuLibraryLoadData;
    "cuLibraryLoadFromFile" 12000 false cuLibraryLoadFromFile;
    "cuLibraryUnload" 12000 false cuLibraryUnload;
    "cuLibraryGetModule" 12000 false cuLibraryGetModule;
    "cuLibraryGetKernel" 12000 false cuLibraryGetKernel;
    "cuKernelGetFunction" 12000 false cuKernelGetFunction;
    "cuLibraryGetGlobal" 12000 false cuLibraryGetGlobal;
    "cuKernelGetAttribute" 12000 false cuKernelGetAttribute;
    "cuKernelSetAttribute" 12000 false cuKernelSetAttribute;
    "cuKernelSetCacheConfig" 12000 false cuKernelSetCacheConfig;
    "cuLinkCreate" 6050 false cuLinkCreate_v2;
    "cuLinkAddData" 6050 false cuLinkAddData_v2;
    "cuLinkAddFile" 6050 false cuLinkAddFile_v2;
    "cuLinkComplete" 5050 false cuLinkComplete;
    "cuLinkDestroy" 5050 false cuLinkDestroy;
    "cuLaunchHostFunc" 10000 false cuLaunchHostFunc;
    "cuLaunchHostFunc" 10000 true cuLaunchHostFunc_ptsz;
    "cuStreamAddCallback" 5000 false cuStreamAddCallback;
    "cuStreamAddCallback" 7000 true cuStreamAddCallback_ptsz;
    "cuProfilerStart" 4000 false cuProfilerStart;
    "cuProfilerStop" 4000 false cuProfilerStop;
    "cuFuncSetCacheConfig" 3000 false cuFuncSetCacheConfig;
    "cuLaunchKernel" 4000 false cuLaunchKernel;
    "cuLaunchKernel" 7000 true cuLaunchKernel_ptsz;
    "cuMemAlloc" 3020 false cuMemAlloc_v2;
    "cuMemFree" 3020 false cuMemFree_v2;
    "cuMemAllocAsync" 11020 false cuMemAllocAsync;
    "cuMemAllocAsync" 11020 true cuMemAllocAsync_ptsz;
    "cuMemFreeAsync" 11020 false cuMemFreeAsync;
    "cuMemFreeAsync" 11020 true cuMemFreeAsync_ptsz;
    "cuMemsetD8" 3020 false cuMemsetD8_v2;
    "cuMemsetD8" 7000 true cuMemsetD8_v2_ptds;
    "cuMemsetD16" 3020 false cuMemsetD16_v2;
    "cuMemsetD16" 7000 true cuMemsetD16_v2_ptds;
    "cuMemsetD32" 3020 false cuMemsetD32_v2;
    "cuMemsetD32" 7000 true cuMemsetD32_v2_ptds;
    "cuMemsetD8Async" 3020 false cuMemsetD8Async;
    "cuMemsetD8Async" 7000 true cuMemsetD8Async_ptsz;
    "cuMemsetD16Async" 3020 false cuMemsetD16Async;
    "cuMemsetD16Async" 7000 true cuMemsetD16Async_ptsz;
    "cuMemsetD32Async" 3020 false cuMemsetD32Async;
    "cuMemsetD32Async" 7000 true cuMemsetD32Async_ptsz;
    "cuMemcpyHtoD" 3020 false cuMemcpyHtoD_v2;
    "cuMemcpyHtoD" 7000 true cuMemcpyHtoD_v2_ptds;
    "cuMemcpyDtoH" 3020 false cuMemcpyDtoH_v2;
    "cuMemcpyDtoH" 7000 true cuMemcpyDtoH_v2_ptds;
    "cuMemcpyDtoD" 3020 false cuMemcpyDtoD_v2;
    "cuMemcpyDtoD" 7000 true cuMemcpyDtoD_v2_ptds;
    "cuMemcpyHtoDAsync" 3020 false cuMemcpyHtoDAsync_v2;
    "cuMemcpyHtoDAsync" 7000 true cuMemcpyHtoDAsync_v2_ptsz;
    "cuMemcpyDtoHAsync" 3020 false cuMemcpyDtoHAsync_v2;
    "cuMemcpyDtoHAsync" 7000 true cuMemcpyDtoHAsync_v2_ptsz;
    "cuMemcpyDtoDAsync" 3020 false cuMemcpyDtoDAsync_v2;
    "cuMemcpyDtoDAsync" 7000 true cuMemcpyDtoDAsync_v2_ptsz;
    "cuMemAllocHost" 3020 false cuMemAllocHost_v2;
    "cuMemHostAlloc" 2020 false cuMemHostAlloc;
    "cuMemFreeHost" 2000 false cuMemFreeHost;
    "cuMemHostGetDevicePointer" 3020 false cuMemHostGetDevicePointer_v2;
    "cuMemHostRegister" 4000 false cuMemHostRegister;
    "cuMemHostRegister" 6050 false cuMemHostRegister_v2;
    "cuMemHostUnregister" 4000 false cuMemHostUnregister;
    "cuStreamCreate" 2000 false cuStreamCreate;
    "cuStreamCreateWithPriority" 5050 false cuStreamCreateWithPriority;
    "cuStreamDestroy" 2000 false cuStreamDestroy;
    "cuStreamDestroy" 4000 false cuStreamDestroy_v2;
    "cuStreamSynchronize" 2000 false cuStreamSynchronize;
    "cuStreamSynchronize" 7000 true cuStreamSynchronize_ptsz;
    "cuStreamQuery" 2000 false cuStreamQuery;
    "cuStreamQuery" 7000 true cuStreamQuery_ptsz;
    "cuStreamWaitEvent" 3020 false cuStreamWaitEvent;
    "cuStreamWaitEvent" 7000 true cuStreamWaitEvent_ptsz;
    "cuEventCreate" 2000 false cuEventCreate;
    "cuEventDestroy" 2000 false cuEventDestroy;
    "cuEventDestroy" 4000 false cuEventDestroy_v2;
    "cuEventRecord" 2000 false cuEventRecord;
    "cuEventRecord" 7000 true cuEventRecord_ptsz;
    "cuEventRecordWithFlags" 11010 false cuEventRecordWithFlags;
    "cuEventRecordWithFlags" 11010 true cuEventRecordWithFlags_ptsz;
    "cuEventSynchronize" 2000 false cuEventSynchronize;
    "cuEventQuery" 2000 false cuEventQuery;
    "cuEventElapsedTime" 2000 false cuEventElapsedTime;
    "cuEventElapsedTime" 12080 false cuEventElapsedTime_v2;
}

/// Every variant the shim serves.
pub fn variants() -> &'static [Variant] {
    static TABLE: OnceLock<Vec<Variant>> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// The variant `cuGetProcAddress` returns for `name` at `version` with `flags`: `Ok`
/// with the address, or `Err` with the `CUdriverProcAddressQueryResult`.
pub fn resolve(name: &str, version: i32, flags: u64) -> Result<&'static Variant, c_int> {
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let all = variants();
    let named: Vec<&Variant> = all.iter().filter(|v| v.base == name).collect();
    if named.is_empty() {
        // An exact exported name is served as itself (lenient; the driver wants base
        // names).
        return all
            .iter()
            .find(|v| v.symbol == name)
            .ok_or(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    }
    let eligible = |pt: bool| {
        named
            .iter()
            .filter(|v| v.per_thread == pt && v.version <= version)
            .max_by_key(|v| v.version)
            .copied()
    };
    let found = if per_thread {
        eligible(true).or_else(|| eligible(false))
    } else {
        eligible(false)
    };
    found.ok_or(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
}

/// # Safety
/// `symbol` is null or NUL-terminated; `pfn` and `status` are null or writable.
unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let set_status = |s: c_int| {
        if !status.is_null() {
            // SAFETY: non-null; the caller's writable status slot.
            unsafe { status.write_unaligned(s) };
        }
    };
    if symbol.is_null() || pfn.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if flags & !(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        != 0
    {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null and NUL-terminated (the caller's guarantee).
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
    match resolve(&name, version, flags) {
        Ok(v) => {
            // SAFETY: `pfn` is non-null and writable.
            unsafe { pfn.write_unaligned(v.address as *mut c_void) };
            set_status(CU_GET_PROC_ADDRESS_SUCCESS);
            CUDA_SUCCESS
        }
        Err(s) => {
            // SAFETY: as above.
            unsafe { pfn.write_unaligned(std::ptr::null_mut()) };
            set_status(s);
            crate::log::debug(&format!(
                "cuGetProcAddress({name:?}, {version}, {flags}): not found ({s})"
            ));
            CUDA_ERROR_NOT_FOUND
        }
    }
}

/// `cuGetProcAddress` (CUDA 11.3): the variant of `symbol` for `cudaVersion` and
/// `flags`; `CUDA_ERROR_NOT_FOUND` for an unknown symbol or a version before it.
///
/// # Safety
/// Called from C: `symbol` NUL-terminated, `pfn` writable (null refused).
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: forwarded from the caller; no status slot.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
    });
    r.unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// `cuGetProcAddress_v2` (CUDA 12.0): as `cuGetProcAddress`, and `symbolStatus` gets
/// `CU_GET_PROC_ADDRESS_SUCCESS`, `_SYMBOL_NOT_FOUND` or `_VERSION_NOT_SUFFICIENT`.
///
/// # Safety
/// Called from C: `symbol` NUL-terminated, `pfn` writable (null refused), `status` null
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: forwarded from the caller.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, status) }
    });
    r.unwrap_or(CUDA_ERROR_UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &str, version: i32, flags: u64) -> Result<&'static str, c_int> {
        resolve(name, version, flags).map(|v| v.symbol)
    }

    #[test]
    fn the_version_selects_the_newest_variant_at_or_before_it() {
        assert_eq!(symbol("cuMemAlloc", 12000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(symbol("cuMemAlloc", 3020, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(
            symbol("cuMemAlloc", 3010, 0),
            Err(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(symbol("cuCtxCreate", 3000, 0), Ok("cuCtxCreate"));
        assert_eq!(symbol("cuCtxCreate", 11030, 0), Ok("cuCtxCreate_v2"));
        assert_eq!(symbol("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(symbol("cuCtxCreate", 13000, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(
            symbol("cuDevicePrimaryCtxRelease", 10020, 0),
            Ok("cuDevicePrimaryCtxRelease")
        );
        assert_eq!(
            symbol("cuDevicePrimaryCtxRelease", 11000, 0),
            Ok("cuDevicePrimaryCtxRelease_v2")
        );
        assert_eq!(
            symbol("cuEventElapsedTime", 12000, 0),
            Ok("cuEventElapsedTime")
        );
        assert_eq!(
            symbol("cuEventElapsedTime", 12080, 0),
            Ok("cuEventElapsedTime_v2")
        );
        assert_eq!(
            symbol("cuGetProcAddress", 12000, 0),
            Ok("cuGetProcAddress_v2")
        );
    }

    #[test]
    fn the_per_thread_flag_selects_ptds_and_ptsz_variants() {
        const PT: u64 = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(
            symbol("cuLaunchKernel", 12000, PT),
            Ok("cuLaunchKernel_ptsz")
        );
        assert_eq!(symbol("cuLaunchKernel", 12000, 1), Ok("cuLaunchKernel"));
        assert_eq!(
            symbol("cuMemcpyHtoD", 12000, PT),
            Ok("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(
            symbol("cuMemsetD16Async", 12000, PT),
            Ok("cuMemsetD16Async_ptsz")
        );
        assert_eq!(
            symbol("cuMemFreeAsync", 12000, PT),
            Ok("cuMemFreeAsync_ptsz")
        );
        // No per-thread variant: the legacy one. Before CUDA 7 there were none.
        assert_eq!(symbol("cuMemAlloc", 12000, PT), Ok("cuMemAlloc_v2"));
        assert_eq!(symbol("cuLaunchKernel", 6050, PT), Ok("cuLaunchKernel"));
    }

    #[test]
    fn unknown_names_are_not_found_and_stubs_resolve() {
        assert_eq!(
            symbol("cuNoSuchThing", 12000, 0),
            Err(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        // CUDA 12's headers map cuGraphInstantiate to the flags form.
        assert_eq!(
            symbol("cuGraphInstantiate", 12000, 0),
            Ok("cuGraphInstantiateWithFlags")
        );
        assert_eq!(
            symbol("cuGraphInstantiate", 11000, 0),
            Ok("cuGraphInstantiate_v2")
        );
        assert_eq!(
            symbol("cuMemRangeGetAttribute", 12000, 0),
            Ok("cuMemRangeGetAttribute")
        );
        assert_eq!(symbol("cuCtxCreate_v4", 12080, 0), Ok("cuCtxCreate_v4"));
    }

    #[test]
    fn every_variant_has_a_distinct_symbol_and_an_address() {
        let mut seen = std::collections::HashSet::new();
        let mut asked = std::collections::HashSet::new();
        for v in variants() {
            // Stubs (version 0) may share a base name; implemented variants may not.
            assert!(
                v.version == 0 || asked.insert((v.base, v.version, v.per_thread)),
                "{} at {} twice",
                v.base,
                v.version
            );
            assert_ne!(v.address, 0, "{}", v.symbol);
            // One alias: CUDA 12's cuGraphInstantiate is the flags form.
            if v.base != "cuGraphInstantiate" || v.version < 12000 {
                assert!(seen.insert(v.symbol), "{} twice", v.symbol);
                assert!(v.symbol.starts_with(v.base), "{} / {}", v.base, v.symbol);
            }
        }
        // 288 implemented and 276 stubs: every exported entry point is reachable.
        assert_eq!(seen.len(), 564);
    }
}
