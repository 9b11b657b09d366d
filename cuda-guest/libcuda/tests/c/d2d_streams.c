/* A device-to-device copy chain on two streams ordered by events: pinned upload on s1,
 * D2D on s1, event; s2 waits for it, copies on, reverses halves, downloads. Also 16-bit
 * and 32-bit async memsets, stream and event queries and elapsed time. */
#include "common.h"

#include <string.h>

int main(void) {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));

  const size_t n = 1 << 20;
  const size_t bytes = n * sizeof(unsigned);
  unsigned *host = NULL, *back = NULL;
  CHECK(cuMemAllocHost((void **)&host, bytes));
  CHECK(cuMemHostAlloc((void **)&back, bytes, 0));
  for (size_t i = 0; i < n; i++) host[i] = (unsigned)i ^ 0x5a5au;

  CUdeviceptr a, b, c, d;
  CHECK(cuMemAlloc(&a, bytes));
  CHECK(cuMemAlloc(&b, bytes));
  CHECK(cuMemAlloc(&c, bytes));
  CHECK(cuMemAlloc(&d, bytes));
  CUstream s1, s2;
  CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent start, mid, end;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&mid, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));

  CHECK(cuMemsetD32Async(d, 0xdeadbeefu, n, s2));
  CHECK(cuEventRecord(start, s1));
  CHECK(cuMemcpyHtoDAsync(a, host, bytes, s1));
  CHECK(cuMemcpyDtoDAsync(b, a, bytes, s1));
  CHECK(cuEventRecord(mid, s1));
  CHECK(cuStreamWaitEvent(s2, mid, 0));
  CHECK(cuMemcpyDtoDAsync(c, b, bytes, s2));
  /* d[0 .. n/2) = c[n/2 .. n) */
  CHECK(cuMemcpyDtoDAsync(d, c + bytes / 2, bytes / 2, s2));
  CHECK(cuMemsetD16Async(d + bytes / 2, 0x1234, 4, s2));
  CHECK(cuMemcpyDtoHAsync(back, d, bytes, s2));
  CHECK(cuEventRecord(end, s2));
  CHECK(cuEventSynchronize(end));
  CHECK(cuEventQuery(end));
  CHECK(cuStreamQuery(s1));
  CHECK(cuStreamQuery(s2));

  for (size_t i = 0; i < n / 2; i++) {
    if (back[i] != ((unsigned)(n / 2 + i) ^ 0x5a5au)) {
      fprintf(stderr, "back[%zu] = %#x\n", i, back[i]);
      return 1;
    }
  }
  EXPECT(back[n / 2] == 0x12341234u && back[n / 2 + 1] == 0x12341234u);
  EXPECT(back[n / 2 + 2] == 0xdeadbeefu && back[n - 1] == 0xdeadbeefu);

  float total = -1.0f, first = -1.0f;
  CHECK(cuEventElapsedTime(&total, start, end));
  CHECK(cuEventElapsedTime(&first, start, mid));
  EXPECT(total >= first && first >= 0.0f);

  /* Synchronous copies and memsets on the legacy default stream. */
  CHECK(cuMemsetD8(a, 0x01, 3));
  unsigned word = 0;
  CHECK(cuMemcpyDtoH(&word, a, 4));
  EXPECT(word == 0x00010101u);
  CHECK(cuMemsetD16(a, 0xbeef, 2));
  CHECK(cuMemcpyDtoH(&word, a, 4));
  EXPECT(word == 0xbeefbeefu);

  /* Registered host memory. */
  static unsigned reg[4096] __attribute__((aligned(4096)));
  for (int i = 0; i < 4096; i++) reg[i] = 7u * (unsigned)i;
  CHECK(cuMemHostRegister(reg, sizeof reg, 0));
  CHECK(cuMemcpyHtoDAsync(a, reg, sizeof reg, s1));
  CHECK(cuStreamSynchronize(s1));
  CHECK(cuMemHostUnregister(reg));
  CHECK(cuMemcpyDtoH(&word, a + 4 * 4095, 4));
  EXPECT(word == 7u * 4095u);

  CHECK(cuEventDestroy(start));
  CHECK(cuEventDestroy(mid));
  CHECK(cuEventDestroy(end));
  CHECK(cuStreamDestroy(s1));
  CHECK(cuStreamDestroy(s2));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFree(c));
  CHECK(cuMemFree(d));
  CHECK(cuMemFreeHost(host));
  CHECK(cuMemFreeHost(back));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  printf("d2d_streams: %zu words OK, %.3f ms from start to end\n", n, total);
  return 0;
}
