// The other half of managed_var.cu: a __managed__ variable of a second translation unit
// (its own fatbin and its own lazy initialisation), first used by a kernel, then by the
// host.
#include <cuda_runtime.h>

__managed__ long long lib_total;

__global__ void lib_add(int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd((unsigned long long *)&lib_total, (unsigned long long)(i + 1));
}

// Launches lib_add over n threads and waits: before the host of this unit has touched
// lib_total.
cudaError_t lib_run(int n) {
  lib_add<<<(n + 127) / 128, 128>>>(n);
  return cudaDeviceSynchronize();
}

long long lib_get() { return lib_total; }
void lib_set(long long v) { lib_total = v; }
