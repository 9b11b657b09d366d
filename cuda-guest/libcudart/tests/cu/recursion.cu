// Recursive device functions: two-way recursion, lanes of one warp at different depths,
// a pointer to a caller's local array written by its callee, mutual recursion, structs
// passed and returned by value, device printf inside the recursion, and a recursion too
// deep for the stack (the launch fails). Every result is compared with the same
// functions run on the host.
#include <cstdio>

#include "check.h"

__host__ __device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

// Each level fills a local array, lets the next level write into it through a pointer,
// and sums what it finds after the call returns.
__host__ __device__ __noinline__ int nest(int depth, int *parent) {
  int mine[4];
  for (int k = 0; k < 4; k++) mine[k] = depth * 10 + k;
  if (parent) parent[depth % 4] += 1000 + depth;
  int below = depth > 0 ? nest(depth - 1, mine) : 0;
  int s = 0;
  for (int k = 0; k < 4; k++) s += mine[k] * (k + 1);
  return s + 3 * below;
}

__host__ __device__ __noinline__ bool is_odd(unsigned n);
__host__ __device__ __noinline__ bool is_even(unsigned n) { return n == 0 ? true : is_odd(n - 1); }
__host__ __device__ __noinline__ bool is_odd(unsigned n) { return n == 0 ? false : is_even(n - 1); }

struct Iv {
  double lo, hi;
};

// Bisects [x.lo, x.hi] down to width w, returning the hull of the pieces where
// t^2 - 2 changes sign, and counting the pieces visited.
__host__ __device__ __noinline__ Iv bisect(Iv x, double w, int *visited) {
  (*visited)++;
  double flo = x.lo * x.lo - 2, fhi = x.hi * x.hi - 2;
  if (flo > 0 || fhi < 0) return Iv{1e300, -1e300};
  if (x.hi - x.lo <= w) return x;
  double mid = 0.5 * (x.lo + x.hi);
  Iv a = bisect(Iv{x.lo, mid}, w, visited);
  Iv b = bisect(Iv{mid, x.hi}, w, visited);
  return Iv{a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}

__device__ __noinline__ int countdown(int d) {
  if (threadIdx.x == 0 && blockIdx.x == 0) printf("countdown %d\n", d);
  return d == 0 ? 0 : 1 + countdown(d - 1);
}

__device__ __noinline__ unsigned long long deep(unsigned long long d, unsigned long long *sink) {
  volatile unsigned long long pad[8];
  for (int k = 0; k < 8; k++) pad[k] = d + k;
  if (d == 0) return pad[3];
  unsigned long long r = deep(d - 1, sink) + pad[7];
  *sink = r;
  return r;
}

struct Out {
  int fib, nest, even, visited, countdown;
  double lo, hi;
};

__global__ void recurse(Out *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Out o;
  o.fib = fib(i % 18);
  o.nest = nest(i % 7, nullptr);
  o.even = is_even(3 * i + 1) ? 1 : 0;
  int visited = 0;
  Iv r = bisect(Iv{1.0, 1.4 + 0.05 * (i % 11 + 1)}, 1.0 / (1 << (i % 9 + 4)), &visited);
  o.lo = r.lo;
  o.hi = r.hi;
  o.visited = visited;
  o.countdown = i < 64 ? countdown(i % 3 + 1) : -1;
  out[i] = o;
}

__global__ void too_deep(unsigned long long *sink) { *sink = deep(1ull << 24, sink); }

int main() {
  const int n = 200;
  Out *d;
  OK(cudaMalloc(&d, n * sizeof(Out)));
  recurse<<<4, 64>>>(d, n);
  OK(cudaGetLastError());
  OK(cudaDeviceSynchronize());
  static Out h[n];
  OK(cudaMemcpy(h, d, n * sizeof(Out), cudaMemcpyDeviceToHost));
  int bad[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    bad[0] += h[i].fib != fib(i % 18);
    bad[1] += h[i].nest != nest(i % 7, nullptr);
    bad[2] += h[i].even != (is_even(3 * i + 1) ? 1 : 0);
    int visited = 0;
    Iv r = bisect(Iv{1.0, 1.4 + 0.05 * (i % 11 + 1)}, 1.0 / (1 << (i % 9 + 4)), &visited);
    bad[3] += h[i].lo != r.lo || h[i].hi != r.hi;
    bad[4] += h[i].visited != visited;
    bad[5] += h[i].countdown != (i < 64 ? i % 3 + 1 : -1);
  }
  char what[200];
  snprintf(what, sizeof what, "two-way recursion: fib(17) = %d (host %d), %d of %d threads differ", h[17].fib,
           fib(17), bad[0], n);
  CHECK(what, h[17].fib == 1597 && bad[0] == 0);
  snprintf(what, sizeof what, "callee writes its caller's local array: nest(6) = %d (host %d), %d differ",
           h[6].nest, nest(6, nullptr), bad[1]);
  CHECK(what, h[6].nest == nest(6, nullptr) && bad[1] == 0);
  snprintf(what, sizeof what, "mutual recursion: is_even(3*i+1) over %d threads, %d differ", n, bad[2]);
  CHECK(what, bad[2] == 0 && h[1].even == 1 && h[2].even == 0);
  snprintf(what, sizeof what, "structs by value: sqrt(2) in [%.12f, %.12f] (thread 199), %d hulls differ", h[199].lo,
           h[199].hi, bad[3]);
  CHECK(what, bad[3] == 0 && h[199].lo <= 1.41421356237 && h[199].hi >= 1.41421356238);
  snprintf(what, sizeof what, "a pointer argument counted %d pieces (thread 199), %d counts differ",
           h[199].visited, bad[4]);
  CHECK(what, bad[4] == 0 && h[199].visited > 4);
  snprintf(what, sizeof what, "printf in recursion, lanes at different depths: %d differ", bad[5]);
  CHECK(what, bad[5] == 0);

  // Past the stack: the launch fails (sticky), as a GPU's does.
  unsigned long long *sink;
  OK(cudaMalloc(&sink, sizeof *sink));
  too_deep<<<1, 32>>>(sink);
  cudaError_t e = cudaDeviceSynchronize();
  snprintf(what, sizeof what, "recursion 2^24 deep: %s", cudaGetErrorName(e));
  CHECK(what, e == cudaErrorLaunchFailure || e == cudaErrorIllegalAddress);
  return summary("recursion");
}
