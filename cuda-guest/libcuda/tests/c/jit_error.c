/* A module that does not compile: cuModuleLoadDataEx fails with
 * CUDA_ERROR_INVALID_PTX and fills the JIT error log, which is printed. The context is
 * fine afterwards. */
#include "common.h"

#include <string.h>

static const char *bad_ptx =
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry k(.param .u64 p)\n"
    "{\n"
    "    frobnicate.u32 %r1, 3;\n"
    "    ret;\n"
    "}\n";

static const char *good_ptx =
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry empty()\n"
    "{\n"
    "    ret;\n"
    "}\n";

int main(void) {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuCtxCreate(&ctx, 0, dev));

  char error_log[8192];
  char info_log[8192];
  memset(error_log, 'x', sizeof error_log);
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {error_log, (void *)(size_t)sizeof error_log, info_log,
                  (void *)(size_t)sizeof info_log};
  CUmodule mod;
  CUresult r = cuModuleLoadDataEx(&mod, bad_ptx, 4, opts, vals);
  const char *name = NULL, *desc = NULL;
  CHECK(cuGetErrorName(r, &name));
  CHECK(cuGetErrorString(r, &desc));
  printf("cuModuleLoadDataEx: %d %s (%s)\n", (int)r, name, desc);
  EXPECT(r == CUDA_ERROR_INVALID_PTX);
  size_t filled = (size_t)vals[1];
  EXPECT(filled > 0 && filled < sizeof error_log && error_log[filled] == 0);
  EXPECT(strlen(error_log) == filled);
  printf("JIT error log (%zu bytes):\n%s\n", filled, error_log);
  EXPECT(strstr(error_log, "error") != NULL);
  EXPECT(strstr(error_log, "frobnicate") != NULL);

  /* A syntax error, through cuModuleLoadData. */
  EXPECT(cuModuleLoadData(&mod, ".version 7.0\n.target sm_80\n.entry k( {\n") ==
         CUDA_ERROR_INVALID_PTX);
  /* An unknown error code has no name. */
  EXPECT(cuGetErrorName((CUresult)12345, &name) == CUDA_ERROR_INVALID_VALUE);

  /* The context works afterwards. */
  CHECK(cuModuleLoadData(&mod, good_ptx));
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "empty"));
  CHECK(cuLaunchKernel(k, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
  CHECK(cuCtxSynchronize());
  CHECK(cuModuleUnload(mod));
  CHECK(cuCtxDestroy(ctx));
  printf("jit_error: OK\n");
  return 0;
}
