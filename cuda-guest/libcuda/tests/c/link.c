/* The driver's linker, as numba and cudarc use it: two PTX units built with NVRTC
 * -rdc=true (tests/ptx/link of cuda-guest), one calling a function and reading a
 * variable of the other, joined by cuLinkAddFile/cuLinkAddData and cuLinkComplete, the
 * image loaded with cuModuleLoadData and run. Then what the linker refuses: machine
 * code inputs (NOT_SUPPORTED, named in the error log), an unresolved extern (at
 * cuLinkComplete, named in the log), a bad handle.
 * Usage: link MAIN_PTX LIB_PTX */
#include "common.h"
#include <string.h>

static char error_log[4096];
/* cuda.h: the option arrays stay valid for the link state's life. */
static CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
static void *vals[] = {error_log, (void *)(size_t)sizeof error_log};

static CUlinkState create(void) {
  CUlinkState l;
  /* The size option is in/out: a link writes what it filled there. */
  vals[1] = (void *)(size_t)sizeof error_log;
  CHECK(cuLinkCreate(2, opts, vals, &l));
  return l;
}

int main(int argc, char **argv) {
  EXPECT(argc == 3);
  char *lib = read_file(argv[2]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));

  CUlinkState l = create();
  CHECK(cuLinkAddFile(l, CU_JIT_INPUT_PTX, argv[1], 0, NULL, NULL));
  CHECK(cuLinkAddData(l, CU_JIT_INPUT_PTX, lib, strlen(lib) + 1, "link_lib.ptx", 0, NULL, NULL));
  void *image = NULL;
  size_t size = 0;
  CHECK(cuLinkComplete(l, &image, &size));
  EXPECT(image != NULL && size > strlen(lib));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, image));
  CHECK(cuLinkDestroy(l));
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "scaled_add"));
  int n = 1000;
  float a[1000], r[1000];
  for (int i = 0; i < n; i++) a[i] = (float)i;
  CUdeviceptr da, dout;
  CHECK(cuMemAlloc(&da, sizeof a));
  CHECK(cuMemAlloc(&dout, sizeof r));
  CHECK(cuMemcpyHtoD(da, a, sizeof a));
  void *args[] = {&da, &dout, &n};
  CHECK(cuLaunchKernel(k, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  CHECK(cuMemcpyDtoH(r, dout, sizeof r));
  for (int i = 0; i < n; i++) EXPECT(r[i] == 3.0f * a[i] + 0.5f);
  printf("linked kernel: r[999] = %g\n", r[999]);

  /* Machine code is refused, named in the log. */
  l = create();
  char cubin[16] = {0x7f, 'E', 'L', 'F'};
  CUresult e = cuLinkAddData(l, CU_JIT_INPUT_CUBIN, cubin, sizeof cubin, "k.cubin", 0, NULL, NULL);
  printf("cubin input: %d; log: %s\n", (int)e, error_log);
  EXPECT(e == CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(strstr(error_log, "k.cubin: CU_JIT_INPUT_CUBIN") != NULL);
  /* One unit alone: its externs are unresolved at cuLinkComplete. */
  CHECK(cuLinkAddFile(l, CU_JIT_INPUT_PTX, argv[1], 0, NULL, NULL));
  e = cuLinkComplete(l, &image, &size);
  printf("main alone: %d; log: %s\n", (int)e, error_log);
  EXPECT(e == CUDA_ERROR_INVALID_PTX);
  EXPECT(strstr(error_log, "unresolved extern") != NULL);
  CHECK(cuLinkDestroy(l));
  EXPECT(cuLinkDestroy(l) == CUDA_ERROR_INVALID_HANDLE);
  EXPECT(cuLinkComplete((CUlinkState)(size_t)0x1234, &image, &size) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuModuleUnload(mod));
  printf("link: OK\n");
  return 0;
}
