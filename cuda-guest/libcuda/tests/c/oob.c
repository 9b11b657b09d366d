/* An out-of-bounds kernel (fixtures/ptx/oob_write: the thread with i == n writes one
 * element past the buffer): the launch succeeds, the next synchronisation returns
 * CUDA_ERROR_ILLEGAL_ADDRESS, which is sticky until the primary context is reset.
 * Usage: oob PTX_FILE */
#include "common.h"

int main(int argc, char **argv) {
  EXPECT(argc == 2);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod = load_on_primary(argv[1], &dev, &ctx);
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "oob_write"));
  int n = 256;
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, n * sizeof(float)));
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  void *args[] = {&out, &n};
  CHECK(cuLaunchKernel(k, 2, 1, 1, 256, 1, 1, 0, s, args, NULL));
  CUresult r = cuStreamSynchronize(s);
  const char *name = NULL;
  cuGetErrorName(r, &name);
  printf("cuStreamSynchronize after the out-of-bounds kernel: %d %s\n", (int)r, name);
  EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
  /* Sticky: later calls of the context fail the same way. */
  EXPECT(cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr other;
  EXPECT(cuMemAlloc(&other, 16) == CUDA_ERROR_ILLEGAL_ADDRESS);
  /* Device queries still work. */
  char nm[128];
  CHECK(cuDeviceGetName(nm, sizeof nm, dev));
  /* A reset gives a working context again. */
  CHECK(cuDevicePrimaryCtxReset(dev));
  CUdeviceptr fresh;
  CHECK(cuMemAlloc(&fresh, 16));
  unsigned v[4] = {1, 2, 3, 4}, w[4] = {0};
  CHECK(cuMemcpyHtoD(fresh, v, sizeof v));
  CHECK(cuMemcpyDtoH(w, fresh, sizeof w));
  EXPECT(w[3] == 4);
  CHECK(cuCtxSynchronize());
  CUcontext popped = NULL;
  CHECK(cuCtxPopCurrent(&popped));
  EXPECT(popped == ctx);
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("oob: OK\n");
  return 0;
}
