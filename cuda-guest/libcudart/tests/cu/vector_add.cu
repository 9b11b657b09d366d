// The smallest nvcc program: a vector add through <<<>>>, checked. Built in several
// ways (PTX zstd-compressed, LZ4, plain, beside machine code) by the tests.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 5000;
  float *a = new float[n], *b = new float[n], *c = new float[n];
  for (int i = 0; i < n; i++) { a[i] = i; b[i] = 0.5f * i; }
  float *da, *db, *dc;
  cudaMalloc(&da, n * sizeof(float));
  cudaMalloc(&db, n * sizeof(float));
  cudaMalloc(&dc, n * sizeof(float));
  cudaMemcpy(da, a, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b, n * sizeof(float), cudaMemcpyHostToDevice);
  add<<<(n + 127) / 128, 128>>>(da, db, dc, n);
  cudaError_t e = cudaGetLastError();
  cudaMemcpy(c, dc, n * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; i++) bad += c[i] != a[i] + b[i];
  printf("vector_add: %s, %d of %d wrong\n", cudaGetErrorName(e), bad, n);
  return bad != 0 || e != cudaSuccess;
}
