// The runtime's costs as a program sees them (libcudart/benches/runtime.rs runs it):
// - registration: from a constructor that runs before nvcc's registration constructors to
//   main (the program's fatbin is ~1 MB: KERNELS template instances of an unrolled
//   kernel; the bench builds it compressed and not);
// - the first launch, which loads the fatbin's module;
// - a <<<>>> launch of an empty kernel against cuLaunchKernel of the same CUfunction,
//   interleaved rounds in the same run, the median of the per-round ratios.
// Also checks that every instance ran (a figure of a program that fails is no figure).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#ifndef KERNELS
#define KERNELS 17
#endif

static double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double t_before_registration;
__attribute__((constructor(101))) static void before_registration() { t_before_registration = now_ms(); }

template <int N> __global__ void poly(float *p) {
  float x = p[threadIdx.x];
#pragma unroll
  for (int k = 0; k < N; k++) x = 0.5f * x + 0.25f * (sinf(x + k) + cosf(x * k));
  p[threadIdx.x] = x;
}

__global__ void empty() {}

template <int... I> void run_all(float *p, std::integer_sequence<int, I...>) {
  ((poly<I + 1><<<1, 32>>>(p + 32 * I)), ...);
}

static float poly_host(int n, float x) {
  for (int k = 0; k < n; k++) x = 0.5f * x + 0.25f * (sinf(x + k) + cosf(x * k));
  return x;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char **argv) {
  double t_main = now_ms();
  int launches = argc > 1 ? atoi(argv[1]) : 2000;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;

  double t0 = now_ms();
  empty<<<1, 1>>>();
  cudaError_t e = cudaDeviceSynchronize();
  double first_ms = now_ms() - t0;
  if (e != cudaSuccess) {
    printf("FAIL first launch: %s\n", cudaGetErrorName(e));
    return 1;
  }

  // Every instance runs and computes what the host does (a contraction, so float rounding
  // and the device's fused multiply-adds stay far within 1e-3).
  const int n = 32 * KERNELS;
  std::vector<float> h(n);
  for (int i = 0; i < n; i++) h[i] = (i % 32) * 0.01f;
  float *d;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  run_all(d, std::make_integer_sequence<int, KERNELS>{});
  std::vector<float> got(n);
  e = cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    float want = poly_host(i / 32 + 1, (i % 32) * 0.01f);
    if (!(fabsf(got[i] - want) <= 1e-3f * (1 + fabsf(want)))) bad++;
  }
  if (e != cudaSuccess || bad) {
    printf("FAIL kernels: %s, %d of %d wrong\n", cudaGetErrorName(e), bad, n);
    return 1;
  }

  cudaFunction_t f;
  if (cudaGetFuncBySymbol(&f, (const void *)empty) != cudaSuccess) {
    printf("FAIL cudaGetFuncBySymbol\n");
    return 1;
  }
  CUfunction cf = (CUfunction)f;
  std::vector<double> rt, drv, ratio;
  for (int r = 0; r < rounds; r++) {
    double a = now_ms();
    for (int i = 0; i < launches; i++) empty<<<1, 1>>>();
    double rt_ms = now_ms() - a;
    cudaDeviceSynchronize();
    a = now_ms();
    for (int i = 0; i < launches; i++) cuLaunchKernel(cf, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    double drv_ms = now_ms() - a;
    cudaDeviceSynchronize();
    rt.push_back(rt_ms * 1e3 / launches);
    drv.push_back(drv_ms * 1e3 / launches);
    ratio.push_back(rt_ms / drv_ms);
  }
  e = cudaGetLastError();
  if (e != cudaSuccess) {
    printf("FAIL launches: %s\n", cudaGetErrorName(e));
    return 1;
  }
  printf("kernels %d\n", KERNELS + 1);
  printf("registration_ms %.3f\n", t_main - t_before_registration);
  printf("first_launch_ms %.3f\n", first_ms);
  printf("launch_runtime_us %.3f\n", median(rt));
  printf("launch_driver_us %.3f\n", median(drv));
  printf("launch_ratio %.3f\n", median(ratio));
  return 0;
}
