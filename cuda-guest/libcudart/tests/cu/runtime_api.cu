// What real programs do with the CUDA runtime, each result checked against what a GPU
// gives: <<<>>> launches, __device__ and __constant__ variables, memory of every kind,
// streams, events, host functions, errors (sticky and not), device printf. Prints one
// line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

__device__ int counter;
__constant__ float coeff[4];

__global__ void saxpy(int n, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = coeff[0] * x[i] + y[i];
  if (i == 0) atomicAdd(&counter, 1);
}

__global__ void block_sum(const int *in, int *out) {
  __shared__ int s[256];
  s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

__global__ void hello(int v) { printf("hello from the device: %d\n", v); }

// Device-side new/delete and malloc/free: each thread's own block, written and read back.
__global__ void heap_user(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int *p = new int[8];
  int *q = (int *)malloc(sizeof(int) * 4);
  if (p == nullptr || q == nullptr) {
    if (i < n) out[i] = -1;
    return;
  }
  for (int k = 0; k < 8; k++) p[k] = i + k;
  q[3] = 2 * i;
  if (i < n) out[i] = p[7] + q[3];
  delete[] p;
  free(q);
}

static int host_calls;
static void CUDART_CB on_host(void *p) { host_calls += *(int *)p; }

int main() {
  int count = 0;
  OK(cudaGetDeviceCount(&count));
  CHECK("one device or more", count >= 1);
  OK(cudaSetDevice(0));
  int dev = -1;
  OK(cudaGetDevice(&dev));
  CHECK("device 0", dev == 0);
  int warp = 0;
  OK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
  CHECK("warp size 32", warp == 32);
  cudaDeviceProp prop;
  memset(&prop, 0xee, sizeof prop);
  OK(cudaGetDeviceProperties(&prop, 0));
  int major = -1, sms = -1;
  OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK("properties: a name", prop.name[0] != 0 && strlen(prop.name) < sizeof prop.name);
  CHECK("properties: major as the attribute", prop.major == major && major >= 7);
  CHECK("properties: SMs as the attribute", prop.multiProcessorCount == sms && sms > 0);
  CHECK("properties: warp, block and grid limits",
        prop.warpSize == 32 && prop.maxThreadsPerBlock == 1024 && prop.maxThreadsDim[0] == 1024 &&
            prop.maxThreadsDim[2] == 64 && prop.maxGridSize[0] == 2147483647 && prop.maxGridSize[1] == 65535);
  CHECK("properties: memory", prop.totalGlobalMem > 0 && prop.sharedMemPerBlock == 49152 &&
                                  prop.totalConstMem == 65536);
  CHECK("properties: the reserved tail is zeroed", prop.reserved[55] == 0);
  CHECK("properties of a device that is not there",
        cudaGetDeviceProperties(&prop, 99) == cudaErrorInvalidDevice);
  cudaGetLastError();
  int rt = 0;
  OK(cudaRuntimeGetVersion(&rt));
  CHECK("runtime version 13.0", rt == 13000);

  // saxpy with a __constant__ coefficient and a __device__ counter.
  const int n = 1 << 12;
  float *x = new float[n], *y = new float[n];
  for (int i = 0; i < n; i++) { x[i] = (float)i; y[i] = 1.0f; }
  float *dx, *dy;
  OK(cudaMalloc(&dx, n * sizeof(float)));
  OK(cudaMalloc(&dy, n * sizeof(float)));
  OK(cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice));
  OK(cudaMemcpy(dy, y, n * sizeof(float), cudaMemcpyDefault));
  float c[4] = {3.0f, 0, 0, 0};
  OK(cudaMemcpyToSymbol(coeff, c, sizeof c));
  int zero = 0;
  OK(cudaMemcpyToSymbol(counter, &zero, sizeof zero));
  saxpy<<<(n + 255) / 256, 256>>>(n, dx, dy);
  OK(cudaGetLastError());
  saxpy<<<(n + 255) / 256, 256>>>(n, dx, dy);
  OK(cudaDeviceSynchronize());
  OK(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += y[i] != 6.0f * i + 1.0f;
  CHECK("saxpy twice: y = 6x + 1", bad == 0);
  int launches = 0;
  OK(cudaMemcpyFromSymbol(&launches, counter, sizeof launches));
  CHECK("the __device__ counter saw two launches", launches == 2);
  void *sym = nullptr;
  OK(cudaGetSymbolAddress(&sym, counter));
  size_t sym_size = 0;
  OK(cudaGetSymbolSize(&sym_size, coeff));
  CHECK("sizeof coeff", sym_size == sizeof c);

  // Shared memory and __syncthreads: a block reduction.
  const int blocks = 16;
  int *in = new int[blocks * 256], sums[blocks];
  for (int i = 0; i < blocks * 256; i++) in[i] = i % 7;
  int *din, *dout;
  OK(cudaMalloc(&din, sizeof(int) * blocks * 256));
  OK(cudaMalloc(&dout, sizeof sums));
  OK(cudaMemcpy(din, in, sizeof(int) * blocks * 256, cudaMemcpyHostToDevice));
  block_sum<<<blocks, 256>>>(din, dout);
  OK(cudaMemcpy(sums, dout, sizeof sums, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int b = 0; b < blocks; b++) {
    int want = 0;
    for (int t = 0; t < 256; t++) want += in[b * 256 + t];
    bad += sums[b] != want;
  }
  CHECK("block sums", bad == 0);

  // Streams, async copies from pinned memory, events, a host function.
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *pinned;
  OK(cudaMallocHost(&pinned, sizeof(int) * 1024));
  int *dfill;
  OK(cudaMalloc(&dfill, sizeof(int) * 1024));
  cudaEvent_t start, stop;
  OK(cudaEventCreate(&start));
  OK(cudaEventCreate(&stop));
  OK(cudaEventRecord(start, s));
  OK(cudaMemsetAsync(dfill, 0, sizeof(int) * 1024, s));
  fill<<<4, 256, 0, s>>>(dfill, 100, 1024);
  OK(cudaMemcpyAsync(pinned, dfill, sizeof(int) * 1024, cudaMemcpyDeviceToHost, s));
  int add = 5;
  OK(cudaLaunchHostFunc(s, on_host, &add));
  OK(cudaEventRecord(stop, s));
  OK(cudaStreamSynchronize(s));
  CHECK("the stream's copy", pinned[0] == 100 && pinned[1023] == 1123);
  CHECK("the host function ran once", host_calls == 5);
  OK(cudaEventQuery(stop));
  float ms = -1;
  OK(cudaEventElapsedTime(&ms, start, stop));
  CHECK("elapsed time >= 0", ms >= 0.0f);
  OK(cudaStreamQuery(s));

  // Managed memory: the host and kernels use one pointer.
  int *m;
  OK(cudaMallocManaged(&m, sizeof(int) * 256));
  for (int i = 0; i < 256; i++) m[i] = -1;
  fill<<<1, 256>>>(m, 7, 256);
  OK(cudaDeviceSynchronize());
  CHECK("managed memory written by a kernel, read by the host", m[0] == 7 && m[255] == 262);
  OK(cudaFree(m));

  // Mapped (zero-copy) host memory.
  int *h, *hd;
  OK(cudaHostAlloc(&h, sizeof(int) * 64, cudaHostAllocMapped));
  OK(cudaHostGetDevicePointer((void **)&hd, h, 0));
  fill<<<1, 64>>>(hd, 1000, 64);
  OK(cudaDeviceSynchronize());
  CHECK("mapped host memory written by a kernel", h[0] == 1000 && h[63] == 1063);
  OK(cudaFreeHost(h));

  // cudaMemset, cudaMemGetInfo, cudaFree(nullptr).
  OK(cudaMemset(dfill, 0xff, sizeof(int) * 1024));
  int word = 0;
  OK(cudaMemcpy(&word, dfill, sizeof word, cudaMemcpyDeviceToHost));
  CHECK("memset 0xff", word == -1);
  size_t free_b = 0, total_b = 0;
  OK(cudaMemGetInfo(&free_b, &total_b));
  CHECK("free <= total", free_b > 0 && free_b <= total_b);
  OK(cudaFree(nullptr));

  // Device printf.
  hello<<<1, 1>>>(42);
  OK(cudaDeviceSynchronize());
  fflush(stdout);

  // Pitched memory: 8 rows of 100 ints.
  int *pm;
  size_t pitch = 0;
  OK(cudaMallocPitch((void **)&pm, &pitch, 100 * sizeof(int), 8));
  CHECK("the pitch is 512-aligned", pitch == 512);
  int rows[8][100], back[8][100];
  for (int r = 0; r < 8; r++)
    for (int c2 = 0; c2 < 100; c2++) rows[r][c2] = r * 1000 + c2;
  OK(cudaMemcpy2D(pm, pitch, rows, sizeof rows[0], sizeof rows[0], 8, cudaMemcpyHostToDevice));
  OK(cudaMemset2D((char *)pm + pitch * 2, pitch, 0, sizeof rows[0], 1));
  OK(cudaMemcpy2D(back, sizeof back[0], pm, pitch, sizeof back[0], 8, cudaMemcpyDeviceToHost));
  CHECK("2-D copies and a row cleared", back[7][99] == 7099 && back[2][50] == 0 && back[3][0] == 3000);
  // As NVIDIA's runtime answers (measured on an H200, CUDA 13.0).
  CHECK("a width wider than the pitch", cudaMemcpy2D(back, 4, pm, pitch, 8, 1, cudaMemcpyDeviceToHost) ==
                                            cudaErrorInvalidValue);
  cudaGetLastError();
  OK(cudaFree(pm));

  // The device heap.
  heap_user<<<4, 128>>>(dfill, 512);
  OK(cudaDeviceSynchronize());
  int heap_out[512];
  OK(cudaMemcpy(heap_out, dfill, sizeof heap_out, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < 512; i++) bad += heap_out[i] != 3 * i + 7;
  CHECK("new/delete and malloc/free in kernels", bad == 0);
  heap_user<<<4, 128>>>(dfill, 512);
  OK(cudaDeviceSynchronize());
  OK(cudaMemcpy(heap_out, dfill, sizeof heap_out, cudaMemcpyDeviceToHost));
  CHECK("the heap is reused after delete and free", heap_out[511] == 3 * 511 + 7);

  // Errors that are not sticky: a bad launch configuration, a bad copy kind.
  fill<<<1, 2048>>>(dfill, 0, 1);
  CHECK("a block of 2048 threads: cudaErrorInvalidValue", cudaGetLastError() == cudaErrorInvalidValue);
  CHECK("the last error is reset", cudaGetLastError() == cudaSuccess);
  CHECK("a bad copy kind", cudaMemcpy(dx, x, 4, (cudaMemcpyKind)9) == cudaErrorInvalidMemcpyDirection);
  CHECK("peek keeps the error", cudaPeekAtLastError() == cudaErrorInvalidMemcpyDirection &&
                                    cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  CHECK("an unregistered kernel", cudaLaunchKernel((const void *)main, dim3(1), dim3(1), nullptr, 0, 0) ==
                                     cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CHECK("error names", strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
  CHECK("error strings", strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
  CHECK("an unsupported entry point", cudaMemcpy3DPeer(nullptr) == cudaErrorNotSupported);
  cudaGetLastError();

  // Kernel attributes and occupancy.
  cudaFuncAttributes fa;
  memset(&fa, 0, sizeof fa);
  OK(cudaFuncGetAttributes(&fa, block_sum));
  CHECK("block_sum: 1 KiB of static shared memory", fa.sharedSizeBytes == 1024);
  CHECK("block_sum: up to 1024 threads, some registers", fa.maxThreadsPerBlock == 1024 && fa.numRegs > 0);
  int per_sm = 0;
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, block_sum, 256, 0));
  CHECK("occupancy: blocks per SM", per_sm >= 1 && per_sm <= 32);
  OK(cudaFuncSetAttribute(fill, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  size_t stack = 0;
  OK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  CHECK("the stack limit", stack == 1024);

  // Stream-ordered allocation, a stream callback, a captured graph launched twice.
  cudaStream_t g;
  OK(cudaStreamCreate(&g));
  int *pool = nullptr;
  OK(cudaMallocAsync(&pool, sizeof(int) * 256, g));
  OK(cudaStreamBeginCapture(g, cudaStreamCaptureModeThreadLocal));
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  OK(cudaStreamIsCapturing(g, &cs));
  CHECK("capturing", cs == cudaStreamCaptureStatusActive);
  fill<<<1, 256, 0, g>>>(pool, 50, 256);
  cudaGraph_t graph;
  OK(cudaStreamEndCapture(g, &graph));
  cudaGraphExec_t exec;
  OK(cudaGraphInstantiate(&exec, graph, 0));
  OK(cudaMemsetAsync(pool, 0, sizeof(int) * 256, g));
  OK(cudaGraphLaunch(exec, g));
  OK(cudaGraphLaunch(exec, g));
  int got[256];
  OK(cudaMemcpyAsync(got, pool, sizeof got, cudaMemcpyDeviceToHost, g));
  OK(cudaStreamSynchronize(g));
  CHECK("the graph's kernel ran", got[0] == 50 && got[255] == 305);
  OK(cudaGraphExecDestroy(exec));
  OK(cudaGraphDestroy(graph));
  OK(cudaFreeAsync(pool, g));
  cudaMemPool_t mp;
  OK(cudaDeviceGetDefaultMemPool(&mp, 0));
  unsigned long long threshold = ~0ull;
  OK(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &threshold));
  int *from_pool = nullptr;
  OK(cudaMallocFromPoolAsync((void **)&from_pool, 64, mp, g));
  OK(cudaFreeAsync(from_pool, g));
  OK(cudaStreamSynchronize(g));
  OK(cudaStreamDestroy(g));

  // What pointers are.
  cudaPointerAttributes pa;
  OK(cudaPointerGetAttributes(&pa, dx));
  CHECK("device memory", pa.type == cudaMemoryTypeDevice && pa.device == 0 && pa.devicePointer == dx);
  OK(cudaPointerGetAttributes(&pa, pinned));
  CHECK("pinned host memory", pa.type == cudaMemoryTypeHost && pa.hostPointer == pinned);
  OK(cudaPointerGetAttributes(&pa, x));
  CHECK("unregistered host memory", pa.type == cudaMemoryTypeUnregistered);

  OK(cudaStreamDestroy(s));
  OK(cudaEventDestroy(start));
  OK(cudaEventDestroy(stop));
  OK(cudaFreeHost(pinned));
  OK(cudaFree(dx));
  OK(cudaFree(dy));
  OK(cudaFree(din));
  OK(cudaFree(dout));

  // Last: an illegal address is sticky.
  fill<<<1, 1>>>((int *)0x10, 0, 1);
  cudaError_t e = cudaDeviceSynchronize();
  CHECK("an illegal address", e == cudaErrorIllegalAddress);
  CHECK("sticky: every later call", cudaMalloc(&dx, 4) == cudaErrorIllegalAddress);

  return summary("runtime_api");
}
