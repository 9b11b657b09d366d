// Separate compilation (-rdc=true): a kernel calls a __device__ function and reads a
// __device__ variable defined in another file (rdc_lib.cu).
#include <cstdio>
#include <cuda_runtime.h>

extern __device__ float scale_by(float x);
extern __device__ float offset;

__global__ void apply(float *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = scale_by(v[i]) + offset;
}

int main() {
  const int n = 1000;
  float h[n];
  for (int i = 0; i < n; i++) h[i] = i;
  float *d;
  cudaMalloc(&d, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  apply<<<(n + 127) / 128, 128>>>(d, n);
  cudaError_t e = cudaGetLastError();
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; i++) bad += h[i] != 3.0f * i + 0.5f;
  printf("rdc: %s, %d of %d wrong\n", cudaGetErrorName(e), bad, n);
  return bad != 0 || e != cudaSuccess;
}
