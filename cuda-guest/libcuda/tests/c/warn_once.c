/* Unsupported flags and entry points asked for again and again, as programs do in loops:
 * each answers CUDA_ERROR_NOT_SUPPORTED every time, and the library warns about each
 * once; supported calls among them warn about nothing. argv[1]: the vector_add PTX. Prints "warn_once: OK". */
#include "common.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s vector_add.ptx\n", argv[0]);
    return 2;
  }
  char *ptx = read_file(argv[1]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuCtxCreate(&ctx, 0, dev));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx));
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, mod, "vector_add"));
  CUevent ev;
  CHECK(cuEventCreate(&ev, 0));
  for (int i = 0; i < 3; i++) {
    int v = -1;
    /* Supported (every attribute): no warning. */
    EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) == CUDA_SUCCESS);
    EXPECT(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_SUCCESS);
    /* Not settable: the driver's CUDA_ERROR_INVALID_VALUE, no warning. */
    EXPECT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, 1) ==
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuEventRecordWithFlags(ev, NULL, CU_EVENT_RECORD_EXTERNAL) ==
           CUDA_ERROR_NOT_SUPPORTED);
    CUipcMemHandle ipc;
    EXPECT(cuIpcGetMemHandle(&ipc, 0) == CUDA_ERROR_NOT_SUPPORTED);
  }
  CHECK(cuEventDestroy(ev));
  CHECK(cuModuleUnload(mod));
  CHECK(cuCtxDestroy(ctx));
  printf("warn_once: OK\n");
  return 0;
}
