/* The driver's answers at the boundary: calls before cuInit, without a context, with
 * null pointers, bad ordinals and stale handles; the per-thread context stack; an
 * unsupported entry point. Prints "errors: N checks OK". */
#include "common.h"

#include <pthread.h>
#include <string.h>

static int checks;
#define IS(call, want)                                                                  \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != (want)) {                                                                 \
      fprintf(stderr, "%s:%d: %s = %d, expected %d\n", __FILE__, __LINE__, #call, (int)r_, \
              (int)(want));                                                             \
      exit(1);                                                                          \
    }                                                                                   \
    checks++;                                                                           \
  } while (0)

static void *other_thread(void *arg) {
  CUcontext cur = (CUcontext)1;
  /* A new thread has no current context. */
  IS(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT(cur == NULL);
  CUdeviceptr p;
  IS(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  IS(cuCtxSetCurrent((CUcontext)arg), CUDA_SUCCESS);
  IS(cuMemAlloc(&p, 16), CUDA_SUCCESS);
  IS(cuMemFree(p), CUDA_SUCCESS);
  return NULL;
}

int main(void) {
  int n = 0;
  CUdevice dev = 0;
  /* Before cuInit. */
  IS(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  IS(cuDriverGetVersion(&n), CUDA_SUCCESS);
  EXPECT(n >= 12000);
  const char *s = NULL;
  IS(cuGetErrorString(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  EXPECT(strcmp(s, "initialization error") == 0);
  IS(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  IS(cuInit(0), CUDA_SUCCESS);

  /* Bad arguments. */
  IS(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
  IS(cuDeviceGet(&dev, 99), CUDA_ERROR_INVALID_DEVICE);
  IS(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  IS(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  char name[8];
  IS(cuDeviceGetName(name, sizeof name, dev), CUDA_SUCCESS);
  EXPECT(strlen(name) == sizeof name - 1); /* truncated, NUL-terminated */
  IS(cuDeviceGetName(NULL, 8, dev), CUDA_ERROR_INVALID_VALUE);
  int v = 0;
  IS(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev), CUDA_SUCCESS);
  EXPECT(v == 32);
  IS(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev), CUDA_ERROR_INVALID_VALUE);
  IS(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 7), CUDA_ERROR_INVALID_DEVICE);
  v = -1;
  /* cuMemAllocAsync works, as on an H100. */
  IS(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev), CUDA_SUCCESS);
  EXPECT(v == 1);
  IS(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev),
     CUDA_SUCCESS);
  EXPECT(v == 65536);
  IS(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, dev), CUDA_ERROR_INVALID_VALUE);
  char bus[32];
  IS(cuDeviceGetPCIBusId(bus, sizeof bus, dev), CUDA_SUCCESS);
  CUdevice again = -1;
  IS(cuDeviceGetByPCIBusId(&again, bus), CUDA_SUCCESS);
  EXPECT(again == dev);
  CUuuid uuid;
  IS(cuDeviceGetUuid(&uuid, dev), CUDA_SUCCESS);
  int major = 0, minor = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  IS(cuDeviceComputeCapability(&major, &minor, dev), CUDA_SUCCESS);
#pragma GCC diagnostic pop
  EXPECT(major >= 5);

  /* No context. */
  IS(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr p;
  IS(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext popped;
  IS(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);

  /* The context stack. */
  CUcontext primary, cur;
  IS(cuDevicePrimaryCtxRetain(NULL, dev), CUDA_ERROR_INVALID_VALUE);
  IS(cuDevicePrimaryCtxRetain(&primary, dev), CUDA_SUCCESS);
  unsigned flags = 1;
  int active = 0;
  IS(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  EXPECT(active == 1);
  IS(cuCtxPushCurrent(primary), CUDA_SUCCESS);
  IS(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT(cur == primary);
  CUdevice d2 = -1;
  IS(cuCtxGetDevice(&d2), CUDA_SUCCESS);
  EXPECT(d2 == dev);
  IS(cuCtxSetCurrent(NULL), CUDA_SUCCESS); /* pops */
  IS(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT(cur == NULL);
  IS(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  unsigned api = 0;
  IS(cuCtxGetApiVersion(NULL, &api), CUDA_SUCCESS);
  EXPECT(api == 3020);

  /* Another thread has a stack of its own. */
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, other_thread, primary) == 0);
  EXPECT(pthread_join(t, NULL) == 0);
  IS(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT(cur == primary);

  /* Memory. */
  IS(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  IS(cuMemAlloc(&p, 64), CUDA_SUCCESS);
  IS(cuMemFree(p + 8), CUDA_ERROR_INVALID_VALUE); /* not the start of an allocation */
  unsigned buf[16] = {0};
  IS(cuMemcpyHtoD(p, NULL, 4), CUDA_ERROR_INVALID_VALUE);
  IS(cuMemcpyHtoD(p + 60, buf, 8), CUDA_ERROR_INVALID_VALUE); /* past the end */
  IS(cuMemsetD32(p + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);    /* misaligned */
  IS(cuMemFree(p), CUDA_SUCCESS);
  IS(cuMemFree(0), CUDA_SUCCESS);
  size_t free_b = 0;
  IS(cuMemGetInfo(&free_b, NULL), CUDA_ERROR_INVALID_VALUE);

  /* Stale handles. */
  CUstream st;
  IS(cuStreamCreate(&st, 0x40), CUDA_ERROR_INVALID_VALUE);
  IS(cuStreamCreate(&st, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  IS(cuStreamQuery(st), CUDA_SUCCESS);
  IS(cuStreamDestroy(st), CUDA_SUCCESS);
  IS(cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
  CUevent ev;
  IS(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  IS(cuEventRecord(ev, NULL), CUDA_SUCCESS);
  IS(cuEventSynchronize(ev), CUDA_SUCCESS);
  float ms;
  IS(cuEventElapsedTime(&ms, ev, ev), CUDA_ERROR_INVALID_HANDLE);
  IS(cuEventDestroy(ev), CUDA_SUCCESS);
  CUmodule mod;
  IS(cuModuleLoadData(&mod, NULL), CUDA_ERROR_INVALID_VALUE);
  IS(cuModuleLoadData(&mod, ".version 7.0\n.target sm_80\n.address_size 64\n"
                            ".visible .entry e()\n{\n ret;\n}\n"),
     CUDA_SUCCESS);
  CUfunction f;
  IS(cuModuleGetFunction(&f, mod, NULL), CUDA_ERROR_INVALID_VALUE);
  IS(cuModuleGetFunction(&f, mod, "e"), CUDA_SUCCESS);
  IS(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  IS(cuModuleUnload(mod), CUDA_SUCCESS);
  IS(cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
  IS(cuCtxSynchronize(), CUDA_SUCCESS);

  /* An unsupported entry point. */
  CUipcMemHandle ipc;
  IS(cuIpcGetMemHandle(&ipc, p), CUDA_ERROR_NOT_SUPPORTED);

  IS(cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
  printf("errors: %d checks OK\n", checks);
  return 0;
}
