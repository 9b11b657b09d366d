/* Compiles a CUDA C++ kernel with NVRTC, as a program that only compiles does: NVRTC
 * (dlopen'ed from argv[1]) loads libcuda.so.1 itself during nvrtcCompileProgram and
 * calls cuInit and cuGetExportTable. The program does not link libcuda. Prints
 * "nvrtc_compile: N bytes of PTX OK". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
    exit(1);
  }
  return p;
}

static const char *source =
    "extern \"C\" __global__ void scale(float *x, float a, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] *= a;\n"
    "}\n";

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBNVRTC\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                        const char *const *) = sym(lib, "nvrtcCreateProgram");
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *) =
      sym(lib, "nvrtcCompileProgram");
  nvrtcResult (*log_size)(nvrtcProgram, size_t *) = sym(lib, "nvrtcGetProgramLogSize");
  nvrtcResult (*get_log)(nvrtcProgram, char *) = sym(lib, "nvrtcGetProgramLog");
  nvrtcResult (*ptx_size)(nvrtcProgram, size_t *) = sym(lib, "nvrtcGetPTXSize");
  nvrtcResult (*get_ptx)(nvrtcProgram, char *) = sym(lib, "nvrtcGetPTX");
  nvrtcResult (*destroy)(nvrtcProgram *) = sym(lib, "nvrtcDestroyProgram");

  nvrtcProgram prog = NULL;
  nvrtcResult r = create(&prog, source, "scale.cu", 0, NULL, NULL);
  if (r != 0) {
    fprintf(stderr, "nvrtcCreateProgram: %d\n", r);
    return 1;
  }
  const char *opts[] = {"--gpu-architecture=compute_80"};
  r = compile(prog, 1, opts);
  if (r != 0) {
    size_t n = 0;
    log_size(prog, &n);
    char *log = calloc(n + 1, 1);
    if (log) {
      get_log(prog, log);
    }
    fprintf(stderr, "nvrtcCompileProgram: %d\n%s\n", r, log ? log : "");
    return 1;
  }
  size_t n = 0;
  if (ptx_size(prog, &n) != 0 || n == 0) {
    fprintf(stderr, "nvrtcGetPTXSize failed\n");
    return 1;
  }
  char *ptx = calloc(n + 1, 1);
  if (!ptx || get_ptx(prog, ptx) != 0) {
    fprintf(stderr, "nvrtcGetPTX failed\n");
    return 1;
  }
  if (!strstr(ptx, ".visible .entry scale(")) {
    fprintf(stderr, "no scale entry in the PTX:\n%s\n", ptx);
    return 1;
  }
  destroy(&prog);
  printf("nvrtc_compile: %zu bytes of PTX OK\n", n);
  return 0;
}
