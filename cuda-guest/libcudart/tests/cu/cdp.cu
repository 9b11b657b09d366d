// Dynamic parallelism (CDP2, built with -rdc=true -lcudadevrt): kernels launching
// kernels recursively, one stream's children in order (a later child sees what an
// earlier one's own children wrote), device-side cudaMalloc, cudaMemcpyAsync and
// cudaFree, named streams, a refused launch's error, the nesting limit.
#include <cstdio>

#include "check.h"

// A binary tree of launches: each grid of 2 threads at depth d < max has each thread
// launch a grid of 2 at d + 1; every thread adds its depth and counts itself.
__global__ void tree(int depth, int max, int *count, int *depth_sum) {
  atomicAdd(count, 1);
  atomicAdd(depth_sum, depth);
  if (depth < max) tree<<<1, 2>>>(depth + 1, max, count, depth_sum);
}

__global__ void fill(int *p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}
__global__ void fill_then_double(int *p, int n) {
  fill<<<(n + 63) / 64, 64>>>(p, n, 100);
}
__global__ void twice(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2;
}
// Child A's own child fills; child B (same stream, launched after A) doubles: B must
// see A's grandchild's values.
__global__ void ordered(int *p, int n) {
  fill_then_double<<<1, 1>>>(p, n);
  twice<<<(n + 63) / 64, 64>>>(p, n);
}

__global__ void release(int *p) { cudaFree(p); }
// A device allocation filled by a child, copied out after it in the same stream, and
// freed by a last child.
__global__ void device_memory(int *out, int n, int *status) {
  int *buf = nullptr;
  status[0] = cudaMalloc((void **)&buf, n * sizeof(int));
  if (!buf) return;
  cudaStream_t s;
  status[1] = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  fill<<<(n + 31) / 32, 32, 0, s>>>(buf, n, 7);
  status[2] = cudaMemcpyAsync(out, buf, n * sizeof(int), cudaMemcpyDeviceToDevice, s);
  release<<<1, 1, 0, s>>>(buf);
  status[3] = cudaStreamDestroy(s);
}

// A launch of 2048 threads a block is refused; its error and text reach the thread.
__global__ void refused(int *status, char *text) {
  fill<<<1, 2048>>>(nullptr, 0, 0);
  cudaError_t e = cudaGetLastError();
  status[0] = e;
  status[1] = cudaGetLastError();  // cleared by the first read
  const char *s = cudaGetErrorString((cudaError_t)status[0]);
  int i = 0;
  for (; s[i] && i < 63; i++) text[i] = s[i];
  text[i] = 0;
}

// Each grid launches the next until a launch is refused: the deepest grid that ran, and
// the refusal's error.
__global__ void nest(int depth, int *deepest, int *err) {
  atomicMax(deepest, depth);
  nest<<<1, 1>>>(depth + 1, deepest, err);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) *err = e;
}

int main() {
  char what[200];
  int *d;
  OK(cudaMalloc(&d, 64 * sizeof(int)));
  OK(cudaMemset(d, 0, 64 * sizeof(int)));
  tree<<<1, 2>>>(0, 4, d, d + 1);
  OK(cudaDeviceSynchronize());
  int h[2];
  OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  // 2 + 4 + 8 + 16 + 32 threads; depth sum 2*0 + 4*1 + 8*2 + 16*3 + 32*4.
  snprintf(what, sizeof what, "a tree of launches 4 deep: %d threads ran, depth sum %d", h[0], h[1]);
  CHECK(what, h[0] == 62 && h[1] == 196);

  const int n = 300;
  int *p;
  OK(cudaMalloc(&p, n * sizeof(int)));
  ordered<<<1, 1>>>(p, n);
  OK(cudaDeviceSynchronize());
  int v[n];
  OK(cudaMemcpy(v, p, sizeof v, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += v[i] != 2 * (100 + i);
  snprintf(what, sizeof what, "a later child sees an earlier one's child: p[299] = %d, %d wrong", v[n - 1], bad);
  CHECK(what, bad == 0);

  int *status;
  OK(cudaMalloc(&status, 8 * sizeof(int)));
  OK(cudaMemset(status, 0xff, 8 * sizeof(int)));
  OK(cudaMemset(p, 0, n * sizeof(int)));
  device_memory<<<1, 1>>>(p, n, status);
  OK(cudaDeviceSynchronize());
  int st[8];
  OK(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
  OK(cudaMemcpy(v, p, sizeof v, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; i++) bad += v[i] != 7 + i;
  snprintf(what, sizeof what,
           "device cudaMalloc, stream, cudaMemcpyAsync after a child, cudaFree: status %d %d %d %d, out[5] = %d, %d wrong",
           st[0], st[1], st[2], st[3], v[5], bad);
  CHECK(what, st[0] == 0 && st[1] == 0 && st[2] == 0 && st[3] == 0 && bad == 0);

  char *text;
  OK(cudaMalloc(&text, 64));
  refused<<<1, 1>>>(status, text);
  OK(cudaDeviceSynchronize());
  char t[64];
  OK(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
  OK(cudaMemcpy(t, text, sizeof t, cudaMemcpyDeviceToHost));
  snprintf(what, sizeof what, "a block of 2048 threads from device code: error %d (\"%s\"), then %d", st[0], t,
           st[1]);
  CHECK(what, st[0] == cudaErrorInvalidConfiguration && st[1] == cudaSuccess &&
                  !strcmp(t, "invalid configuration argument"));

  OK(cudaMemset(d, 0, 2 * sizeof(int)));
  nest<<<1, 1>>>(0, d, d + 1);
  OK(cudaDeviceSynchronize());
  OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  snprintf(what, sizeof what, "launches nested until refused: the deepest grid at depth %d, then error %d", h[0],
           h[1]);
  CHECK(what, (h[0] == 23 || h[0] == 24) && h[1] == cudaErrorLaunchMaxDepthExceeded);
  return summary("cdp");
}
