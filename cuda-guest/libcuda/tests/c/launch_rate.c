/* Launch rate: N empty kernels on one stream, then one synchronisation; prints
 * launches per second. Usage: launch_rate [N] */
#include "common.h"

#include <time.h>

static const char *empty_ptx =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry empty()\n{\n    ret;\n}\n";

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, empty_ptx));
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "empty"));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
  CHECK(cuStreamSynchronize(s));
  double t0 = now();
  for (int i = 0; i < n; i++) CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
  double t1 = now();
  CHECK(cuStreamSynchronize(s));
  double t2 = now();
  printf("launch_rate: %d launches, %.0f/s submitted, %.0f/s completed\n", n, n / (t1 - t0),
         n / (t2 - t0));
  CHECK(cuModuleUnload(mod));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
