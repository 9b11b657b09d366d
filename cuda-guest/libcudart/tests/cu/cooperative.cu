// Cooperative launches: cooperative groups' grid.sync() across every block of a grid
// (cudaLaunchCooperativeKernel, and cudaLaunchKernelExC with the cooperative
// attribute), a grid larger than the device holds at once refused.
#include <cooperative_groups.h>

#include <cstdio>

#include "check.h"
namespace cg = cooperative_groups;

// Phase 1 writes each element; after the grid-wide barrier every thread reads an element
// another block wrote, and adds it to a grid total; after a second barrier one thread
// copies the total out.
__global__ void rotate_and_sum(int *data, int *out, unsigned long long *total, int n) {
  cg::grid_group grid = cg::this_grid();
  int i = (int)grid.thread_rank();
  data[i] = 3 * i + 1;
  grid.sync();
  int j = (i + blockDim.x + 1) % n;  // an element of the next block
  out[i] = data[j];
  atomicAdd(total, (unsigned long long)data[j]);
  grid.sync();
  if (i == 0) out[n] = (int)(*total % 1000003);
}

int main() {
  char what[200];
  int coop = 0, sms = 0, per_sm = 0;
  OK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rotate_and_sum, 128, 0));
  snprintf(what, sizeof what, "cooperative launches: attribute %d, %d blocks of 128 per multiprocessor", coop,
           per_sm);
  CHECK(what, coop == 1 && per_sm >= 1);

  const int blocks = 48, threads = 128, n = blocks * threads;
  int *data, *out;
  unsigned long long *total;
  OK(cudaMalloc(&data, n * sizeof(int)));
  OK(cudaMalloc(&out, (n + 1) * sizeof(int)));
  OK(cudaMalloc(&total, sizeof *total));
  long long want_total = 0;
  for (int i = 0; i < n; i++) want_total += 3LL * i + 1;
  int nn = n;
  void *args[] = {&data, &out, &total, &nn};
  static int h[blocks * threads + 1];
  for (int way = 0; way < 2; way++) {
    OK(cudaMemset(total, 0, sizeof *total));
    OK(cudaMemset(out, 0, (n + 1) * sizeof(int)));
    if (way == 0) {
      OK(cudaLaunchCooperativeKernel((void *)rotate_and_sum, blocks, threads, args, 0, 0));
    } else {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(threads);
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeCooperative;
      attr.val.cooperative = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      OK(cudaLaunchKernelExC(&cfg, (void *)rotate_and_sum, args));
    }
    OK(cudaDeviceSynchronize());
    OK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != 3 * ((i + threads + 1) % n) + 1;
    snprintf(what, sizeof what, "%s: %d blocks across two grid.sync(): out[127] = %d, total %d, %d wrong",
             way ? "cudaLaunchKernelExC, cooperative attribute" : "cudaLaunchCooperativeKernel", blocks, h[127],
             h[n], bad);
    CHECK(what, bad == 0 && h[n] == (int)(want_total % 1000003));
  }

  // One block more than the device holds at once.
  int most = sms * per_sm;
  cudaError_t e = cudaLaunchCooperativeKernel((void *)rotate_and_sum, most + 1, threads, args, 0, 0);
  snprintf(what, sizeof what, "a cooperative grid of %d blocks (the device holds %d): %s", most + 1, most,
           cudaGetErrorName(e));
  CHECK(what, e == cudaErrorCooperativeLaunchTooLarge);
  cudaGetLastError();
  OK(cudaDeviceSynchronize());
  return summary("cooperative");
}
