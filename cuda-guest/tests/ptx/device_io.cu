// Device printf, assert and trap, as programs write them (NVRTC has printf and assert
// built in; under clang they are declared here, as CUDA's headers declare them).
#ifdef __clang__
#ifndef __NVRTC__
#include "common.h"
typedef unsigned long size_t;
extern "C" __device__ int printf(const char *, ...);
extern "C" __device__ void __assertfail(const char *, const char *, unsigned, const char *, size_t);
#define assert(e) ((e) ? (void)0 : __assertfail(#e, "device_io.cu", __LINE__, __func__, 1))
#define __trap() __builtin_trap()
#endif
#endif
extern "C" __global__ void hello(int *out, int n, double x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = printf("thread %d of %d: x=%.3f %s|%5.1e|%c|%lld\n", i, n, x * i, "ok", 1234.5,
                    'A' + i, -9000000000LL);
  }
}
extern "C" __global__ void check(const int *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    assert(in[i] != 7);
  }
}
extern "C" __global__ void boom(int *out) {
  out[threadIdx.x] = 1;
  if (threadIdx.x == 3) __trap();
}
