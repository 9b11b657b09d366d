// Runtime entry points that libraries built on CUDA call (PyTorch, cuda.core, CUTLASS):
// driver entry points through the runtime, stream and device queries, the thread's
// capture mode, user objects and graph upload, kernel names and occupancy.
// Prints one line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"

__global__ void scale(float *p, float k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= k;
}

static int destroyed;
static void destroy(void *p) { destroyed += *(int *)p; }

int main() {
  // The driver through the runtime: cuMemAlloc and cuMemFree by name. A runtime call
  // first: NVIDIA's runtime makes its context current at the first call that needs
  // one, not at cudaGetDriverEntryPoint (cuMemAlloc then answers 201).
  OK(cudaFree(0));
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q));
  CHECK("cuMemAlloc found (cudaDriverEntryPointSuccess)", fn != nullptr && q == cudaDriverEntryPointSuccess);
  CUdeviceptr d = 0;
  CUresult r = ((CUresult(*)(CUdeviceptr *, size_t))fn)(&d, 1024);
  CHECK("the driver's cuMemAlloc, called through the pointer, allocates", r == CUDA_SUCCESS && d != 0);
  void *fr = nullptr;
  OK(cudaGetDriverEntryPointByVersion("cuMemFree", &fr, 12000, cudaEnableDefault, &q));
  CHECK("cuMemFree frees it", fr && ((CUresult(*)(CUdeviceptr))fr)(d) == CUDA_SUCCESS);
  void *none = (void *)1;
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuNoSuchEntryPoint", &none, 12000, cudaEnableDefault, &q);
  printf("     unknown symbol: %s, status %d\n", cudaGetErrorName(e), (int)q);
  CHECK("an unknown symbol is reported as not found", q == cudaDriverEntryPointSymbolNotFound && none == nullptr);
  cudaGetLastError();

  // Stream queries.
  cudaStream_t s, nb;
  OK(cudaStreamCreate(&s));
  OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  unsigned flags = 99;
  OK(cudaStreamGetFlags(nb, &flags));
  CHECK("a non-blocking stream's flags", flags == cudaStreamNonBlocking);
  OK(cudaStreamGetFlags(s, &flags));
  CHECK("a plain stream's flags", flags == cudaStreamDefault);
  int prio = 99, least = 99, greatest = 99;
  OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  OK(cudaStreamGetPriority(s, &prio));
  CHECK("a stream's priority lies in the device's range", prio <= least && prio >= greatest);
  unsigned long long id1 = 0, id2 = 0;
  OK(cudaStreamGetId(s, &id1));
  OK(cudaStreamGetId(nb, &id2));
  CHECK("stream ids differ", id1 != id2);
  int sdev = -1;
  OK(cudaStreamGetDevice(s, &sdev));
  CHECK("cudaStreamGetDevice names device 0", sdev == 0);

  // Device queries.
  int dev = -1;
  cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  prop.major = 8;
  OK(cudaChooseDevice(&dev, &prop));
  CHECK("cudaChooseDevice picks device 0", dev == 0);
  OK(cudaInitDevice(0, 0, 0));
  char bus[32] = {0};
  OK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  int byBus = -1;
  OK(cudaDeviceGetByPCIBusId(&byBus, bus));
  CHECK("cudaDeviceGetByPCIBusId finds device 0 by its own bus id", byBus == 0);
  unsigned dflags = 0xffff;
  OK(cudaGetDeviceFlags(&dflags));
  printf("     device flags %#x, bus id %s\n", dflags, bus);
  cudaFuncCache cache = cudaFuncCachePreferL1;
  OK(cudaDeviceGetCacheConfig(&cache));

  // Kernel name and occupancy.
  const char *name = nullptr;
  OK(cudaFuncGetName(&name, (const void *)scale));
  printf("     kernel name: %s\n", name ? name : "(null)");
  CHECK("cudaFuncGetName gives the mangled device name", name && strcmp(name, "_Z5scalePffi") == 0);
  size_t smem = 0;
  OK(cudaOccupancyAvailableDynamicSMemPerBlock(&smem, (const void *)scale, 1, 128));
  CHECK("dynamic shared memory available to one block of 128", smem > 0);

  // The thread's capture mode is exchanged.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK("the thread's mode was global", mode == cudaStreamCaptureModeGlobal);
  OK(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK("and is relaxed when exchanged back", mode == cudaStreamCaptureModeRelaxed);

  // A captured graph owning a user object, uploaded and launched; the object's
  // destructor runs once the graph and the program have released it.
  float *p;
  const int n = 1000;
  OK(cudaMalloc(&p, n * sizeof(float)));
  float h[n];
  for (int i = 0; i < n; i++) h[i] = (float)i;
  OK(cudaMemcpy(p, h, sizeof h, cudaMemcpyHostToDevice));
  cudaGraph_t g;
  cudaGraphExec_t x;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale<<<(n + 127) / 128, 128, 0, s>>>(p, 3.0f, n);
  OK(cudaStreamEndCapture(s, &g));
  static int token = 7;
  cudaUserObject_t obj;
  OK(cudaUserObjectCreate(&obj, &token, destroy, 1, cudaUserObjectNoDestructorSync));
  OK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
  OK(cudaGraphInstantiate(&x, g, 0));
  OK(cudaGraphUpload(x, s));
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost));
  CHECK("the uploaded graph ran (h[999] = 2997)", h[999] == 2997.0f && h[1] == 3.0f);
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(g));
  OK(cudaDeviceSynchronize());
  // NVIDIA's runtime calls user objects' destructors from a thread of its own, later.
  for (int i = 0; i < 500 && destroyed != 7; i++) usleep(2000);
  printf("     destructor ran: %d\n", destroyed);
  CHECK("the user object's destructor ran once the graph was gone", destroyed == 7);
  // cudaLaunchKernelEx (the C++ template over cudaLaunchKernelExC), with an attribute.
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3((n + 127) / 128);
  lc.blockDim = dim3(128);
  lc.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributePriority;
  attr[0].val.priority = 0;
  lc.attrs = attr;
  lc.numAttrs = 1;
  OK(cudaLaunchKernelEx(&lc, scale, p, 2.0f, n));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost));
  CHECK("cudaLaunchKernelEx doubled every element (h[999] = 5994)", h[999] == 5994.0f);
  OK(cudaFree(p));
  OK(cudaStreamDestroy(s));
  OK(cudaStreamDestroy(nb));
  return summary("runtime_queries");
}
