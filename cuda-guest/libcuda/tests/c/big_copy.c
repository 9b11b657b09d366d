/* Copies larger than one protocol frame's inline data (12 MiB against the service's
 * 8 MiB max_inline): synchronous and asynchronous, both directions, with a D2D copy
 * between; every byte checked. */
#include "common.h"

#include <string.h>

int main(void) {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  const size_t bytes = 12u << 20;
  unsigned char *src = malloc(bytes), *dst = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131u + (i >> 20));
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, bytes));
  CHECK(cuMemAlloc(&b, bytes));
  CHECK(cuMemcpyHtoD(a, src, bytes));
  CHECK(cuMemcpyDtoD(b, a, bytes));
  memset(dst, 0, bytes);
  CHECK(cuMemcpyDtoH(dst, b, bytes));
  EXPECT(memcmp(src, dst, bytes) == 0);

  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (size_t i = 0; i < bytes; i++) src[i] ^= 0xa5;
  CHECK(cuMemcpyHtoDAsync(a, src, bytes, s));
  CHECK(cuMemcpyDtoDAsync(b, a, bytes, s));
  memset(dst, 0, bytes);
  CHECK(cuMemcpyDtoHAsync(dst, b, bytes, s));
  CHECK(cuStreamSynchronize(s));
  EXPECT(memcmp(src, dst, bytes) == 0);

  /* Pinned destination: a truly asynchronous copy; a large write follows on another
   * stream before either is synchronised. */
  unsigned char *pin = NULL;
  CHECK(cuMemAllocHost((void **)&pin, bytes));
  memset(pin, 0, bytes);
  CUstream s2;
  CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemcpyDtoHAsync(pin, b, bytes, s));
  for (size_t i = 0; i < bytes; i++) dst[i] = (unsigned char)~src[i];
  CHECK(cuMemcpyHtoDAsync(a, dst, bytes, s2));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuStreamSynchronize(s2));
  EXPECT(memcmp(pin, src, bytes) == 0);
  memset(pin, 0, bytes);
  CHECK(cuMemcpyDtoH(pin, a, bytes));
  EXPECT(memcmp(pin, dst, bytes) == 0);
  CHECK(cuMemFreeHost(pin));
  CHECK(cuStreamDestroy(s2));

  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("big_copy: %zu bytes each way OK\n", bytes);
  return 0;
}
