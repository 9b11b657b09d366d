// Driver-API programs as cuda-samples' simpleDrvRuntime and vectorAddDrv are: a context
// made with cuCtxCreate (CUDA 13's form, a zeroed CUctxCreateParams) that the runtime's
// calls then use, kernels loaded from fatbins built with `nvcc -fatbin` (by path, from
// memory, through cuModuleLoadFatBinary and through the linker), launched with
// cuLaunchKernel on a runtime stream, and the errors for a fatbin of machine code only
// and a damaged one. argv: the PTX fatbin (compute_80, compressed as nvcc does), the
// same with --no-compress, and a machine-code-only fatbin (sm_90).
// Prints one line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#define DRV(call) CHECK(#call, (call) == CUDA_SUCCESS)
#define RT(call) CHECK(#call, (call) == cudaSuccess)

static std::vector<char> slurp(const char *path) {
  std::vector<char> b;
  FILE *f = fopen(path, "rb");
  if (!f) return b;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
  fclose(f);
  return b;
}

// Launches `add` of module `m` over n elements on `s` and checks c = a + b.
static bool run_add(CUmodule m, cudaStream_t s, const char *how) {
  CUfunction f;
  if (cuModuleGetFunction(&f, m, "add") != CUDA_SUCCESS) {
    printf("     %s: no kernel add\n", how);
    return false;
  }
  int n = 3000;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = 0.25f * (float)i;
  }
  float *da, *db, *dc;
  if (cudaMalloc(&da, n * 4) || cudaMalloc(&db, n * 4) || cudaMalloc(&dc, n * 4)) return false;
  cudaMemcpyAsync(da, a.data(), n * 4, cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(db, b.data(), n * 4, cudaMemcpyHostToDevice, s);
  void *args[] = {&da, &db, &dc, &n};
  CUresult r = cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, (CUstream)s, args, nullptr);
  cudaMemcpyAsync(c.data(), dc, n * 4, cudaMemcpyDeviceToHost, s);
  cudaError_t e = cudaStreamSynchronize(s);
  int bad = 0;
  for (int i = 0; i < n; i++) bad += c[i] != a[i] + b[i];
  printf("     %s: launch %d, sync %d, %d of %d wrong\n", how, (int)r, (int)e, bad, n);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return r == CUDA_SUCCESS && e == cudaSuccess && bad == 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PTX_FATBIN PLAIN_FATBIN SASS_FATBIN\n", argv[0]);
    return 2;
  }
  DRV(cuInit(0));
  RT(cudaSetDevice(0));
  CUcontext ctx = nullptr, cur = nullptr;
  CUctxCreateParams params;
  memset(&params, 0, sizeof params);
  DRV(cuCtxCreate(&ctx, &params, 0, 0));
  DRV(cuCtxGetCurrent(&cur));
  CHECK("cuCtxCreate makes its context current", cur == ctx && ctx != nullptr);

  // The runtime works in the program's context, as CUDA's does.
  cudaStream_t s;
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DRV(cuCtxGetCurrent(&cur));
  CHECK("a runtime call leaves the program's context current", cur == ctx);
  CUcontext sctx = nullptr;
  DRV(cuStreamGetCtx((CUstream)s, &sctx));
  CHECK("the runtime's stream belongs to the program's context (cuStreamGetCtx)", sctx == ctx);
  CUdevice sdev = -1;
  DRV(cuStreamGetDevice((CUstream)s, &sdev));
  CHECK("cuStreamGetDevice names device 0", sdev == 0);

  // A fatbin by path, and from memory in the three ways the driver takes it.
  CUmodule m1, m2, m3, m4;
  DRV(cuModuleLoad(&m1, argv[1]));
  CHECK("cuModuleLoad of a (compressed) fatbin file runs", run_add(m1, s, "cuModuleLoad"));
  std::vector<char> ptx = slurp(argv[1]), plain = slurp(argv[2]), sass = slurp(argv[3]);
  CHECK("the three fatbins were read", !ptx.empty() && !plain.empty() && !sass.empty());
  DRV(cuModuleLoadData(&m2, plain.data()));
  CHECK("cuModuleLoadData of an uncompressed fatbin runs", run_add(m2, s, "cuModuleLoadData"));
  DRV(cuModuleLoadFatBinary(&m3, ptx.data()));
  CHECK("cuModuleLoadFatBinary runs", run_add(m3, s, "cuModuleLoadFatBinary"));
  CUlinkState link;
  void *image = nullptr;
  size_t size = 0;
  DRV(cuLinkCreate(0, nullptr, nullptr, &link));
  DRV(cuLinkAddData(link, CU_JIT_INPUT_FATBINARY, ptx.data(), ptx.size(), "add.fatbin", 0, nullptr, nullptr));
  DRV(cuLinkComplete(link, &image, &size));
  DRV(cuModuleLoadData(&m4, image));
  DRV(cuLinkDestroy(link));
  CHECK("a fatbin linked with cuLinkAddData(CU_JIT_INPUT_FATBINARY) runs", run_add(m4, s, "linked"));

  // Machine code only: no PTX to run, named by the driver's error.
  CUmodule bad;
  CUresult r = cuModuleLoadData(&bad, sass.data());
  printf("     machine-code-only fatbin: %d\n", (int)r);
  CHECK("a machine-code-only fatbin is CUDA_ERROR_NO_BINARY_FOR_GPU", r == CUDA_ERROR_NO_BINARY_FOR_GPU);
  // A damaged fatbin: its size claims more than its entries hold.
  std::vector<char> damaged = plain;
  unsigned long long huge = 1ull << 40;
  memcpy(&damaged[8], &huge, 8);
  damaged.resize(damaged.size() + 64, 0);
  r = cuModuleLoadData(&bad, damaged.data());
  printf("     damaged fatbin: %d\n", (int)r);
  CHECK("a damaged fatbin is an error, not a crash", r != CUDA_SUCCESS);

  for (CUmodule m : {m1, m2, m3, m4}) DRV(cuModuleUnload(m));
  RT(cudaStreamDestroy(s));
  DRV(cuCtxDestroy(ctx));
  // With the program's context gone, the runtime is back on the primary context.
  float *p = nullptr;
  RT(cudaMalloc(&p, 64));
  RT(cudaFree(p));

  return summary("driver_interop");
}
