// Calls through pointers, as nvcc compiles them: virtual functions of objects a kernel
// makes with new (as cuda-samples' newdelete does), a __device__ table of function
// pointers, a device function's address copied to the host with cudaMemcpyFromSymbol
// and passed back as a kernel argument (as cuda-samples' FunctionPointers does), each
// lane of a warp calling a different function. Last, a call through a host function's
// address: the launch fails with cudaErrorInvalidPc and the error is sticky.
// Prints one line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cuda_runtime.h>

#include "check.h"

#define N 256

struct Shape {
  __device__ virtual ~Shape() {}
  __device__ virtual float area() const = 0;
  __device__ virtual int sides() const { return 0; }
};
struct Square : Shape {
  float s;
  __device__ explicit Square(float s) : s(s) {}
  __device__ float area() const override { return s * s; }
  __device__ int sides() const override { return 4; }
};
struct Triangle : Shape {
  float b, h;
  __device__ Triangle(float b, float h) : b(b), h(h) {}
  __device__ float area() const override { return 0.5f * b * h; }
  __device__ int sides() const override { return 3; }
};
struct Circle : Shape {
  float r;
  __device__ explicit Circle(float r) : r(r) {}
  __device__ float area() const override { return 3.0f * r * r; }
  // sides() from Shape.
};

// Each thread makes one shape (which one depends on its index: the warp's lanes diverge),
// calls through the vtable, and deletes it through the base's virtual destructor.
__global__ void shapes(float *area, int *sides, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Shape *s;
  switch (i % 3) {
    case 0: s = new Square((float)(i % 7)); break;
    case 1: s = new Triangle((float)(i % 5), 4.0f); break;
    default: s = new Circle((float)(i % 3)); break;
  }
  if (s == nullptr) {
    area[i] = -1.0f;
    return;
  }
  area[i] = s->area();
  sides[i] = s->sides();
  delete s;
}

typedef int (*op_t)(int, int);
__device__ __noinline__ int op_add(int a, int b) { return a + b; }
__device__ __noinline__ int op_sub(int a, int b) { return a - b; }
__device__ __noinline__ int op_mul(int a, int b) { return a * b; }
__device__ __noinline__ int op_max(int a, int b) { return a > b ? a : b; }
__device__ op_t ops[4] = {op_add, op_sub, op_mul, op_max};
__device__ op_t p_mul = op_mul;

// Lane i calls ops[i % 4]; with `extra` non-null, every thread calls it instead.
__global__ void apply(const int *a, const int *b, int *out, int n, op_t extra) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  op_t f = extra ? extra : ops[i % 4];
  out[i] = f(a[i], b[i]);
}

static int host_op(int a, int b) { return a ^ b; }

int main() {
  float *area;
  int *sides;
  OK(cudaMalloc(&area, N * sizeof(float)));
  OK(cudaMalloc(&sides, N * sizeof(int)));
  shapes<<<N / 64, 64>>>(area, sides, N);
  OK(cudaGetLastError());
  OK(cudaDeviceSynchronize());
  float ha[N];
  int hs[N];
  OK(cudaMemcpy(ha, area, sizeof ha, cudaMemcpyDeviceToHost));
  OK(cudaMemcpy(hs, sides, sizeof hs, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    float want_a;
    int want_s;
    switch (i % 3) {
      case 0: want_a = (float)(i % 7) * (float)(i % 7); want_s = 4; break;
      case 1: want_a = 0.5f * (float)(i % 5) * 4.0f; want_s = 3; break;
      default: want_a = 3.0f * (float)(i % 3) * (float)(i % 3); want_s = 0; break;
    }
    if (ha[i] != want_a || hs[i] != want_s) {
      if (wrong++ < 4) printf("     shape %d: area %g sides %d, want %g %d\n", i, ha[i], hs[i], want_a, want_s);
    }
  }
  CHECK("virtual area() and sides() of 256 shapes made with new, three classes per warp", wrong == 0);

  int ha_in[N], hb_in[N], hout[N];
  for (int i = 0; i < N; i++) {
    ha_in[i] = i * 3 - 100;
    hb_in[i] = 50 - i;
  }
  int *a, *b, *out;
  OK(cudaMalloc(&a, sizeof ha_in));
  OK(cudaMalloc(&b, sizeof hb_in));
  OK(cudaMalloc(&out, sizeof hout));
  OK(cudaMemcpy(a, ha_in, sizeof ha_in, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(b, hb_in, sizeof hb_in, cudaMemcpyHostToDevice));
  apply<<<N / 128, 128>>>(a, b, out, N, nullptr);
  OK(cudaGetLastError());
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < N; i++) {
    int x = ha_in[i], y = hb_in[i];
    int want = i % 4 == 0 ? x + y : i % 4 == 1 ? x - y : i % 4 == 2 ? x * y : (x > y ? x : y);
    wrong += hout[i] != want;
  }
  CHECK("lane i calls ops[i % 4] from a __device__ table of function pointers", wrong == 0);

  // A device function's address, fetched by the host and passed back.
  op_t h_mul = nullptr;
  OK(cudaMemcpyFromSymbol(&h_mul, p_mul, sizeof h_mul));
  CHECK("cudaMemcpyFromSymbol gives the host a non-null device function address", h_mul != nullptr);
  op_t table[4] = {};
  OK(cudaMemcpyFromSymbol(table, ops, sizeof table));
  CHECK("the table's third entry is the same function's address", table[2] == h_mul);
  apply<<<N / 128, 128>>>(a, b, out, N, h_mul);
  OK(cudaGetLastError());
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < N; i++) wrong += hout[i] != ha_in[i] * hb_in[i];
  CHECK("every thread calls the function pointer passed as a kernel argument", wrong == 0);

  // A host function's address is no device function: the launch fails with an invalid
  // program counter, and the context is unusable after it.
  apply<<<N / 128, 128>>>(a, b, out, N, (op_t)host_op);
  cudaError_t e = cudaDeviceSynchronize();
  printf("     call through a host function's address: %s (%d)\n", cudaGetErrorName(e), (int)e);
  CHECK("a call through a host function's address fails with cudaErrorInvalidPc", e == cudaErrorInvalidPc);
  CHECK("the error is sticky", cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost) == cudaErrorInvalidPc);

  return summary("indirect_calls");
}
