// The entry points whose ABI CUDA 12 and 13 differ in, called as a program built against
// CUDA 12's headers calls them (clang-19, tests/clang_cuda12.rs): struct cudaDeviceProp
// (12's, through cudaGetDeviceProperties_v2) field by field against
// cudaDeviceGetAttribute, cudaMemPrefetchAsync and cudaMemAdvise with a device number on
// managed memory (and their _v2 forms, 13's), cudaRuntimeGetVersion; and what every
// program does: a __constant__ variable copied to and from, a __device__ variable's
// address, a stream and events. Prints one line per check and a summary; exits 1 on a
// failed check.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "../cu/check.h"

__constant__ float coeff[4];
__device__ int counter;

__global__ void scale(int n, float *p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = coeff[0] * p[i] + coeff[3];
  if (i == 0) atomicAdd(&counter, 1);
}

__global__ void fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

static int attr(cudaDeviceAttr a) {
  int v = -12345;
  cudaDeviceGetAttribute(&v, a, 0);
  return v;
}

// Each field of CUDA 12's struct against the attribute the runtime fills it from; the
// fields 13 removed among them (and the ones after each, which would move if the layout
// were 13's).
static void device_properties() {
  int version = 0;
  OK(cudaRuntimeGetVersion(&version));
  printf("cudaRuntimeGetVersion: %d\n", version);
  CHECK("the runtime is 12.9", version == 12090);

  // The struct with a guard after it: the library writes 12's 1,032 bytes, no more.
  struct {
    cudaDeviceProp p;
    unsigned char guard[64];
  } s;
  memset(&s, 0xab, sizeof s);
  OK(cudaGetDeviceProperties(&s.p, 0));
  const cudaDeviceProp &p = s.p;
  bool guard = true;
  for (unsigned char g : s.guard) guard = guard && g == 0xab;
  printf("sizeof(cudaDeviceProp) %zu, name %s, sm_%d%d, %d SMs, clockRate %d kHz, "
         "memoryClockRate %d kHz, %zu bytes\n",
         sizeof(cudaDeviceProp), p.name, p.major, p.minor, p.multiProcessorCount,
         p.clockRate, p.memoryClockRate, p.totalGlobalMem);
  CHECK("sizeof(cudaDeviceProp) is 12's", sizeof(cudaDeviceProp) == 1032);
  CHECK("nothing written past the struct", guard);
  CHECK("name", p.name[0] != 0 && memchr(p.name, 0, sizeof p.name) != nullptr);
  size_t free_mem = 0, total_mem = 0;
  OK(cudaMemGetInfo(&free_mem, &total_mem));
  CHECK("totalGlobalMem", p.totalGlobalMem == total_mem && total_mem > 0);
#define FIELD(f, a) CHECK(#f " == " #a, (long long)p.f == (long long)attr(a))
  FIELD(major, cudaDevAttrComputeCapabilityMajor);
  FIELD(minor, cudaDevAttrComputeCapabilityMinor);
  FIELD(warpSize, cudaDevAttrWarpSize);
  FIELD(maxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock);
  FIELD(maxGridSize[0], cudaDevAttrMaxGridDimX);
  FIELD(maxGridSize[2], cudaDevAttrMaxGridDimZ);
  FIELD(clockRate, cudaDevAttrClockRate);
  FIELD(totalConstMem, cudaDevAttrTotalConstantMemory);
  FIELD(texturePitchAlignment, cudaDevAttrTexturePitchAlignment);
  FIELD(deviceOverlap, cudaDevAttrGpuOverlap);
  FIELD(multiProcessorCount, cudaDevAttrMultiProcessorCount);
  FIELD(kernelExecTimeoutEnabled, cudaDevAttrKernelExecTimeout);
  FIELD(integrated, cudaDevAttrIntegrated);
  FIELD(canMapHostMemory, cudaDevAttrCanMapHostMemory);
  FIELD(computeMode, cudaDevAttrComputeMode);
  FIELD(maxTexture1D, cudaDevAttrMaxTexture1DWidth);
  FIELD(maxTexture1DMipmap, cudaDevAttrMaxTexture1DMipmappedWidth);
  FIELD(maxTexture1DLinear, cudaDevAttrMaxTexture1DLinearWidth);
  FIELD(maxTexture2D[0], cudaDevAttrMaxTexture2DWidth);
  FIELD(unifiedAddressing, cudaDevAttrUnifiedAddressing);
  FIELD(memoryClockRate, cudaDevAttrMemoryClockRate);
  FIELD(memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth);
  FIELD(l2CacheSize, cudaDevAttrL2CacheSize);
  FIELD(maxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor);
  FIELD(managedMemory, cudaDevAttrManagedMemory);
  FIELD(hostNativeAtomicSupported, cudaDevAttrHostNativeAtomicSupported);
  FIELD(singleToDoublePrecisionPerfRatio, cudaDevAttrSingleToDoublePrecisionPerfRatio);
  FIELD(pageableMemoryAccess, cudaDevAttrPageableMemoryAccess);
  FIELD(concurrentManagedAccess, cudaDevAttrConcurrentManagedAccess);
  FIELD(cooperativeLaunch, cudaDevAttrCooperativeLaunch);
  FIELD(cooperativeMultiDeviceLaunch, cudaDevAttrCooperativeMultiDeviceLaunch);
  FIELD(sharedMemPerBlockOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin);
  FIELD(maxBlocksPerMultiProcessor, cudaDevAttrMaxBlocksPerMultiprocessor);
  FIELD(reservedSharedMemPerBlock, cudaDevAttrReservedSharedMemoryPerBlock);
  FIELD(memoryPoolsSupported, cudaDevAttrMemoryPoolsSupported);
  FIELD(clusterLaunch, cudaDevAttrClusterLaunch);
  CHECK("unifiedFunctionPointers", p.unifiedFunctionPointers == 0);
  bool reserved = true;
  for (int r : p.reserved) reserved = reserved && r == 0;
  CHECK("reserved is zero", reserved);
  // Real values, not just equal ones.
  CHECK("warpSize is 32", p.warpSize == 32);
  CHECK("clockRate is set", p.clockRate > 0);
  CHECK("compute capability 8.0 or later", p.major >= 8);
  CHECK("cudaGetDeviceProperties(99) is cudaErrorInvalidDevice",
        cudaGetDeviceProperties(&s.p, 99) == cudaErrorInvalidDevice);
  cudaGetLastError();
}

// CUDA 12's cudaMemPrefetchAsync and cudaMemAdvise take a device number
// (cudaCpuDeviceId for the host); their _v2 forms a cudaMemLocation.
static void managed_memory() {
  const int n = 4096;
  int *m = nullptr;
  OK(cudaMallocManaged(&m, n * sizeof(int)));
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  OK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation, 0));
  OK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetAccessedBy, cudaCpuDeviceId));
  OK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetReadMostly, 0));
  OK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseUnsetReadMostly, 0));
  OK(cudaMemPrefetchAsync(m, n * sizeof(int), 0, s));
  fill<<<n / 256, 256, 0, s>>>(m, 7, n);
  OK(cudaMemPrefetchAsync(m, n * sizeof(int), cudaCpuDeviceId, s));
  OK(cudaStreamSynchronize(s));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += m[i] != 7 + i;
  printf("managed: %d of %d wrong after prefetches to the device and back\n", bad, n);
  CHECK("a kernel's writes to prefetched managed memory", bad == 0);
  cudaMemLocation device = {cudaMemLocationTypeDevice, 0};
  cudaMemLocation host = {cudaMemLocationTypeHost, 0};
  OK(cudaMemAdvise_v2(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation, device));
  OK(cudaMemPrefetchAsync_v2(m, n * sizeof(int), device, 0, s));
  fill<<<n / 256, 256, 0, s>>>(m, 100, n);
  OK(cudaMemPrefetchAsync_v2(m, n * sizeof(int), host, 0, s));
  OK(cudaStreamSynchronize(s));
  bad = 0;
  for (int i = 0; i < n; i++) bad += m[i] != 100 + i;
  CHECK("the same through the _v2 forms (a cudaMemLocation)", bad == 0);
  cudaError_t e = cudaMemPrefetchAsync(m, n * sizeof(int), 99, s);
  printf("cudaMemPrefetchAsync to device 99: %s\n", cudaGetErrorName(e));
  CHECK("a prefetch to device 99 fails", e != cudaSuccess);
  cudaGetLastError();
  OK(cudaStreamDestroy(s));
  OK(cudaFree(m));
}

// A __constant__ array copied in and out, a __device__ counter by address, a stream and
// events around a kernel.
static void symbols_streams_events() {
  const float c[4] = {3.0f, 0.0f, 0.0f, 0.5f};
  OK(cudaMemcpyToSymbol(coeff, c, sizeof c));
  float back[4] = {};
  OK(cudaMemcpyFromSymbol(back, coeff, sizeof back));
  CHECK("__constant__ read back", memcmp(back, c, sizeof c) == 0);
  int zero = 0;
  OK(cudaMemcpyToSymbol(counter, &zero, sizeof zero));
  int *counter_p = nullptr;
  OK(cudaGetSymbolAddress((void **)&counter_p, counter));
  size_t counter_size = 0;
  OK(cudaGetSymbolSize(&counter_size, counter));
  CHECK("sizeof counter", counter_size == sizeof(int));

  const int n = 10000;
  float *h = nullptr, *d = nullptr;
  OK(cudaMallocHost(&h, n * sizeof(float)));
  OK(cudaMalloc(&d, n * sizeof(float)));
  for (int i = 0; i < n; i++) h[i] = i;
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  OK(cudaEventCreate(&start));
  OK(cudaEventCreate(&stop));
  OK(cudaEventRecord(start, s));
  OK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s));
  scale<<<(n + 255) / 256, 256, 0, s>>>(n, d);
  OK(cudaGetLastError());
  OK(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  OK(cudaEventRecord(stop, s));
  OK(cudaEventSynchronize(stop));
  OK(cudaStreamQuery(s));
  float ms = -1;
  OK(cudaEventElapsedTime(&ms, start, stop));
  CHECK("elapsed time is not negative", ms >= 0);
  int bad = 0;
  for (int i = 0; i < n; i++) bad += h[i] != 3.0f * i + 0.5f;
  printf("scale: %d of %d wrong, %.3f ms\n", bad, n, ms);
  CHECK("the kernel read the __constant__ coefficients", bad == 0);
  int count = 0;
  OK(cudaMemcpy(&count, counter_p, sizeof count, cudaMemcpyDeviceToHost));
  CHECK("the __device__ counter, by its address", count == 1);
  OK(cudaThreadSynchronize());
  OK(cudaEventDestroy(start));
  OK(cudaEventDestroy(stop));
  OK(cudaStreamDestroy(s));
  OK(cudaFree(d));
  OK(cudaFreeHost(h));
}

int main() {
  device_properties();
  managed_memory();
  symbols_streams_events();
  return summary("cuda12_api");
}
