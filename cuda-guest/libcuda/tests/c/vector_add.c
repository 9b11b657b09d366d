/* vector_add: c = a + b over 1000 floats (a partial last block), with the PTX that
 * NVRTC made from fixtures/ptx/vector_add.cu. Usage: vector_add PTX_FILE */
#include "common.h"

#include <string.h>

int main(int argc, char **argv) {
  EXPECT(argc == 2);
  char *ptx = read_file(argv[1]);
  CHECK(cuInit(0));
  int version = 0, count = 0;
  CHECK(cuDriverGetVersion(&version));
  CHECK(cuDeviceGetCount(&count));
  EXPECT(count >= 1);
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  char name[256];
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  int major = 0, minor = 0;
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  size_t total = 0;
  CHECK(cuDeviceTotalMem(&total, dev));
  printf("device: %s, sm_%d%d, %zu MiB, driver %d\n", name, major, minor, total >> 20, version);

  CUcontext ctx;
  CHECK(cuCtxCreate(&ctx, 0, dev));
  CUcontext cur = NULL;
  CHECK(cuCtxGetCurrent(&cur));
  EXPECT(cur == ctx);

  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx));
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "vector_add"));
  EXPECT(cuModuleGetFunction(&k, mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuModuleGetFunction(&k, mod, "vector_add"));

  int n = 1000;
  size_t bytes = n * sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
  for (int i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i;
    c[i] = -1.0f;
  }
  CUdeviceptr da, db, dc;
  CHECK(cuMemAlloc(&da, bytes));
  CHECK(cuMemAlloc(&db, bytes));
  CHECK(cuMemAlloc(&dc, bytes));
  size_t free_mem = 0, total_mem = 0;
  CHECK(cuMemGetInfo(&free_mem, &total_mem));
  EXPECT(free_mem <= total_mem && total_mem - free_mem >= 3 * bytes);
  CHECK(cuMemcpyHtoD(da, a, bytes));
  CHECK(cuMemcpyHtoD(db, b, bytes));
  CHECK(cuMemsetD32(dc, 0, n));
  void *args[] = {&da, &db, &dc, &n};
  CHECK(cuLaunchKernel(k, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(c, dc, bytes));
  for (int i = 0; i < n; i++) {
    if (c[i] != a[i] + b[i]) {
      fprintf(stderr, "c[%d] = %f, expected %f\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }

  /* The same launch with the parameters packed in one buffer (`extra`). */
  struct {
    CUdeviceptr a, b, c;
    int n;
  } packed = {db, db, dc, 500};
  size_t packed_size = sizeof packed;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  CHECK(cuLaunchKernel(k, 2, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
  CHECK(cuMemcpyDtoH(c, dc, bytes));
  EXPECT(c[499] == 2.0f * b[499] && c[500] == a[500] + b[500]);

  /* Errors come back as the driver's. */
  EXPECT(cuMemAlloc(NULL, 16) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuLaunchKernel(k, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuMemFree(da));
  CHECK(cuMemFree(db));
  CHECK(cuMemFree(dc));
  CHECK(cuModuleUnload(mod));
  CHECK(cuCtxDestroy(ctx));
  printf("vector_add: %d elements OK (c[999] = %.1f)\n", n, c[999]);
  return 0;
}
