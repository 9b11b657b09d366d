/* Shared by the test programs: check a driver call, read a PTX file, load one on the
 * primary context. Written against
 * the stock cuda.h only. */
#ifndef VMGPU_SHIM_TEST_COMMON_H
#define VMGPU_SHIM_TEST_COMMON_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                 \
  do {                                                                              \
    CUresult r_ = (call);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                       \
      const char *n_ = NULL;                                                        \
      cuGetErrorName(r_, &n_);                                                      \
      fprintf(stderr, "%s:%d: %s failed: %d %s\n", __FILE__, __LINE__, #call, (int)r_, \
              n_ ? n_ : "?");                                                       \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

#define EXPECT(cond)                                                                \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);           \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static inline char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = (char *)malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(1);
  }
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* cuInit, device 0's primary context retained and pushed current, and the PTX file at
 * `path` loaded into it. */
static inline CUmodule load_on_primary(const char *path, CUdevice *dev, CUcontext *ctx) {
  char *ptx = read_file(path);
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(ctx, *dev));
  CHECK(cuCtxPushCurrent(*ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx));
  free(ptx);
  return mod;
}

#endif
