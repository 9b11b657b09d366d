/* A kernel that never ends (fixtures/ptx/infinite_loop) stopped by the simulator's
 * launch time limit (VMGPU_SIM_TIMEOUT): the synchronisation returns
 * CUDA_ERROR_LAUNCH_TIMEOUT. Usage: timeout PTX_FILE */
#include "common.h"

int main(int argc, char **argv) {
  EXPECT(argc == 2);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod = load_on_primary(argv[1], &dev, &ctx);
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "infinite_loop"));
  CUdeviceptr flag, spins;
  CHECK(cuMemAlloc(&flag, 4));
  CHECK(cuMemsetD32(flag, 0, 1));
  CHECK(cuMemAlloc(&spins, 32 * 4));
  void *args[] = {&flag, &spins};
  CHECK(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CUresult r = cuCtxSynchronize();
  const char *name = NULL;
  cuGetErrorName(r, &name);
  printf("cuCtxSynchronize after the endless kernel: %d %s\n", (int)r, name);
  EXPECT(r == CUDA_ERROR_LAUNCH_TIMEOUT);
  printf("timeout: OK\n");
  return 0;
}
