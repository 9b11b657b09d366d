#ifdef __clang__
#ifndef __NVRTC__
#include "common.h"
#define __syncthreads() __syncthreads()
__device__ static unsigned atomicAdd(unsigned* p, unsigned v) {
  return (unsigned)__nvvm_atom_add_gen_i((int*)p, (int)v);
}
#endif
#endif
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void reduce_sum(const float* in, float* out, int n) {
  __shared__ float s[256];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x * 2 + t;
  float v = 0;
  if (i < n) v = in[i];
  if (i + blockDim.x < n) v += in[i + blockDim.x];
  s[t] = v;
  __syncthreads();
  for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
    if (t < st) s[t] += s[t + st];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
#define TILE 16
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
    int ac = t * TILE + threadIdx.x;
    int br = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ac < K) ? A[row * K + ac] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (br < K && col < N) ? B[br * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
// Shared-memory heavy: a 32x32 tile through shared memory (one padding column so that a
// column of the tile falls in 32 banks), blocks of 32x8 threads, four rows each.
#define TT 32
extern "C" __global__ void transpose_shared(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[TT][TT + 1];
  int x = blockIdx.x * TT + threadIdx.x;
  int y = blockIdx.y * TT + threadIdx.y;
  for (int j = 0; j < TT; j += 8)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  __syncthreads();
  x = blockIdx.y * TT + threadIdx.x;
  y = blockIdx.x * TT + threadIdx.y;
  for (int j = 0; j < TT; j += 8)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
// Atomic heavy: every element one atomicAdd on a global bin (grid-stride loop).
extern "C" __global__ void histogram_atomic(const unsigned* in, unsigned* bins, int n, unsigned nbins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&bins[in[i] % nbins], 1u);
}
