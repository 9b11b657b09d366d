// The driver's linker with host objects and libraries: rdc_main.cu's PTX linked with
// rdc_lib.cu's relocatable object (CU_JIT_INPUT_OBJECT), then with an archive of it and
// libcudadevrt.a (CU_JIT_INPUT_LIBRARY); each image loaded and its kernel run, and the
// module unloaded right after the launch (the unload waits for the kernel, which reads
// the module's variable). Arguments: main.ptx lib.o liblink.a libcudadevrt.a.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

static int checks, failures;
static void check(const char *what, bool ok) {
  checks++;
  failures += !ok;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}
#define RES(call, want)                                                             \
  do {                                                                              \
    CUresult r_ = (call);                                                           \
    char w_[300];                                                                   \
    snprintf(w_, sizeof w_, "%s = %d (want %d)", #call, (int)r_, (int)(want));      \
    check(w_, r_ == (want));                                                        \
  } while (0)

static std::vector<char> slurp(const char *path) {
  std::vector<char> b;
  FILE *f = fopen(path, "rb");
  if (!f) return b;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
  fclose(f);
  b.push_back(0);
  return b;
}

// Links main.ptx with `inputs` (file, kind), loads the image, runs `apply` over 1000
// floats, unloads the module at once, and counts the wrong results (-1: no image).
static int link_and_run(const char *what, const char *main_ptx, const char *const *files, const CUjitInputType *kinds,
                        int n) {
  std::vector<char> ptx = slurp(main_ptx);
  CUlinkState ls;
  RES(cuLinkCreate(0, nullptr, nullptr, &ls), CUDA_SUCCESS);
  RES(cuLinkAddData(ls, CU_JIT_INPUT_PTX, ptx.data(), ptx.size(), "main.ptx", 0, nullptr, nullptr), CUDA_SUCCESS);
  for (int i = 0; i < n; i++) RES(cuLinkAddFile(ls, kinds[i], files[i], 0, nullptr, nullptr), CUDA_SUCCESS);
  void *image = nullptr;
  size_t size = 0;
  RES(cuLinkComplete(ls, &image, &size), CUDA_SUCCESS);
  CUmodule m;
  RES(cuModuleLoadData(&m, image), CUDA_SUCCESS);
  RES(cuLinkDestroy(ls), CUDA_SUCCESS);
  CUfunction f;
  RES(cuModuleGetFunction(&f, m, "_Z5applyPfi"), CUDA_SUCCESS);
  const int count = 1000;
  std::vector<float> h(count);
  for (int i = 0; i < count; i++) h[i] = (float)i;
  CUdeviceptr d;
  RES(cuMemAlloc(&d, count * sizeof(float)), CUDA_SUCCESS);
  RES(cuMemcpyHtoD(d, h.data(), count * sizeof(float)), CUDA_SUCCESS);
  int nn = count;
  void *args[] = {&d, &nn};
  RES(cuLaunchKernel(f, (count + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  RES(cuMemcpyDtoH(h.data(), d, count * sizeof(float)), CUDA_SUCCESS);
  RES(cuMemFree(d), CUDA_SUCCESS);
  int bad = 0;
  for (int i = 0; i < count; i++) bad += h[i] != 3.0f * i + 0.5f;
  char line[300];
  snprintf(line, sizeof line, "%s: %d of %d wrong (v[999] = %.1f)", what, bad, count, h[999]);
  check(line, bad == 0);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s main.ptx lib.o liblink.a libcudadevrt.a\n", argv[0]);
    return 2;
  }
  CUdevice dev;
  CUcontext ctx;
  RES(cuInit(0), CUDA_SUCCESS);
  RES(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  RES(cuCtxCreate(&ctx, nullptr, 0, dev), CUDA_SUCCESS);
  {
    const char *files[] = {argv[2]};
    const CUjitInputType kinds[] = {CU_JIT_INPUT_OBJECT};
    link_and_run("an object (CU_JIT_INPUT_OBJECT)", argv[1], files, kinds, 1);
  }
  {
    const char *files[] = {argv[3], argv[4]};
    const CUjitInputType kinds[] = {CU_JIT_INPUT_LIBRARY, CU_JIT_INPUT_LIBRARY};
    link_and_run("a library and libcudadevrt.a (CU_JIT_INPUT_LIBRARY)", argv[1], files, kinds, 2);
  }
  // Text with no device code in it is no object.
  {
    CUlinkState ls;
    RES(cuLinkCreate(0, nullptr, nullptr, &ls), CUDA_SUCCESS);
    CUresult r = cuLinkAddFile(ls, CU_JIT_INPUT_OBJECT, argv[1], 0, nullptr, nullptr);
    char line[200];
    snprintf(line, sizeof line, "PTX text as an object: %d", (int)r);
    check(line, r == CUDA_ERROR_INVALID_IMAGE);
    RES(cuLinkDestroy(ls), CUDA_SUCCESS);
  }
  RES(cuCtxDestroy(ctx), CUDA_SUCCESS);
  printf("link_inputs: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
