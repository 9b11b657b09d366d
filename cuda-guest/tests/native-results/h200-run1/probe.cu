// What NVIDIA's runtime answers where vmgpu's test programs expect vmgpu's answers.
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
__global__ void fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
int main() {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q);
  CUdeviceptr dp = 0;
  CUresult r = fn ? ((CUresult(*)(CUdeviceptr *, size_t))fn)(&dp, 1024) : CUDA_ERROR_UNKNOWN;
  printf("entry point before any runtime call: %d q=%d, cuMemAlloc -> %d\n", e, (int)q, (int)r);
  cudaFree(0);
  r = ((CUresult(*)(CUdeviceptr *, size_t))fn)(&dp, 1024);
  printf("after cudaFree(0): cuMemAlloc -> %d\n", (int)r);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  for (int i = 0; i < 56; i++)
    if (prop.reserved[i]) printf("reserved[%d] = %d (%#x)\n", i, prop.reserved[i], prop.reserved[i]);
  int *pm;
  size_t pitch;
  cudaMallocPitch((void **)&pm, &pitch, 400, 8);
  int back[8][100];
  e = cudaMemcpy2D(back, 4, pm, pitch, 8, 1, cudaMemcpyDeviceToHost);
  printf("width 8 > dpitch 4: %d %s\n", e, cudaGetErrorName(e));
  printf("then last error: %d\n", cudaGetLastError());
  int *d;
  cudaMalloc(&d, 4096);
  fill<<<1, 2048>>>(d, 0, 1);
  e = cudaGetLastError();
  printf("block of 2048: %d %s; then %d\n", e, cudaGetErrorName(e), cudaGetLastError());
  e = cudaLaunchKernel((const void *)main, dim3(1), dim3(1), nullptr, 0, 0);
  printf("unregistered kernel: %d %s; then %d\n", e, cudaGetErrorName(e), cudaGetLastError());
  e = cudaMemcpy3DPeer(nullptr);
  printf("cudaMemcpy3DPeer(nullptr): %d %s\n", e, cudaGetErrorName(e));
  return 0;
}
