// Warp matrix multiply-accumulate (nvcuda::wmma, tensor cores on a GPU): every input
// type and shape family, row- and column-major memory, shared and global sources,
// element-wise work on fragments, saturating integer sums. Inputs are small integers
// or dyadic fractions, so every result is exact whatever order a GPU sums in.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"
using namespace nvcuda;

// C = alpha * A * B + beta * C, A (M x K) row-major, B (K x N) column-major, C row-major;
// a block of 4 warps computes a 32 x 32 tile, each warp 16 x 16, A's rows staged
// through shared memory.
constexpr int M = 64, N = 64, K = 64;
__global__ void gemm_f16(const half *a, const half *b, float *c, float alpha, float beta) {
  __shared__ __align__(32) half sa[32 * K];
  int warp = threadIdx.x / 32;
  int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
  for (int i = threadIdx.x; i < 32 * K; i += blockDim.x) sa[i] = a[(row0 + i / K) * K + i % K];
  __syncthreads();
  int wr = (warp / 2) * 16, wc = (warp % 2) * 16;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, fc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(fa, sa + wr * K + k, K);
    wmma::load_matrix_sync(fb, b + (col0 + wc) * K + k, K);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  float *cp = c + (row0 + wr) * N + col0 + wc;
  wmma::load_matrix_sync(fc, cp, N, wmma::mem_row_major);
  for (int i = 0; i < fc.num_elements; i++) fc.x[i] = alpha * acc.x[i] + beta * fc.x[i];
  wmma::store_matrix_sync(cp, fc, N, wmma::mem_row_major);
}

// 32 x 8 x 16 with a half accumulator (A column-major, B row-major), and 8 x 32 x 16
// with a float one storing column-major.
__global__ void f16_shapes(const half *a, const half *b, half *c, const half *a2, const half *b2,
                           float *c2) {
  wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 32, 8, 16, half> fc;
  wmma::fill_fragment(fc, __float2half(1.0f));
  wmma::load_matrix_sync(fa, a, 32);
  wmma::load_matrix_sync(fb, b, 8);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 8, wmma::mem_row_major);
  wmma::fragment<wmma::matrix_a, 8, 32, 16, half, wmma::row_major> ga;
  wmma::fragment<wmma::matrix_b, 8, 32, 16, half, wmma::col_major> gb;
  wmma::fragment<wmma::accumulator, 8, 32, 16, float> gc;
  wmma::fill_fragment(gc, 0.0f);
  wmma::load_matrix_sync(ga, a2, 16);
  wmma::load_matrix_sync(gb, b2, 16);
  wmma::mma_sync(gc, ga, gb, gc);
  wmma::store_matrix_sync(c2, gc, 8, wmma::mem_col_major);
}

__global__ void bf16_mma(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_col_major);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_col_major);
}

// A's elements are converted to tf32 (round to nearest, ties away) before the product.
__global__ void tf32_mma(const float *a, const float *b, float *c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 8);
  wmma::load_matrix_sync(fb, b, 16);
  for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

__global__ void f64_mma(const double *a, const double *b, double *c) {
  wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 8, 4, double> fc;
  wmma::fill_fragment(fc, 0.5);
  wmma::load_matrix_sync(fa, a, 4);
  wmma::load_matrix_sync(fb, b, 4);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 8, wmma::mem_row_major);
}

// Signed bytes (A from shared memory) and unsigned ones, the second product saturating.
__global__ void int8_mma(const signed char *a, const signed char *b, int *c, const unsigned char *ua,
                         const unsigned char *ub, int *uc) {
  __shared__ __align__(32) signed char sa[256];
  for (int i = threadIdx.x; i < 256; i += 32) sa[i] = a[i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
  wmma::fill_fragment(fc, 7);
  wmma::load_matrix_sync(fa, sa, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_col_major);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, unsigned char, wmma::row_major> ga;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, unsigned char, wmma::row_major> gb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> gc;
  wmma::load_matrix_sync(gc, uc, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(ga, ua, 16);
  wmma::load_matrix_sync(gb, ub, 16);
  wmma::mma_sync(gc, ga, gb, gc, true);
  wmma::store_matrix_sync(uc, gc, 16, wmma::mem_row_major);
}

template <typename T> static T *dev(const std::vector<T> &h) {
  T *d = nullptr;
  cudaMalloc(&d, h.size() * sizeof(T));
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T> static std::vector<T> host(const T *d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}
// Small integers -2..3 (exact in every input type).
static int val(int i, int salt) { return (i * 7 + salt * 3) % 6 - 2; }

int main() {
  char what[160];
  {
    std::vector<half> a(M * K), b(K * N);
    std::vector<float> c(M * N);
    for (int i = 0; i < M * K; i++) a[i] = __float2half((float)val(i, 1));
    for (int i = 0; i < K * N; i++) b[i] = __float2half((float)val(i, 2));
    for (int i = 0; i < M * N; i++) c[i] = (float)(i % 9);
    half *da = dev(a), *db = dev(b);
    float *dc = dev(c);
    gemm_f16<<<dim3(N / 32, M / 32), 128>>>(da, db, dc, 2.0f, -1.0f);
    OK(cudaGetLastError());
    OK(cudaDeviceSynchronize());
    std::vector<float> out = host(dc, M * N);
    int bad = 0;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)val(i * K + k, 1) * val(j * K + k, 2);
        double want = 2.0 * s - (i * N + j) % 9;
        bad += out[i * N + j] != (float)want;
      }
    snprintf(what, sizeof what, "f16 gemm 64x64x64 (alpha 2, beta -1): C[5][7] = %g, %d of %d wrong",
             out[5 * N + 7], bad, M * N);
    CHECK(what, bad == 0);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  {
    std::vector<half> a(32 * 16), b(16 * 8), a2(8 * 16), b2(16 * 32);
    for (int i = 0; i < 32 * 16; i++) a[i] = __float2half((float)val(i, 3));
    for (int i = 0; i < 16 * 8; i++) b[i] = __float2half((float)val(i, 4));
    for (int i = 0; i < 8 * 16; i++) a2[i] = __float2half((float)val(i, 5));
    for (int i = 0; i < 16 * 32; i++) b2[i] = __float2half((float)val(i, 6));
    half *da = dev(a), *db = dev(b), *da2 = dev(a2), *db2 = dev(b2), *dc;
    float *dc2;
    cudaMalloc(&dc, 32 * 8 * sizeof(half));
    cudaMalloc(&dc2, 8 * 32 * sizeof(float));
    f16_shapes<<<1, 32>>>(da, db, dc, da2, db2, dc2);
    OK(cudaDeviceSynchronize());
    std::vector<half> c = host(dc, 32 * 8);
    std::vector<float> c2 = host(dc2, 8 * 32);
    int bad = 0, bad2 = 0;
    for (int i = 0; i < 32; i++)
      for (int j = 0; j < 8; j++) {
        int s = 1;  // A is column-major (32 rows), B row-major (8 columns)
        for (int k = 0; k < 16; k++) s += val(k * 32 + i, 3) * val(k * 8 + j, 4);
        bad += __half2float(c[i * 8 + j]) != (float)s;
      }
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 32; j++) {
        int s = 0;  // A row-major (16 columns), B column-major (16 rows); C column-major
        for (int k = 0; k < 16; k++) s += val(i * 16 + k, 5) * val(j * 16 + k, 6);
        bad2 += c2[j * 8 + i] != (float)s;
      }
    snprintf(what, sizeof what, "f16 32x8x16, half accumulator: C[3][2] = %g, %d wrong",
             __half2float(c[3 * 8 + 2]), bad);
    CHECK(what, bad == 0);
    snprintf(what, sizeof what, "f16 8x32x16, stored column-major: C[1][20] = %g, %d wrong",
             c2[20 * 8 + 1], bad2);
    CHECK(what, bad2 == 0);
  }
  {
    std::vector<__nv_bfloat16> a(256), b(256);
    std::vector<float> c(256);
    for (int i = 0; i < 256; i++) {
      a[i] = __float2bfloat16((float)val(i, 7) * 0.5f);
      b[i] = __float2bfloat16((float)val(i, 8));
      c[i] = (float)(i % 5);
    }
    __nv_bfloat16 *da = dev(a), *db = dev(b);
    float *dc = dev(c);
    bf16_mma<<<1, 32>>>(da, db, dc);
    OK(cudaDeviceSynchronize());
    std::vector<float> out = host(dc, 256);
    int bad = 0;
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        double s = (j * 16 + i) % 5;  // C column-major
        for (int k = 0; k < 16; k++) s += val(i * 16 + k, 7) * 0.5 * val(k * 16 + j, 8);
        bad += out[j * 16 + i] != (float)s;
      }
    snprintf(what, sizeof what, "bf16 16x16x16: C[4][9] = %g, %d wrong", out[9 * 16 + 4], bad);
    CHECK(what, bad == 0);
  }
  {
    // 1 + 2^-11 + 2^-12 rounds (to nearest, ties away) to 1 + 2^-10 in tf32.
    std::vector<float> a(16 * 8, 1.0f + 0x1p-11f + 0x1p-12f), b(8 * 16);
    for (int i = 0; i < 8 * 16; i++) b[i] = (float)(i % 16 == 3 ? 2 : 1);
    float *da = dev(a), *db = dev(b), *dc;
    cudaMalloc(&dc, 256 * sizeof(float));
    tf32_mma<<<1, 32>>>(da, db, dc);
    OK(cudaDeviceSynchronize());
    std::vector<float> out = host(dc, 256);
    int bad = 0;
    for (int i = 0; i < 256; i++) bad += out[i] != (i % 16 == 3 ? 16.0f : 8.0f) * (1.0f + 0x1p-10f);
    snprintf(what, sizeof what, "tf32 16x16x8 after __float_to_tf32: C[0][0] = %.9g, C[0][3] = %.9g, %d wrong",
             out[0], out[3], bad);
    CHECK(what, bad == 0);
  }
  {
    std::vector<double> a(32), b(32);
    for (int i = 0; i < 32; i++) {
      a[i] = val(i, 9) * 0.25;
      b[i] = val(i, 10) * 0.125;
    }
    double *da = dev(a), *db = dev(b), *dc;
    cudaMalloc(&dc, 64 * sizeof(double));
    f64_mma<<<1, 32>>>(da, db, dc);
    OK(cudaDeviceSynchronize());
    std::vector<double> out = host(dc, 64);
    int bad = 0;
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 8; j++) {
        double s = 0.5;
        for (int k = 0; k < 4; k++) s += a[i * 4 + k] * b[j * 4 + k];
        bad += out[i * 8 + j] != s;
      }
    snprintf(what, sizeof what, "f64 8x8x4: C[2][6] = %g, %d wrong", out[2 * 8 + 6], bad);
    CHECK(what, bad == 0);
  }
  {
    std::vector<signed char> a(256), b(256);
    std::vector<unsigned char> ua(256), ub(256);
    std::vector<int> uc(256);
    for (int i = 0; i < 256; i++) {
      a[i] = (signed char)(val(i, 11) * 40);
      b[i] = (signed char)(val(i, 12) * 30);
      ua[i] = (unsigned char)(200 + i % 50);
      ub[i] = (unsigned char)(i % 3 == 0 ? 255 : 0);
      uc[i] = i % 2 ? 2147483000 : -5;
    }
    signed char *da = dev(a), *db = dev(b);
    unsigned char *dua = dev(ua), *dub = dev(ub);
    int *duc = dev(uc), *dc;
    cudaMalloc(&dc, 256 * sizeof(int));
    int8_mma<<<1, 32>>>(da, db, dc, dua, dub, duc);
    OK(cudaDeviceSynchronize());
    std::vector<int> out = host(dc, 256), uout = host(duc, 256);
    int bad = 0, ubad = 0, saturated = 0;
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        int s = 7;  // B column-major, C stored column-major
        for (int k = 0; k < 16; k++) s += a[i * 16 + k] * b[j * 16 + k];
        bad += out[j * 16 + i] != s;
        long long u = uc[i * 16 + j];
        for (int k = 0; k < 16; k++) u += (long long)ua[i * 16 + k] * ub[k * 16 + j];
        long long want = u > 2147483647LL ? 2147483647LL : u;
        saturated += u > 2147483647LL;
        ubad += uout[i * 16 + j] != want;
      }
    snprintf(what, sizeof what, "s8 16x16x16 (A from shared memory): C[1][1] = %d, %d wrong",
             out[1 * 16 + 1], bad);
    CHECK(what, bad == 0);
    snprintf(what, sizeof what, "u8 16x16x16 saturating: C[0][1] = %d, %d saturated, %d wrong",
             uout[1], saturated, ubad);
    CHECK(what, ubad == 0 && saturated > 0);
  }
  return summary("wmma");
}
