/* Device printf and assert through the driver API (tests/ptx/device_io.nvrtc.ptx of
 * cuda-guest): the kernel's lines come after the program's own output and before what
 * it prints next; a failed assert is CUDA_ERROR_ASSERT at the next synchronisation,
 * sticky until the primary context is reset; the assertion's line goes to stderr.
 * Usage: device_io PTX_FILE */
#include "common.h"

int main(int argc, char **argv) {
  EXPECT(argc == 2);
  char *ptx = read_file(argv[1]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx));
  CUfunction hello, check;
  CHECK(cuModuleGetFunction(&hello, mod, "hello"));
  CHECK(cuModuleGetFunction(&check, mod, "check"));
  int n = 3;
  double x = 1.5;
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, 64 * sizeof(int)));
  printf("before the kernel\n");
  void *hargs[] = {&out, &n, &x};
  CHECK(cuLaunchKernel(hello, 1, 1, 1, 32, 1, 1, 0, NULL, hargs, NULL));
  CHECK(cuCtxSynchronize());
  printf("after the kernel\n");
  int r[3];
  CHECK(cuMemcpyDtoH(r, out, sizeof r));
  printf("printf returned %d %d %d\n", r[0], r[1], r[2]);
  int in[64];
  for (int i = 0; i < 64; i++) in[i] = i == 33 ? 7 : 1;
  CHECK(cuMemcpyHtoD(out, in, sizeof in));
  int m = 64;
  void *cargs[] = {&out, &m};
  CHECK(cuLaunchKernel(check, 2, 1, 1, 32, 1, 1, 0, NULL, cargs, NULL));
  CUresult e = cuCtxSynchronize();
  const char *name = NULL;
  cuGetErrorName(e, &name);
  printf("after the failed assert: %d %s\n", (int)e, name);
  EXPECT(e == CUDA_ERROR_ASSERT);
  EXPECT(cuMemAlloc(&out, 16) == CUDA_ERROR_ASSERT);
  CHECK(cuDevicePrimaryCtxReset(dev));
  CUdeviceptr fresh;
  CHECK(cuMemAlloc(&fresh, 16));
  printf("device_io: OK\n");
  return 0;
}
