#include <cstdio>
#include <cuda_runtime.h>
int main() {
  float *d; size_t pitch; cudaMallocPitch((void **)&d, &pitch, 64 * sizeof(float), 4);
  float back[4][64];
  for (int h = 1; h <= 2; h++) {
    cudaError_t e = cudaMemcpy2D(back, 4, d, pitch, 8, h, cudaMemcpyDeviceToHost);
    printf("dpitch 4 width 8 height %d: %d %s\n", h, e, cudaGetErrorName(e)); cudaGetLastError();
  }
  cudaError_t e = cudaMemcpy2D(back, 256, d, 4, 8, 2, cudaMemcpyDeviceToHost);
  printf("spitch 4 width 8 height 2: %d %s\n", e, cudaGetErrorName(e)); cudaGetLastError();
  e = cudaMemset2D(d, 4, 0, 8, 2);
  printf("memset2D pitch 4 width 8: %d %s\n", e, cudaGetErrorName(e));
}
