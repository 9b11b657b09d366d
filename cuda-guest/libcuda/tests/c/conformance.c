/* The driver API's conformance checks for the entry points of libcuda.so.1 that the
 * Rust `Backend` trait does not reach (the rest is cuda-guest/tests/conformance/mod.rs):
 * error names, the context stack and primary context state, cuCtxCreate, JIT options,
 * module globals and files, function attributes, launches through `extra`, the
 * per-thread default stream variants, cuGetProcAddress, mapped host memory, pointer
 * attributes, stream-ordered allocation. The expected values are NVIDIA's driver's (its
 * cuda.h documentation, and an H100 where noted).
 *
 * Usage: conformance GROUP FIXTURES_DIR (fixtures/ptx), GROUP one of the groups below
 * (each in a process of its own: some check the state of a fresh process). Every check prints one line, "ok   GROUP: what = value" or
 * "FAIL GROUP:LINE: what = value, expected value"; the last line is
 * "conformance GROUP: N checks, M failed". Exit status 0 only when none failed (1 when
 * some did, 2 for bad usage). Written against the stock cuda.h only. */
#include <cuda.h>
/* cudaProfiler.h (not in the runtime wheel) declares these two. */
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int checks, failures;
static const char *group = "?";
static const char *fixtures = ".";

static const char *err_name(CUresult r) {
  const char *n = NULL;
  if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n) return "?";
  return n;
}

static void result(int line, const char *what, CUresult got, CUresult want) {
  checks++;
  if (got == want) {
    printf("ok   %s: %s = %d %s\n", group, what, (int)got, err_name(got));
  } else {
    failures++;
    printf("FAIL %s:%d: %s = %d %s, expected %d %s\n", group, line, what, (int)got,
           err_name(got), (int)want, err_name(want));
  }
}

static void value(int line, const char *what, long long got, long long want) {
  checks++;
  if (got == want) {
    printf("ok   %s: %s = %lld\n", group, what, got);
  } else {
    failures++;
    printf("FAIL %s:%d: %s = %lld, expected %lld\n", group, line, what, got, want);
  }
}

static void truth(int line, const char *what, int ok, const char *detail) {
  checks++;
  if (ok) {
    printf("ok   %s: %s (%s)\n", group, what, detail);
  } else {
    failures++;
    printf("FAIL %s:%d: %s (%s)\n", group, line, what, detail);
  }
}

static void text(int line, const char *what, const char *got, const char *want) {
  checks++;
  if (got && want && strcmp(got, want) == 0) {
    printf("ok   %s: %s = \"%s\"\n", group, what, got);
  } else if (!got && !want) {
    printf("ok   %s: %s = NULL\n", group, what);
  } else {
    failures++;
    printf("FAIL %s:%d: %s = %s%s%s, expected %s%s%s\n", group, line, what, got ? "\"" : "",
           got ? got : "NULL", got ? "\"" : "", want ? "\"" : "", want ? want : "NULL",
           want ? "\"" : "");
  }
}

/* A call with an expected CUresult. */
#define RES(call, want) result(__LINE__, #call, (call), (want))
/* A value with an expected value. */
#define VAL(what, got, want) value(__LINE__, what, (long long)(got), (long long)(want))
/* A condition; `detail` says what was compared. */
#define TRUE(cond, ...)                                                                    \
  do {                                                                                     \
    char d_[256];                                                                          \
    snprintf(d_, sizeof d_, __VA_ARGS__);                                                  \
    truth(__LINE__, #cond, (cond), d_);                                                    \
  } while (0)
#define TEXT(what, got, want) text(__LINE__, what, (got), (want))
/* A call the rest of the group needs: on failure the group stops (counted as failed). */
#define MUST(call)                                                                         \
  do {                                                                                     \
    CUresult r_ = (call);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                              \
      result(__LINE__, #call, r_, CUDA_SUCCESS);                                           \
      printf("     %s: the group cannot go on\n", group);                                   \
      return;                                                                              \
    }                                                                                      \
  } while (0)

static char *read_fixture(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", fixtures, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = (char *)malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    perror(path);
    exit(2);
  }
  buf[n] = 0;
  fclose(f);
  return buf;
}

static CUdevice dev;
static CUcontext primary;

/* cuInit, device 0, its primary context retained and pushed. */
#define SETUP()                                                                            \
  do {                                                                                     \
    MUST(cuInit(0));                                                                       \
    MUST(cuDeviceGet(&dev, 0));                                                            \
    MUST(cuDevicePrimaryCtxRetain(&primary, dev));                                         \
    MUST(cuCtxPushCurrent(primary));                                                       \
  } while (0)

static const char *BAD_PTX = ".version 7.0\n.target sm_80\n.address_size 64\n"
                             ".visible .entry k(.param .u64 p)\n{\n"
                             "    frobnicate.u32 %r1, 3;\n    ret;\n}\n";

/* Module variables and a kernel with static shared memory. */
static const char *GLOBALS_PTX =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .global .align 4 .u32 counter = 7;\n"
    ".visible .global .align 8 .b8 table[64];\n"
    ".visible .entry read_counter(.param .u64 out)\n{\n"
    "    .reg .b32 %r<2>;\n    .reg .b64 %rd<3>;\n"
    "    ld.param.u64 %rd1, [out];\n    cvta.to.global.u64 %rd2, %rd1;\n"
    "    ld.global.u32 %r1, [counter];\n    st.global.u32 [%rd2], %r1;\n    ret;\n}\n"
    ".visible .entry with_shared(.param .u64 out)\n{\n"
    "    .shared .align 4 .b8 buf[1024];\n"
    "    .reg .b32 %r<3>;\n    .reg .b64 %rd<3>;\n"
    "    ld.param.u64 %rd1, [out];\n    cvta.to.global.u64 %rd2, %rd1;\n"
    "    mov.u32 %r1, 5;\n    st.shared.u32 [buf+1020], %r1;\n"
    "    ld.shared.u32 %r2, [buf+1020];\n    st.global.u32 [%rd2], %r2;\n    ret;\n}\n";

/* c[i] = a[i] + b[i] for 1000 elements through `f` launched by `launch`; 1 if right. */
static int vector_add_ok(CUdeviceptr a, CUdeviceptr c, int n) {
  float *host = (float *)malloc(sizeof(float) * (size_t)n);
  if (cuMemcpyDtoH(host, c, sizeof(float) * (size_t)n) != CUDA_SUCCESS) return 0;
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= host[i] == (float)i + (float)i;
  free(host);
  (void)a;
  return ok;
}

/* Buffers a = c = {0, 1, ..., n-1} (floats) and a zeroed output. */
static void vector_buffers(int n, CUdeviceptr *a, CUdeviceptr *out) {
  float *host = (float *)malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) host[i] = (float)i;
  if (cuMemAlloc(a, sizeof(float) * (size_t)n) != CUDA_SUCCESS ||
      cuMemcpyHtoD(*a, host, sizeof(float) * (size_t)n) != CUDA_SUCCESS ||
      cuMemAlloc(out, sizeof(float) * (size_t)n) != CUDA_SUCCESS ||
      cuMemsetD32(*out, 0, (size_t)n) != CUDA_SUCCESS) {
    printf("FAIL %s: cannot make the vector_add buffers\n", group);
    exit(1);
  }
  free(host);
}

/* ------------------------------------------------------------------------------------ */

/* cuGetErrorName / cuGetErrorString (no cuInit needed). */
static void g_errors(void) {
  const char *s = (const char *)1;
  RES(cuGetErrorName(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  TEXT("name of 0", s, "CUDA_SUCCESS");
  RES(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS);
  TEXT("name of 1", s, "CUDA_ERROR_INVALID_VALUE");
  RES(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  TEXT("name of 700", s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  RES(cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  TEXT("string of 700", s, "an illegal memory access was encountered");
  RES(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  TEXT("string of 2", s, "out of memory");
  RES(cuGetErrorString(CUDA_ERROR_NOT_INITIALIZED, &s), CUDA_SUCCESS);
  TEXT("string of 3", s, "initialization error");
  /* An unknown code: CUDA_ERROR_INVALID_VALUE and *pStr = NULL (documented). */
  s = (const char *)1;
  RES(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  TEXT("name of 12345", s, NULL);
  s = (const char *)1;
  RES(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  TEXT("string of 12345", s, NULL);
  RES(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* Before and at cuInit. */
static void g_init(void) {
  int n = -1;
  RES(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  int v = 0;
  RES(cuDriverGetVersion(&v), CUDA_SUCCESS);
  TRUE(v >= 12000 && v % 10 == 0, "cuDriverGetVersion before cuInit: %d", v);
  RES(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  RES(cuInit(0), CUDA_SUCCESS);
  RES(cuInit(0), CUDA_SUCCESS);
  RES(cuDeviceGetCount(&n), CUDA_SUCCESS);
  TRUE(n >= 1, "%d devices", n);
}

/* Device queries the trait does not make. */
static void g_device(void) {
  MUST(cuInit(0));
  int n = 0;
  MUST(cuDeviceGetCount(&n));
  CUdevice d = -1;
  RES(cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
  MUST(cuDeviceGet(&dev, 0));
  CUuuid u1, u2;
  RES(cuDeviceGetUuid(&u1, dev), CUDA_SUCCESS);
  RES(cuDeviceGetUuid_v2(&u2, dev), CUDA_SUCCESS);
  TRUE(memcmp(u1.bytes, u2.bytes, 16) == 0, "cuDeviceGetUuid and _v2 agree");
  int major = -1, minor = -1, amajor = -2, aminor = -2;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  RES(cuDeviceComputeCapability(&major, &minor, dev), CUDA_SUCCESS);
#pragma GCC diagnostic pop
  MUST(cuDeviceGetAttribute(&amajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  MUST(cuDeviceGetAttribute(&aminor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  TRUE(major == amajor && minor == aminor, "cuDeviceComputeCapability %d.%d, attributes %d.%d",
       major, minor, amajor, aminor);
  char bus[32], upper[32];
  MUST(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
  CUdevice again = -1;
  RES(cuDeviceGetByPCIBusId(&again, bus), CUDA_SUCCESS);
  VAL("cuDeviceGetByPCIBusId(own bus id)", again, dev);
  for (size_t i = 0; i <= strlen(bus); i++)
    upper[i] = (char)(bus[i] >= 'a' && bus[i] <= 'f' ? bus[i] - 32 : bus[i]);
  again = -1;
  RES(cuDeviceGetByPCIBusId(&again, upper), CUDA_SUCCESS);
  VAL("cuDeviceGetByPCIBusId(upper case)", again, dev);
  char name[256], small[8];
  MUST(cuDeviceGetName(name, sizeof name, dev));
  RES(cuDeviceGetName(small, sizeof small, dev), CUDA_SUCCESS);
  TRUE(strncmp(small, name, sizeof small - 1) == 0 && small[sizeof small - 1] == 0,
       "a short buffer holds the name's start, NUL-terminated: \"%s\"", small);
  int v = 0;
  RES(cuDeviceGetAttribute(&v, (CUdevice_attribute)0x7fff, dev), CUDA_ERROR_INVALID_VALUE);
  size_t total = 0;
  RES(cuDeviceTotalMem(&total, dev), CUDA_SUCCESS);
  TRUE(total > 0, "%zu bytes", total);
}

/* cuDevicePrimaryCtxGetState / SetFlags / Retain / Release / Reset. */
static void g_primary(void) {
  MUST(cuInit(0));
  MUST(cuDeviceGet(&dev, 0));
  unsigned flags = 99;
  int active = 99;
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  VAL("active before any retain", active, 0);
  VAL("flags before any retain & SCHED_MASK", flags & CU_CTX_SCHED_MASK, 0);
  RES(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  VAL("flags after SetFlags(BLOCKING_SYNC)", flags & CU_CTX_SCHED_MASK,
      CU_CTX_SCHED_BLOCKING_SYNC);
  VAL("active after SetFlags", active, 0);
  MUST(cuDevicePrimaryCtxRetain(&primary, dev));
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  VAL("active after a retain", active, 1);
  MUST(cuCtxPushCurrent(primary));
  unsigned cflags = 99;
  RES(cuCtxGetFlags(&cflags), CUDA_SUCCESS);
  VAL("cuCtxGetFlags of the primary context & SCHED_MASK", cflags & CU_CTX_SCHED_MASK,
      CU_CTX_SCHED_BLOCKING_SYNC);
  /* Since CUDA 11.0 the flags may change while the context is active. */
  RES(cuDevicePrimaryCtxSetFlags(dev, 0), CUDA_SUCCESS);
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  VAL("flags after SetFlags(0)", flags & CU_CTX_SCHED_MASK, 0);
  /* A reset destroys the context's allocations (the retain stays). */
  const size_t big = 256 << 20;
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  MUST(cuMemGetInfo(&free0, &total));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, big));
  MUST(cuMemGetInfo(&free1, &total));
  TRUE(free1 + big <= free0, "free %zu before a 256 MiB allocation, %zu after", free0, free1);
  RES(cuDevicePrimaryCtxReset(dev), CUDA_SUCCESS);
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  CUcontext popped = NULL;
  MUST(cuCtxPopCurrent(&popped));
  MUST(cuDevicePrimaryCtxRelease(dev));
  RES(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  VAL("active after the last release", active, 0);
  MUST(cuDevicePrimaryCtxRetain(&primary, dev));
  MUST(cuCtxPushCurrent(primary));
  MUST(cuMemGetInfo(&free2, &total));
  TRUE(free2 + big / 2 >= free0,
       "free %zu before the allocation, %zu after the reset (a new retain)", free0, free2);
  MUST(cuCtxPopCurrent(&popped));
  MUST(cuDevicePrimaryCtxRelease(dev));
}

/* The per-thread context stack. */
static void g_stack(void) {
  MUST(cuInit(0));
  MUST(cuDeviceGet(&dev, 0));
  CUcontext cur = (CUcontext)1, popped = NULL;
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == NULL, "no current context at start: %p", (void *)cur);
  RES(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
  CUdevice d = -1;
  RES(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
  RES(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  RES(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
  MUST(cuDevicePrimaryCtxRetain(&primary, dev));
  RES(cuCtxPushCurrent(primary), CUDA_SUCCESS);
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == primary, "current %p, primary %p", (void *)cur, (void *)primary);
  RES(cuCtxGetDevice(&d), CUDA_SUCCESS);
  VAL("cuCtxGetDevice", d, dev);
  unsigned api = 0;
  RES(cuCtxGetApiVersion(primary, &api), CUDA_SUCCESS);
  VAL("cuCtxGetApiVersion(primary)", api, 3020);
  api = 0;
  RES(cuCtxGetApiVersion(NULL, &api), CUDA_SUCCESS);
  VAL("cuCtxGetApiVersion(NULL: the current one)", api, 3020);
  int least = 99, greatest = 99;
  RES(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  TRUE(least == 0 && greatest <= 0, "stream priorities: least %d, greatest %d", least, greatest);
  RES(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
  CUfunc_cache cache = (CUfunc_cache)99;
  RES(cuCtxGetCacheConfig(&cache), CUDA_SUCCESS);
  TRUE(cache >= CU_FUNC_CACHE_PREFER_NONE && cache <= CU_FUNC_CACHE_PREFER_EQUAL,
       "cache config %d", (int)cache);
  /* A created context is pushed above the primary one, popped back off. */
  CUcontext c = NULL;
  MUST(cuCtxCreate(&c, 0, dev));
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == c && c != primary, "current %p after cuCtxCreate = %p (primary %p)", (void *)cur,
       (void *)c, (void *)primary);
  RES(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  TRUE(popped == c, "popped %p, created %p", (void *)popped, (void *)c);
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == primary, "current %p after the pop, primary %p", (void *)cur, (void *)primary);
  /* cuCtxSetCurrent replaces the top. */
  RES(cuCtxSetCurrent(c), CUDA_SUCCESS);
  RES(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  TRUE(popped == c, "popped %p after SetCurrent(%p)", (void *)popped, (void *)c);
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == NULL, "current %p: SetCurrent replaced the primary context", (void *)cur);
  RES(cuCtxDestroy(c), CUDA_SUCCESS);
  MUST(cuDevicePrimaryCtxRelease(dev));
}

/* cuCtxCreate: a context of its own, its flags, its memory freed by cuCtxDestroy. */
static void g_ctx_create(void) {
  SETUP();
  const size_t big = 256 << 20;
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  MUST(cuMemGetInfo(&free0, &total));
  CUcontext c = NULL, cur = NULL;
  RES(cuCtxCreate(&c, CU_CTX_SCHED_BLOCKING_SYNC, dev), CUDA_SUCCESS);
  TRUE(c != NULL && c != primary, "created %p, primary %p", (void *)c, (void *)primary);
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == c, "current %p after cuCtxCreate of %p", (void *)cur, (void *)c);
  unsigned flags = 99;
  RES(cuCtxGetFlags(&flags), CUDA_SUCCESS);
  VAL("cuCtxGetFlags of a context created with SCHED_BLOCKING_SYNC", flags & CU_CTX_SCHED_MASK,
      CU_CTX_SCHED_BLOCKING_SYNC);
  CUdeviceptr p = 0, q = 0;
  MUST(cuMemAlloc(&p, big));
  MUST(cuCtxPushCurrent(primary));
  MUST(cuMemGetInfo(&free1, &total));
  TRUE(free1 + big <= free0,
       "free in the primary context: %zu before, %zu while the created one holds 256 MiB",
       free0, free1);
  MUST(cuMemAlloc(&q, 1 << 20));
  TRUE(q + (1 << 20) <= p || p + big <= q,
       "allocations of two contexts do not overlap: %#llx and %#llx", (unsigned long long)p,
       (unsigned long long)q);
  MUST(cuMemFree(q));
  MUST(cuCtxPopCurrent(&cur));
  /* Destroying the current context pops it: the primary one is current again. */
  RES(cuCtxDestroy(c), CUDA_SUCCESS);
  cur = NULL;
  RES(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  TRUE(cur == primary, "current %p after cuCtxDestroy, primary %p", (void *)cur,
       (void *)primary);
  MUST(cuCtxSetCurrent(primary));
  MUST(cuMemGetInfo(&free2, &total));
  TRUE(free2 + big / 2 >= free0, "free %zu before cuCtxCreate, %zu after cuCtxDestroy", free0,
       free2);
  /* cuCtxCreate_v4 without parameters is a context too. */
  CUcontext c4 = NULL;
  RES(cuCtxCreate_v4(&c4, NULL, 0, dev), CUDA_SUCCESS);
  TRUE(c4 != NULL && c4 != primary, "cuCtxCreate_v4 made %p", (void *)c4);
  if (c4) RES(cuCtxDestroy(c4), CUDA_SUCCESS);
}

/* cuModuleLoadDataEx with JIT options. */
static void g_module_ex(void) {
  SETUP();
  char elog[4096], ilog[4096];
  memset(elog, 0, sizeof elog);
  memset(ilog, 0, sizeof ilog);
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_LOG_VERBOSE};
  void *vals[] = {elog, (void *)(size_t)sizeof elog, ilog, (void *)(size_t)sizeof ilog,
                  (void *)(size_t)1};
  CUmodule m = NULL;
  RES(cuModuleLoadDataEx(&m, BAD_PTX, 5, opts, vals), CUDA_ERROR_INVALID_PTX);
  size_t filled = (size_t)vals[1];
  TRUE(strstr(elog, "error") != NULL, "the error log: \"%.200s\"", elog);
  TRUE(filled > 0 && filled <= sizeof elog,
       "ERROR_LOG_BUFFER_SIZE_BYTES out = %zu (of %zu; the log holds %zu bytes)", filled,
       sizeof elog, strlen(elog));
  char *ptx = read_fixture("vector_add.nvrtc.ptx");
  memset(elog, 0, sizeof elog);
  void *vals2[] = {elog, (void *)(size_t)sizeof elog, ilog, (void *)(size_t)sizeof ilog,
                   (void *)(size_t)1};
  RES(cuModuleLoadDataEx(&m, ptx, 5, opts, vals2), CUDA_SUCCESS);
  TRUE(elog[0] == 0, "no error log for a good module: \"%.200s\"", elog);
  CUfunction f;
  RES(cuModuleGetFunction(&f, m, "vector_add"), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  RES(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  free(ptx);
}

/* cuModuleLoad of files; argument errors. */
static void g_module_file(void) {
  SETUP();
  char path[4096];
  snprintf(path, sizeof path, "%s/vector_add.nvrtc.ptx", fixtures);
  CUmodule m = NULL;
  RES(cuModuleLoad(&m, path), CUDA_SUCCESS);
  CUfunction f;
  RES(cuModuleGetFunction(&f, m, "vector_add"), CUDA_SUCCESS);
  RES(cuModuleGetFunction(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  RES(cuModuleGetFunction(&f, m, NULL), CUDA_ERROR_INVALID_VALUE);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  RES(cuModuleLoad(&m, "/nonexistent/vmgpu/kernel.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
  RES(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* cuModuleGetGlobal. */
static void g_globals(void) {
  SETUP();
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUdeviceptr p = 0, t = 0;
  size_t n = 0;
  RES(cuModuleGetGlobal(&p, &n, m, "counter"), CUDA_SUCCESS);
  VAL("size of counter", n, 4);
  unsigned v = 0;
  if (p) {
    RES(cuMemcpyDtoH(&v, p, 4), CUDA_SUCCESS);
    VAL("counter's initial value", v, 7);
  }
  n = 0;
  RES(cuModuleGetGlobal(&t, &n, m, "table"), CUDA_SUCCESS);
  VAL("size of table", n, 64);
  n = 0;
  RES(cuModuleGetGlobal(NULL, &n, m, "table"), CUDA_SUCCESS);
  VAL("size of table, no address asked", n, 64);
  RES(cuModuleGetGlobal(&t, NULL, m, "no_such_variable"), CUDA_ERROR_NOT_FOUND);
  if (p) {
    /* A kernel reads what the host wrote. */
    unsigned nine = 9, got = 0;
    CUdeviceptr out;
    MUST(cuMemAlloc(&out, 4));
    MUST(cuMemcpyHtoD(p, &nine, 4));
    CUfunction k;
    MUST(cuModuleGetFunction(&k, m, "read_counter"));
    void *args[] = {&out};
    RES(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    RES(cuMemcpyDtoH(&got, out, 4), CUDA_SUCCESS);
    VAL("the kernel's read of counter", got, 9);
  }
  RES(cuModuleUnload(m), CUDA_SUCCESS);
}

/* cuFuncGetAttribute. */
static void g_func_attr(void) {
  SETUP();
  char *ptx = read_fixture("vector_add.nvrtc.ptx");
  CUmodule m, g;
  MUST(cuModuleLoadData(&m, ptx));
  MUST(cuModuleLoadData(&g, GLOBALS_PTX));
  CUfunction f, sh;
  MUST(cuModuleGetFunction(&f, m, "vector_add"));
  MUST(cuModuleGetFunction(&sh, g, "with_shared"));
  int major = 0, minor = 0;
  MUST(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  MUST(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  int v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), CUDA_SUCCESS);
  VAL("MAX_THREADS_PER_BLOCK of vector_add", v, 1024);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_SUCCESS);
  TRUE(v > 0 && v <= 255, "NUM_REGS of vector_add = %d", v);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  VAL("SHARED_SIZE_BYTES of vector_add", v, 0);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, sh), CUDA_SUCCESS);
  VAL("SHARED_SIZE_BYTES of with_shared (.shared .b8 buf[1024])", v, 1024);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), CUDA_SUCCESS);
  VAL("LOCAL_SIZE_BYTES of vector_add", v, 0);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f), CUDA_SUCCESS);
  VAL("PTX_VERSION of vector_add (.target sm_80)", v, 80);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f), CUDA_SUCCESS);
  VAL("BINARY_VERSION of vector_add (the device's)", v, major * 10 + minor);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  VAL("MAX_DYNAMIC_SHARED_SIZE_BYTES of vector_add (48 KiB less its static)", v, 48 << 10);
  v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sh),
      CUDA_SUCCESS);
  VAL("MAX_DYNAMIC_SHARED_SIZE_BYTES of with_shared", v, (48 << 10) - 1024);
  RES(cuFuncGetAttribute(&v, (CUfunction_attribute)9999, f), CUDA_ERROR_INVALID_VALUE);
  RES(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  RES(cuModuleUnload(g), CUDA_SUCCESS);
  free(ptx);
}

/* cuFuncSetAttribute: the dynamic shared memory opt-in, read back and used. */
static void g_func_set_attr(void) {
  SETUP();
  char *ptx = read_fixture("dyn_shared.nvrtc.ptx");
  CUmodule m;
  MUST(cuModuleLoadData(&m, ptx));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "dyn_shared"));
  int optin = 0;
  MUST(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  /* dyn_shared(in, out, out2, n) with 8 * blockDim bytes; launched with 64 KiB. */
  int n = 256;
  CUdeviceptr in, out, out2;
  float host_in[256];
  for (int i = 0; i < n; i++) host_in[i] = (float)i;
  MUST(cuMemAlloc(&in, sizeof host_in));
  MUST(cuMemAlloc(&out, sizeof host_in));
  MUST(cuMemAlloc(&out2, sizeof host_in));
  MUST(cuMemcpyHtoD(in, host_in, sizeof host_in));
  void *args[] = {&in, &out, &out2, &n};
  RES(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 64 << 10, NULL, args, NULL),
      CUDA_ERROR_INVALID_VALUE);
  RES(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10),
      CUDA_SUCCESS);
  int v = -1;
  RES(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  VAL("MAX_DYNAMIC_SHARED_SIZE_BYTES after setting 64 KiB", v, 64 << 10);
  RES(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 64 << 10, NULL, args, NULL), CUDA_SUCCESS);
  float host_out[256] = {0};
  RES(cuMemcpyDtoH(host_out, out, sizeof host_out), CUDA_SUCCESS);
  TRUE(host_out[0] == 255.0f && host_out[255] == 0.0f, "reversed block: out[0] = %g, out[255] = %g",
       (double)host_out[0], (double)host_out[255]);
  RES(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1),
      CUDA_ERROR_INVALID_VALUE);
  RES(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50),
      CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  free(ptx);
}

/* cuLaunchKernel with `extra`. */
static void g_launch_extra(void) {
  SETUP();
  char *ptx = read_fixture("vector_add.nvrtc.ptx");
  CUmodule m;
  MUST(cuModuleLoadData(&m, ptx));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "vector_add"));
  int n = 1000;
  CUdeviceptr a, c;
  vector_buffers(n, &a, &c);
  struct {
    CUdeviceptr a, b, c;
    int n;
  } params = {a, a, c, n};
  size_t size = sizeof params;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  RES(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
  TRUE(vector_add_ok(a, c, n), "vector_add through extra");
  void *args[] = {&a, &a, &c, &n};
  RES(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, args, extra), CUDA_ERROR_INVALID_VALUE);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  free(ptx);
}

typedef CUresult (*memcpy_htod_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*memcpy_dtoh_async_t)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*memset_d32_t)(CUdeviceptr, unsigned int, size_t);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*stream_t)(CUstream);
typedef CUresult (*record_t)(CUevent, CUstream);

static void *proc(const char *name, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  CUresult r = cuGetProcAddress(name, &p, 12000, flags, &st);
  if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
    printf("FAIL %s: cuGetProcAddress(%s, 12000, %llu) = %d, status %d\n", group, name,
           (unsigned long long)flags, (int)r, (int)st);
    exit(1);
  }
  return p;
}

/* The per-thread default stream: the _ptsz/_ptds variants, and CU_STREAM_PER_THREAD and
 * CU_STREAM_LEGACY with the legacy ones. */
static void g_per_thread(void) {
  SETUP();
  const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  memcpy_htod_t htod = (memcpy_htod_t)proc("cuMemcpyHtoD", pt);
  memcpy_dtoh_async_t dtoh_async = (memcpy_dtoh_async_t)proc("cuMemcpyDtoHAsync", pt);
  memset_d32_t memset32 = (memset_d32_t)proc("cuMemsetD32", pt);
  launch_t launch = (launch_t)proc("cuLaunchKernel", pt);
  stream_t sync = (stream_t)proc("cuStreamSynchronize", pt);
  stream_t query = (stream_t)proc("cuStreamQuery", pt);
  record_t record = (record_t)proc("cuEventRecord", pt);
  TRUE((void *)launch == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"),
       "the per-thread cuLaunchKernel is cuLaunchKernel_ptsz");
  char *ptx = read_fixture("vector_add.nvrtc.ptx");
  CUmodule m;
  MUST(cuModuleLoadData(&m, ptx));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "vector_add"));
  int n = 1000;
  float host[1000];
  for (int i = 0; i < n; i++) host[i] = (float)i;
  CUdeviceptr a, c;
  MUST(cuMemAlloc(&a, sizeof host));
  MUST(cuMemAlloc(&c, sizeof host));
  RES(htod(a, host, sizeof host), CUDA_SUCCESS);
  RES(memset32(c, 0, (size_t)n), CUDA_SUCCESS);
  void *args[] = {&a, &a, &c, &n};
  RES(launch(f, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  CUevent ev;
  MUST(cuEventCreate(&ev, 0));
  RES(record(ev, NULL), CUDA_SUCCESS);
  RES(sync(NULL), CUDA_SUCCESS);
  RES(query(NULL), CUDA_SUCCESS);
  RES(cuEventQuery(ev), CUDA_SUCCESS);
  float *pinned = NULL;
  MUST(cuMemAllocHost((void **)&pinned, sizeof host));
  RES(dtoh_async(pinned, c, sizeof host, NULL), CUDA_SUCCESS);
  RES(sync(NULL), CUDA_SUCCESS);
  TRUE(pinned[999] == 1998.0f && pinned[1] == 2.0f, "per-thread stream: c[999] = %g",
       (double)pinned[999]);
  /* The stream handles CU_STREAM_PER_THREAD and CU_STREAM_LEGACY with the legacy entry
   * points. */
  MUST(cuMemsetD32(c, 0, (size_t)n));
  RES(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, CU_STREAM_PER_THREAD, args, NULL), CUDA_SUCCESS);
  RES(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  TRUE(vector_add_ok(a, c, n), "vector_add on CU_STREAM_PER_THREAD");
  MUST(cuMemsetD32(c, 0, (size_t)n));
  RES(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, CU_STREAM_LEGACY, args, NULL), CUDA_SUCCESS);
  RES(cuStreamSynchronize(CU_STREAM_LEGACY), CUDA_SUCCESS);
  TRUE(vector_add_ok(a, c, n), "vector_add on CU_STREAM_LEGACY");
  RES(cuMemFreeHost(pinned), CUDA_SUCCESS);
  RES(cuEventDestroy(ev), CUDA_SUCCESS);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
  free(ptx);
}

/* cuGetProcAddress (the _v2 of cuda.h 12). */
static void g_procaddr(void) {
  MUST(cuInit(0));
  void *p = NULL;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  RES(cuGetProcAddress("cuMemAlloc", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);
  VAL("status of cuMemAlloc", st, CU_GET_PROC_ADDRESS_SUCCESS);
  TRUE(p != NULL && p == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), "cuMemAlloc at 12000 is cuMemAlloc_v2");
  p = (void *)1;
  RES(cuGetProcAddress("cuNoSuchEntryPoint", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
      CUDA_ERROR_NOT_FOUND);
  VAL("status of cuNoSuchEntryPoint", st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  TRUE(p == NULL, "no address for an unknown name: %p", p);
  RES(cuGetProcAddress("cuMemAllocAsync", &p, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
      CUDA_ERROR_NOT_FOUND);
  VAL("status of cuMemAllocAsync at 11000 (introduced in 11.2)", st,
      CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  RES(cuGetProcAddress("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
      CUDA_SUCCESS);
  TRUE(p != NULL && p == dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"),
       "cuGetProcAddress at 12000 is cuGetProcAddress_v2");
  RES(cuGetProcAddress(NULL, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st),
      CUDA_ERROR_INVALID_VALUE);
}

/* Mapped page-locked memory: cuMemHostGetDevicePointer. */
static void g_host_ptr(void) {
  SETUP();
  int can_map = 0, same_ptr = 0;
  MUST(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
  MUST(cuDeviceGetAttribute(&same_ptr,
                            CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev));
  void *h = NULL;
  MUST(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr d = 0;
  /* Documented: INVALID_VALUE on a device that cannot map host memory. */
  RES(cuMemHostGetDevicePointer(&d, h, 0), can_map ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
  if (can_map)
    TRUE(d != 0 && (!same_ptr || d == (CUdeviceptr)(size_t)h),
         "device pointer %#llx of host %p (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM %d)",
         (unsigned long long)d, h, same_ptr);
  /* Flags must be 0. */
  RES(cuMemHostGetDevicePointer(&d, h, 1), CUDA_ERROR_INVALID_VALUE);
  RES(cuMemFreeHost(h), CUDA_SUCCESS);
}

/* cuPointerGetAttribute. */
static void g_pointer_attr(void) {
  SETUP();
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 4096));
  unsigned type = 0;
  RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_SUCCESS);
  VAL("MEMORY_TYPE of cuMemAlloc memory", type, CU_MEMORYTYPE_DEVICE);
  type = 0;
  RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100), CUDA_SUCCESS);
  VAL("MEMORY_TYPE inside it", type, CU_MEMORYTYPE_DEVICE);
  CUcontext ctx = NULL;
  RES(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_SUCCESS);
  TRUE(ctx == primary, "CONTEXT %p, primary %p", (void *)ctx, (void *)primary);
  int ordinal = -1;
  RES(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
  VAL("DEVICE_ORDINAL", ordinal, 0);
  void *h = NULL;
  MUST(cuMemAllocHost(&h, 4096));
  type = 0;
  RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(size_t)h),
      CUDA_SUCCESS);
  VAL("MEMORY_TYPE of cuMemAllocHost memory", type, CU_MEMORYTYPE_HOST);
  void *hp = NULL;
  RES(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(size_t)h + 8),
      CUDA_SUCCESS);
  TRUE(hp == (char *)h + 8, "HOST_POINTER %p of %p + 8", hp, h);
  /* The allocation's range, from inside it. */
  CUdeviceptr base = 0, start = 0;
  size_t size = 0, rsize = 0;
  RES(cuMemGetAddressRange(&base, &size, p + 4000), CUDA_SUCCESS);
  TRUE(base == p && size == 4096, "range %#llx+%zu of %#llx", (unsigned long long)base, size,
       (unsigned long long)p);
  RES(cuMemGetAddressRange(&base, &size, p + 4096 + (1 << 20)), CUDA_ERROR_NOT_FOUND);
  RES(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 9), CUDA_SUCCESS);
  RES(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 9), CUDA_SUCCESS);
  TRUE(start == p && rsize == 4096, "RANGE_START_ADDR %#llx, RANGE_SIZE %zu",
       (unsigned long long)start, rsize);
  CUdeviceptr dp = 0;
  RES(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p + 9), CUDA_SUCCESS);
  TRUE(dp == p + 9, "DEVICE_POINTER %#llx", (unsigned long long)dp);
  unsigned long long id1 = 0, id2 = 0;
  CUdeviceptr q;
  MUST(cuMemAlloc(&q, 64));
  RES(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_SUCCESS);
  RES(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, q), CUDA_SUCCESS);
  TRUE(id1 != id2, "BUFFER_IDs %llu and %llu differ", id1, id2);
  /* Several at once; an address of nobody's is no error, just null answers. */
  CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned mt = 0;
  CUcontext owner = NULL;
  int managed = -1;
  void *slots[3] = {&mt, &owner, &managed};
  RES(cuPointerGetAttributes(3, which, slots, q), CUDA_SUCCESS);
  TRUE(mt == CU_MEMORYTYPE_DEVICE && owner == primary && managed == 0,
       "attributes of q: type %u, context %p, managed %d", mt, (void *)owner, managed);
  mt = 7;
  owner = primary;
  RES(cuPointerGetAttributes(3, which, slots, (CUdeviceptr)0x10), CUDA_SUCCESS);
  TRUE(mt == 0 && owner == NULL, "attributes of nobody's address: type %u, context %p", mt,
       (void *)owner);
  RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)0x10),
      CUDA_ERROR_INVALID_VALUE);
  MUST(cuMemFree(q));
  RES(cuMemFreeHost(h), CUDA_SUCCESS);
  RES(cuMemFree(p), CUDA_SUCCESS);
  RES(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
}

/* cuMemAllocAsync / cuMemFreeAsync as MEMORY_POOLS_SUPPORTED says. */
static void g_mem_async(void) {
  SETUP();
  int pools = -1;
  MUST(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
  CUstream s;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p = 0;
  if (pools) {
    RES(cuMemAllocAsync(&p, 4096, s), CUDA_SUCCESS);
    RES(cuMemsetD32Async(p, 0x01020304, 1024, s), CUDA_SUCCESS);
    unsigned v[4] = {0};
    RES(cuMemcpyDtoHAsync(v, p, sizeof v, s), CUDA_SUCCESS);
    RES(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    RES(cuStreamSynchronize(s), CUDA_SUCCESS);
    VAL("a word of the stream-ordered allocation", v[3], 0x01020304);
  } else {
    RES(cuMemAllocAsync(&p, 4096, s), CUDA_ERROR_NOT_SUPPORTED);
  }
  RES(cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Streams and events beyond the trait. */
static void g_streams(void) {
  SETUP();
  int least = 0, greatest = 0;
  MUST(cuCtxGetStreamPriorityRange(&least, &greatest));
  CUstream s;
  RES(cuStreamCreate(&s, 0x40), CUDA_ERROR_INVALID_VALUE);
  RES(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest), CUDA_SUCCESS);
  CUevent e;
  MUST(cuEventCreate(&e, CU_EVENT_DEFAULT));
  RES(cuEventRecordWithFlags(e, s, CU_EVENT_RECORD_DEFAULT), CUDA_SUCCESS);
  RES(cuStreamWaitEvent(NULL, e, 0), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  RES(cuEventQuery(e), CUDA_SUCCESS);
  float ms = -1;
  RES(cuEventElapsedTime(&ms, e, e), CUDA_SUCCESS);
  TRUE(ms == 0.0f, "elapsed time between an event and itself: %g ms", (double)ms);
  RES(cuEventDestroy(e), CUDA_SUCCESS);
  RES(cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Host functions and stream callbacks run after the stream's work so far, in order. */
static unsigned host_seen[4];
static int host_calls;
static void CUDA_CB after_copy(void *data) {
  memcpy(host_seen, data, sizeof host_seen);
  host_calls++;
}
static CUresult callback_status = (CUresult)-1;
static CUstream callback_stream;
static void CUDA_CB callback(CUstream s, CUresult status, void *data) {
  callback_status = status;
  callback_stream = s;
  *(int *)data += 10;
}
/* A host function that waits until the caller releases it (at most 20 s), then writes
 * the (page-locked) word the copy after it sends to the device. */
static volatile int host_release;
static void CUDA_CB wait_for_release(void *data) {
  time_t until = time(NULL) + 20;
  while (!__atomic_load_n(&host_release, __ATOMIC_ACQUIRE) && time(NULL) < until) usleep(1000);
  *(unsigned *)data = 77;
}
static void g_host_func(void) {
  SETUP();
  {
    /* The caller goes on while the host function runs; the stream's later work waits
     * for it (here copies, from and to page-locked memory, of what it writes), and so
     * do the stream's queries. */
    CUstream hs;
    MUST(cuStreamCreate(&hs, CU_STREAM_NON_BLOCKING));
    CUevent ev;
    MUST(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    CUdeviceptr w;
    MUST(cuMemAlloc(&w, 4));
    MUST(cuMemsetD32(w, 0, 1));
    unsigned *held_word, *back;
    MUST(cuMemAllocHost((void **)&held_word, 8));
    back = held_word + 1;
    *held_word = 1;
    *back = 0;
    time_t t0 = time(NULL);
    RES(cuLaunchHostFunc(hs, wait_for_release, held_word), CUDA_SUCCESS);
    TRUE(time(NULL) - t0 < 10, "cuLaunchHostFunc returned before the function did (%ld s)",
         (long)(time(NULL) - t0));
    RES(cuMemcpyHtoDAsync(w, held_word, 4, hs), CUDA_SUCCESS);
    RES(cuMemcpyDtoHAsync(back, w, 4, hs), CUDA_SUCCESS);
    RES(cuEventRecord(ev, hs), CUDA_SUCCESS);
    RES(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
    RES(cuStreamQuery(hs), CUDA_ERROR_NOT_READY);
    __atomic_store_n(&host_release, 1, __ATOMIC_RELEASE);
    RES(cuEventSynchronize(ev), CUDA_SUCCESS);
    RES(cuEventQuery(ev), CUDA_SUCCESS);
    VAL("the word copied after the host function (it wrote 77)", *back, 77);
    RES(cuStreamSynchronize(hs), CUDA_SUCCESS);
    RES(cuStreamQuery(hs), CUDA_SUCCESS);
    MUST(cuMemFree(w));
    MUST(cuMemFreeHost(held_word));
    MUST(cuEventDestroy(ev));
    RES(cuStreamDestroy(hs), CUDA_SUCCESS);
  }
  CUstream s;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 4096));
  unsigned v[4] = {0};
  RES(cuMemsetD32Async(p, 0xabcd, 1024, s), CUDA_SUCCESS);
  RES(cuMemcpyDtoHAsync(v, p, sizeof v, s), CUDA_SUCCESS);
  RES(cuLaunchHostFunc(s, after_copy, v), CUDA_SUCCESS);
  int counter = 1;
  RES(cuStreamAddCallback(s, callback, &counter, 0), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  VAL("host function calls", host_calls, 1);
  VAL("a word the host function saw after the copy", host_seen[3], 0xabcd);
  VAL("the callback's status", callback_status, CUDA_SUCCESS);
  TRUE(callback_stream == s, "the callback's stream %p", (void *)callback_stream);
  VAL("the callback's data", counter, 11);
  RES(cuLaunchHostFunc(s, NULL, v), CUDA_ERROR_INVALID_VALUE);
  RES(cuStreamAddCallback(s, callback, &counter, 1), CUDA_ERROR_INVALID_VALUE);
  RES(cuLaunchHostFunc(NULL, after_copy, v), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  VAL("host function calls on the null stream", host_calls, 2);
  RES(cuProfilerStart(), CUDA_SUCCESS);
  RES(cuProfilerStop(), CUDA_SUCCESS);
  MUST(cuMemFree(p));
  RES(cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Graphs built node by node: a memset, then a kernel and a 2-D copy after it, a host
 * function after the copy, an empty node; they run in an order their dependencies
 * allow, each launch again; a cycle is refused at instantiation. */
static void g_graph_nodes(void) {
  SETUP();
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "read_counter"));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 64));
  MUST(cuMemsetD32(p, 1, 16));
  unsigned host[16] = {0};
  CUgraph g;
  RES(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode set, kern, copy, hostn, empty;
  CUDA_MEMSET_NODE_PARAMS ms = {0};
  ms.dst = p;
  ms.pitch = 32;
  ms.value = 5;
  ms.elementSize = 4;
  ms.width = 6;
  ms.height = 2; /* words 0..5 and 8..13 */
  RES(cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, primary), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS kp = {0};
  void *args[] = {&p};
  kp.func = f;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  RES(cuGraphAddKernelNode(&kern, g, &set, 1, &kp), CUDA_SUCCESS);
  CUDA_MEMCPY3D cp = {0};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = p;
  cp.srcPitch = 32;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = host;
  cp.dstPitch = 32;
  cp.WidthInBytes = 16; /* words 0..3 and 8..11 */
  cp.Height = 2;
  cp.Depth = 1;
  RES(cuGraphAddMemcpyNode(&copy, g, &kern, 1, &cp, primary), CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS hp = {after_copy, host};
  RES(cuGraphAddHostNode(&hostn, g, &copy, 1, &hp), CUDA_SUCCESS);
  RES(cuGraphAddEmptyNode(&empty, g, NULL, 0), CUDA_SUCCESS);
  RES(cuGraphAddDependencies(g, &set, &empty, 1), CUDA_SUCCESS);
  RES(cuGraphAddDependencies(g, &set, &empty, 1), CUDA_ERROR_INVALID_VALUE);
  size_t count = 0;
  RES(cuGraphGetNodes(g, NULL, &count), CUDA_SUCCESS);
  VAL("nodes", count, 5);
  CUgraphNode roots[4] = {0};
  count = 4;
  RES(cuGraphGetRootNodes(g, roots, &count), CUDA_SUCCESS);
  VAL("root nodes", count, 1);
  TRUE(roots[0] == set && roots[1] == NULL, "the root is the memset (%p, then %p)", (void *)roots[0],
       (void *)roots[1]);
  CUgraphNodeType t = CU_GRAPH_NODE_TYPE_GRAPH;
  RES(cuGraphNodeGetType(kern, &t), CUDA_SUCCESS);
  VAL("kernel node type", t, CU_GRAPH_NODE_TYPE_KERNEL);
  RES(cuGraphNodeGetType(copy, &t), CUDA_SUCCESS);
  VAL("memcpy node type", t, CU_GRAPH_NODE_TYPE_MEMCPY);
  RES(cuGraphNodeGetType(empty, &t), CUDA_SUCCESS);
  VAL("empty node type", t, CU_GRAPH_NODE_TYPE_EMPTY);
  CUgraph other;
  RES(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  CUgraphNode foreign;
  RES(cuGraphAddEmptyNode(&foreign, other, &set, 1), CUDA_ERROR_INVALID_VALUE);
  CUgraphExec x;
  RES(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  int calls = host_calls;
  unsigned now[16];
  MUST(cuMemcpyDtoH(now, p, sizeof now));
  VAL("nothing ran before the launch", now[0], 1);
  RES(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  VAL("word 0: the kernel's counter, after the memset", host[0], 7);
  VAL("word 1: the memset", host[1], 5);
  VAL("word 8: the memset's second row, copied as the copy's second row", host[8], 5);
  VAL("word 4: not copied", host[4], 0);
  VAL("the host function ran after the copy", host_seen[1], 5);
  VAL("the host function ran once", host_calls, calls + 1);
  MUST(cuMemcpyDtoH(now, p, sizeof now));
  VAL("word 6: past the memset's row", now[6], 1);
  VAL("word 13: the end of its second row", now[13], 5);
  memset(host, 0, sizeof host);
  RES(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  VAL("a second launch copies again", host[9], 5);
  /* A clone is a graph of its own; a cycle is refused when instantiated. */
  CUgraph c;
  RES(cuGraphClone(&c, g), CUDA_SUCCESS);
  count = 0;
  RES(cuGraphGetNodes(c, NULL, &count), CUDA_SUCCESS);
  VAL("the clone's nodes", count, 5);
  RES(cuGraphAddDependencies(g, &hostn, &set, 1), CUDA_SUCCESS);
  CUgraphExec bad;
  RES(cuGraphInstantiate(&bad, g, 0), CUDA_ERROR_INVALID_VALUE);
  RES(cuGraphInstantiate(&bad, c, 0), CUDA_SUCCESS);
  RES(cuGraphExecDestroy(bad), CUDA_SUCCESS);
  RES(cuGraphExecDestroy(x), CUDA_SUCCESS);
  RES(cuGraphDestroy(c), CUDA_SUCCESS);
  RES(cuGraphDestroy(other), CUDA_SUCCESS);
  RES(cuGraphDestroy(g), CUDA_SUCCESS);
  RES(cuGraphNodeGetType(kern, &t), CUDA_ERROR_INVALID_VALUE);
  MUST(cuMemFree(p));
  MUST(cuModuleUnload(m));
}

/* Stream capture and graphs: captured work does not run until the graph is launched,
 * then runs in order on the launch stream, each launch again; what a capture cannot
 * hold is refused and invalidates it. */
static int destroyed;
static void CUDA_CB destroy_object(void *p) { destroyed += *(int *)p; }
static void g_graphs(void) {
  SETUP();
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "read_counter"));
  CUstream s;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 64));
  MUST(cuMemsetD32(p, 1, 16));
  unsigned host[16] = {0};
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  RES(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  VAL("capture status before", st, CU_STREAM_CAPTURE_STATUS_NONE);
  RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_ERROR_ILLEGAL_STATE);
  RES(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  VAL("capture status while capturing", st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  cuuint64_t id = 0;
  CUgraph building = NULL;
  RES(cuStreamGetCaptureInfo(s, &st, &id, &building, NULL, NULL), CUDA_SUCCESS);
  TRUE(id != 0 && building != NULL, "capture id %llu, graph %p", (unsigned long long)id,
       (void *)building);
  RES(cuMemsetD32Async(p, 5, 16, s), CUDA_SUCCESS);
  void *args[] = {&p};
  RES(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
  RES(cuMemcpyDtoHAsync(host, p, sizeof host, s), CUDA_SUCCESS);
  RES(cuLaunchHostFunc(s, after_copy, host), CUDA_SUCCESS);
  int calls = host_calls;
  CUgraph g = NULL;
  RES(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  TRUE(g == building, "the graph ended is the one being built (%p, %p)", (void *)g, (void *)building);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  unsigned now[16];
  MUST(cuMemcpyDtoH(now, p, sizeof now));
  VAL("captured work has not run: word 0", now[0], 1);
  VAL("captured work has not run: word 1", now[1], 1);
  VAL("captured host function has not run", host_calls, calls);
  CUgraph none;
  RES(cuStreamEndCapture(s, &none), CUDA_ERROR_ILLEGAL_STATE);
  CUgraphExec x;
  RES(cuGraphInstantiate(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH), CUDA_ERROR_INVALID_VALUE);
  RES(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  RES(cuGraphLaunch(x, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  VAL("after a launch: word 0 (the kernel's counter)", host[0], 7);
  VAL("after a launch: word 1 (the memset)", host[1], 5);
  VAL("the host function ran once", host_calls, calls + 1);
  VAL("the host function saw the copy", host_seen[2], 5);
  MUST(cuMemsetD32(p, 9, 16));
  RES(cuGraphLaunch(x, s), CUDA_SUCCESS);
  RES(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  VAL("after two more launches: word 1", host[1], 5);
  VAL("the host function ran three times", host_calls, calls + 3);
  /* User objects: the graph and its executable form hold references. */
  int weight = 1;
  CUuserObject obj;
  RES(cuUserObjectCreate(&obj, &weight, destroy_object, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC), CUDA_SUCCESS);
  RES(cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE), CUDA_SUCCESS);
  CUgraphExec x2;
  RES(cuGraphInstantiate(&x2, g, 0), CUDA_SUCCESS);
  RES(cuGraphExecDestroy(x), CUDA_SUCCESS);
  RES(cuGraphDestroy(g), CUDA_SUCCESS);
  VAL("the object lives while an executable graph holds it", destroyed, 0);
  RES(cuGraphExecDestroy(x2), CUDA_SUCCESS);
  VAL("the object's destructor ran once", destroyed, 1);
  RES(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE);
  /* What a capture cannot hold. */
  CUevent e;
  MUST(cuEventCreate(&e, 0));
  RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  RES(cuEventRecord(e, s), CUDA_SUCCESS);
  RES(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
  RES(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  VAL("capture status after querying a captured event", st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  RES(cuMemsetD32Async(p, 5, 16, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  g = (CUgraph)1;
  RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  TRUE(g == NULL, "no graph from an invalidated capture (%p)", (void *)g);
  RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  RES(cuStreamEndCapture(s, &none), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  RES(cuEventRecord(e, s), CUDA_SUCCESS);
  RES(cuEventSynchronize(e), CUDA_SUCCESS);
  /* Two streams in one capture: joined by an event, replayed in capture order. */
  CUstream s2;
  MUST(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  RES(cuEventRecord(e, s), CUDA_SUCCESS);
  RES(cuStreamWaitEvent(s2, e, 0), CUDA_SUCCESS);
  RES(cuMemsetD32Async(p, 3, 8, s2), CUDA_SUCCESS);
  RES(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
  VAL("a joined stream captures", st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUevent e2;
  MUST(cuEventCreate(&e2, 0));
  RES(cuEventRecord(e2, s2), CUDA_SUCCESS);
  RES(cuStreamWaitEvent(s, e2, 0), CUDA_SUCCESS);
  RES(cuStreamEndCapture(s2, &none), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  RES(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  RES(cuStreamIsCapturing(s2, &st), CUDA_SUCCESS);
  VAL("the joined stream stops capturing", st, CU_STREAM_CAPTURE_STATUS_NONE);
  RES(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  MUST(cuMemsetD32(p, 0, 16));
  RES(cuGraphLaunch(x, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  MUST(cuMemcpyDtoH(now, p, sizeof now));
  VAL("the second stream's memset: word 7", now[7], 3);
  VAL("beyond it: word 8", now[8], 0);
  RES(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  RES(cuGraphExecDestroy(x), CUDA_SUCCESS);
  RES(cuGraphDestroy(g), CUDA_SUCCESS);
  RES(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  MUST(cuEventDestroy(e));
  MUST(cuEventDestroy(e2));
  MUST(cuStreamDestroy(s2));
  MUST(cuStreamDestroy(s));
  MUST(cuMemFree(p));
  MUST(cuModuleUnload(m));
}

/* Managed memory and mapped page-locked memory: one address for the host and kernels,
 * where the device says it has them (MANAGED_MEMORY, CAN_MAP_HOST_MEMORY); where it says
 * not, the calls fail as the driver's do on such a device. */
static void g_managed(void) {
  SETUP();
  int managed = 0, concurrent = 0, can_map = 0;
  MUST(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
  MUST(cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev));
  MUST(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
  printf("managed %d, concurrent %d, can map %d\n", managed, concurrent, can_map);
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "read_counter"));
  CUdeviceptr u = 0;
  RES(cuMemAllocManaged(&u, 4096, CU_MEM_ATTACH_GLOBAL), managed ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED);
  if (managed) {
    unsigned *hu = (unsigned *)(size_t)u;
    VAL("managed memory starts zeroed (read by the host)", hu[5], 0);
    hu[1] = 41;
    void *args[] = {&u};
    RES(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    RES(cuCtxSynchronize(), CUDA_SUCCESS);
    VAL("a kernel's store, read by the host", hu[0], 7);
    unsigned back = 0;
    RES(cuMemcpyDtoH(&back, u + 4, 4), CUDA_SUCCESS);
    VAL("a host store, copied from the device side", back, 41);
    RES(cuMemsetD32(u + 8, 0x5a5a5a5a, 2), CUDA_SUCCESS);
    VAL("a synchronous memset, read by the host", hu[3], 0x5a5a5a5a);
    int is_managed = 0;
    RES(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, u + 16), CUDA_SUCCESS);
    VAL("IS_MANAGED", is_managed, 1);
    void *hp = NULL;
    RES(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, u), CUDA_SUCCESS);
    TRUE(hp == (void *)hu, "HOST_POINTER of managed memory %p", hp);
    CUstream s;
    MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    RES(cuStreamAttachMemAsync(s, u, 0, CU_MEM_ATTACH_SINGLE), CUDA_SUCCESS);
    RES(cuMemAdvise(u, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, dev), CUDA_SUCCESS);
    RES(cuMemPrefetchAsync(u, 4096, dev, s), CUDA_SUCCESS);
    RES(cuMemPrefetchAsync(u, 8192, dev, s), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr plain;
    MUST(cuMemAlloc(&plain, 64));
    RES(cuMemAdvise(plain, 64, CU_MEM_ADVISE_SET_READ_MOSTLY, dev), CUDA_ERROR_INVALID_VALUE);
    MUST(cuMemFree(plain));
    RES(cuStreamSynchronize(s), CUDA_SUCCESS);
    MUST(cuStreamDestroy(s));
    RES(cuMemFree(u), CUDA_SUCCESS);
  }
  RES(cuMemAllocManaged(&u, 4096, 8), CUDA_ERROR_INVALID_VALUE);
  /* Mapped page-locked memory: a kernel stores straight into the host's buffer. */
  void *h = NULL;
  MUST(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr d = 0;
  RES(cuMemHostGetDevicePointer(&d, h, 0), can_map ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
  if (can_map) {
    void *args[] = {&d};
    RES(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    RES(cuCtxSynchronize(), CUDA_SUCCESS);
    VAL("a kernel's store into mapped host memory", ((unsigned *)h)[0], 7);
    RES(cuMemsetD8(d + 100, 0xab, 4), CUDA_SUCCESS);
    VAL("a synchronous memset of mapped host memory, read at once", ((unsigned char *)h)[103], 0xab);
    CUdeviceptr base = 0;
    size_t size = 0;
    RES(cuMemGetAddressRange(&base, &size, d + 10), CUDA_SUCCESS);
    TRUE(base == d && size == 4096, "address range %#llx+%zu", (unsigned long long)base, size);
  }
  RES(cuMemFreeHost(h), CUDA_SUCCESS);
  /* Registered memory, mapped too. */
  static unsigned reg[1024] __attribute__((aligned(4096)));
  RES(cuMemHostRegister(reg, sizeof reg, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  RES(cuMemHostGetDevicePointer(&d, reg, 0), can_map ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
  if (can_map) {
    void *args[] = {&d};
    RES(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
    RES(cuCtxSynchronize(), CUDA_SUCCESS);
    VAL("a kernel's store into registered host memory", reg[0], 7);
    RES(cuMemsetD8(d + 64, 0x3c, 8), CUDA_SUCCESS);
    VAL("a synchronous memset of registered memory, read at once", ((unsigned char *)reg)[71], 0x3c);
  }
  RES(cuMemHostUnregister(reg), CUDA_SUCCESS);
  MUST(cuModuleUnload(m));
}

/* Libraries and kernels (CUDA 12), cuLaunchKernelEx, the default memory pool,
 * cuStreamIsCapturing: what cuda.core and numba-cuda use. */
static void g_library(void) {
  SETUP();
  CUlibrary lib;
  RES(cuLibraryLoadData(&lib, GLOBALS_PTX, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
  CUkernel kern;
  RES(cuLibraryGetKernel(&kern, lib, "read_counter"), CUDA_SUCCESS);
  RES(cuLibraryGetKernel(&kern, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  RES(cuLibraryGetKernel(&kern, lib, "read_counter"), CUDA_SUCCESS);
  CUfunction f;
  RES(cuKernelGetFunction(&f, kern), CUDA_SUCCESS);
  CUmodule m;
  RES(cuLibraryGetModule(&m, lib), CUDA_SUCCESS);
  CUfunction g;
  RES(cuModuleGetFunction(&g, m, "read_counter"), CUDA_SUCCESS);
  int threads = 0;
  RES(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kern, dev), CUDA_SUCCESS);
  TRUE(threads >= 1 && threads <= 1024, "max threads per block %d", threads);
  RES(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, kern, dev), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  size_t n = 0;
  RES(cuLibraryGetGlobal(&p, &n, lib, "counter"), CUDA_SUCCESS);
  VAL("size of the library's counter", n, 4);
  unsigned eleven = 11, got = 0;
  CUdeviceptr out;
  MUST(cuMemAlloc(&out, 4));
  if (p) MUST(cuMemcpyHtoD(p, &eleven, 4));
  /* cuLaunchKernelEx, with hints and a cluster of one; the kernel as a CUkernel. */
  CUlaunchAttribute attrs[2];
  memset(attrs, 0, sizeof attrs);
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attrs[0].value.priority = 0;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[1].value.clusterDim.x = attrs[1].value.clusterDim.y = attrs[1].value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = 2;
  void *args[] = {&out};
  RES(cuLaunchKernelEx(&cfg, (CUfunction)kern, args, NULL), CUDA_SUCCESS);
  RES(cuMemcpyDtoH(&got, out, 4), CUDA_SUCCESS);
  VAL("the library kernel's read of counter", got, 11);
  /* Cooperative, a grid of one block: it fits the device, and runs. */
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[0].value.cooperative = 1;
  RES(cuMemsetD32(out, 0, 1), CUDA_SUCCESS);
  RES(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_SUCCESS);
  RES(cuMemcpyDtoH(&got, out, 4), CUDA_SUCCESS);
  VAL("the cooperative launch's read of counter", got, 11);
  RES(cuLaunchKernelEx(NULL, f, args, NULL), CUDA_ERROR_INVALID_VALUE);
  /* The default pool, which cuMemAllocAsync draws from. */
  CUmemoryPool pool, current;
  RES(cuDeviceGetDefaultMemPool(&pool, dev), CUDA_SUCCESS);
  RES(cuDeviceGetMemPool(&current, dev), CUDA_SUCCESS);
  TRUE(pool == current, "the current pool %p is the default %p", (void *)current, (void *)pool);
  cuuint64_t threshold = 1;
  RES(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  VAL("release threshold", threshold, 0);
  threshold = 1 << 20;
  RES(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), CUDA_SUCCESS);
  CUmemLocation here = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemAccess_flags access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  RES(cuMemPoolGetAccess(&access, pool, &here), CUDA_SUCCESS);
  VAL("the device's access to its pool", access, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUstream s;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr q = 0;
  RES(cuMemAllocFromPoolAsync(&q, 256, pool, s), CUDA_SUCCESS);
  RES(cuMemsetD8Async(q, 0x5a, 256, s), CUDA_SUCCESS);
  unsigned char b[256] = {0};
  RES(cuMemcpyDtoHAsync(b, q, sizeof b, s), CUDA_SUCCESS);
  RES(cuMemFreeAsync(q, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  VAL("a byte of the pool's allocation", b[255], 0x5a);
  RES(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  RES(cuMemAllocFromPoolAsync(&q, 256, (CUmemoryPool)(size_t)0x1234, s), CUDA_ERROR_INVALID_VALUE);
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  RES(cuStreamIsCapturing(s, &cs), CUDA_SUCCESS);
  VAL("capture status", cs, CU_STREAM_CAPTURE_STATUS_NONE);
  RES(cuStreamDestroy(s), CUDA_SUCCESS);
  MUST(cuMemFree(out));
  RES(cuLibraryUnload(lib), CUDA_SUCCESS);
  RES(cuLibraryGetKernel(&kern, lib, "read_counter"), CUDA_ERROR_INVALID_HANDLE);
}

/* The occupancy calculator: its answers agree with the device's limits and each other. */
static size_t shared_for(int block) { return (size_t)block * 16; }
static void g_occupancy(void) {
  SETUP();
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "with_shared"));
  int per_sm = 0, max_blocks = 0, sms = 0, optin = 0;
  MUST(cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev));
  MUST(cuDeviceGetAttribute(&max_blocks, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev));
  MUST(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  MUST(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  int n = -1;
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, 0), CUDA_SUCCESS);
  TRUE(n > 0 && n * 128 <= per_sm && n <= max_blocks, "%d blocks of 128 threads per SM", n);
  int flagged = -1;
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&flagged, f, 128, 0, 0), CUDA_SUCCESS);
  VAL("the same with flags 0", flagged, n);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, (size_t)optin + 1), CUDA_SUCCESS);
  VAL("blocks with more shared memory than a block may have", n, 0);
  int grid = 0, block = 0;
  RES(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0), CUDA_SUCCESS);
  TRUE(block >= 32 && block <= 1024 && block % 32 == 0, "potential block size %d", block);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, 0), CUDA_SUCCESS);
  VAL("the potential grid: resident blocks on every SM", grid, n * sms);
  RES(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 96), CUDA_SUCCESS);
  TRUE(block > 0 && block <= 96, "potential block size under a limit of 96: %d", block);
  RES(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, shared_for, 0, 0, 0), CUDA_SUCCESS);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, shared_for(block)), CUDA_SUCCESS);
  VAL("the potential grid with a shared-memory callback", grid, n * sms);
  size_t avail = 0;
  RES(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 2, 128), CUDA_SUCCESS);
  TRUE(avail > 0, "dynamic shared memory for 2 blocks of 128: %zu", avail);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, 128, avail), CUDA_SUCCESS);
  TRUE(n >= 2, "with that much, %d blocks stay resident", n);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, NULL, 128, 0), CUDA_ERROR_INVALID_HANDLE);
  RES(cuModuleUnload(m), CUDA_SUCCESS);
}

/* cuCtxGetLimit/cuCtxSetLimit: a fresh context's values, what was set read back. */
static void g_limits(void) {
  SETUP();
  size_t v = 0;
  RES(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE), CUDA_SUCCESS);
  VAL("printf FIFO size", v, 1 << 20);
  RES(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  VAL("malloc heap size", v, 8 << 20);
  RES(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  VAL("stack size", v, 1024);
  RES(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS);
  RES(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  VAL("stack size after setting 4096", v, 4096);
  RES(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 256), CUDA_ERROR_INVALID_VALUE);
  RES(cuCtxGetLimit(&v, (CUlimit)0x7f), CUDA_ERROR_UNSUPPORTED_LIMIT);
  RES(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
}

/* Pitched allocations, 2-D and 3-D copies between host, device and unified pointers,
 * cuMemcpy on unified addresses, 2-D memsets (sync, on a stream, captured). */
static void g_copies_2d(void) {
  SETUP();
  enum { W = 100, H = 7 }; /* a row of 100 bytes; 7 rows */
  CUdeviceptr d = 0;
  size_t pitch = 0;
  RES(cuMemAllocPitch(&d, &pitch, W, H, 4), CUDA_SUCCESS);
  TRUE(pitch >= W && pitch % 512 == 0, "pitch %zu for a 100-byte row", pitch);
  RES(cuMemAllocPitch(&d, &pitch, W, H, 3), CUDA_ERROR_INVALID_VALUE);
  unsigned char host[H][W], back[H][W];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) host[y][x] = (unsigned char)(y * 31 + x);
  /* The whole pitched rows out of a host array of 100-byte rows. */
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = host;
  c.srcPitch = W;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = d;
  c.dstPitch = pitch;
  c.WidthInBytes = W;
  c.Height = H;
  RES(cuMemcpy2D(&c), CUDA_SUCCESS);
  /* The padding between rows is untouched: row 1 starts `pitch` bytes in. */
  unsigned char row1[W];
  RES(cuMemcpyDtoH(row1, d + pitch, W), CUDA_SUCCESS);
  TRUE(memcmp(row1, host[1], W) == 0, "row 1 at offset %zu", pitch);
  /* Back, as a sub-rectangle: rows 2..5, bytes 10..50, into a zeroed host array. */
  memset(back, 0, sizeof back);
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = d;
  c.srcPitch = pitch;
  c.srcXInBytes = 10;
  c.srcY = 2;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = back;
  c.dstPitch = W;
  c.dstXInBytes = 10;
  c.dstY = 2;
  c.WidthInBytes = 40;
  c.Height = 4;
  RES(cuMemcpy2D(&c), CUDA_SUCCESS);
  int wrong = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int inside = y >= 2 && y < 6 && x >= 10 && x < 50;
      wrong += back[y][x] != (inside ? host[y][x] : 0);
    }
  VAL("bytes wrong after a 40x4 sub-rectangle copied back", wrong, 0);
  /* A pitch smaller than the width is refused. */
  c.srcPitch = 8;
  RES(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
  /* Device to device on a stream, and a 2-D memset of 32-bit words on it. */
  CUstream s;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d2 = 0;
  size_t pitch2 = 0;
  MUST(cuMemAllocPitch(&d2, &pitch2, W, H, 4));
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = d;
  c.srcPitch = pitch;
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.dstDevice = d2;
  c.dstPitch = pitch2;
  c.WidthInBytes = W;
  c.Height = H;
  RES(cuMemcpy2DAsync(&c, s), CUDA_SUCCESS);
  RES(cuMemsetD2D32Async(d2 + 4 * 4, pitch2, 0xdeadbeef, 3, H, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  unsigned char got[W];
  wrong = 0;
  for (int y = 0; y < H; y++) {
    RES(cuMemcpyDtoH(got, d2 + (size_t)y * pitch2, W), CUDA_SUCCESS);
    for (int x = 0; x < W; x++) {
      unsigned char want = host[y][x];
      if (x >= 16 && x < 28) want = ((const unsigned char *)"\xef\xbe\xad\xde")[x % 4];
      wrong += got[x] != want;
    }
  }
  VAL("bytes wrong after a D2D pitched copy and a 3x7 memset of words", wrong, 0);
  RES(cuMemsetD2D8(d2, pitch2, 7, W, H), CUDA_SUCCESS);
  RES(cuMemcpyDtoH(got, d2 + 6 * pitch2, W), CUDA_SUCCESS);
  VAL("a byte of the last row after cuMemsetD2D8", got[W - 1], 7);
  RES(cuMemsetD2D16(d2 + 1, pitch2, 1, 2, 2), CUDA_ERROR_INVALID_VALUE);
  /* 3-D: a 4x3x2 box of bytes between two host-side layouts through the device. */
  unsigned char vol[2][3][4], vol2[2][3][4];
  for (int i = 0; i < 24; i++) ((unsigned char *)vol)[i] = (unsigned char)(200 + i);
  memset(vol2, 0, sizeof vol2);
  CUdeviceptr dv = 0;
  MUST(cuMemAlloc(&dv, 64 * 3 * 2));
  CUDA_MEMCPY3D c3;
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_HOST;
  c3.srcHost = vol;
  c3.srcPitch = 4;
  c3.srcHeight = 3;
  c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.dstDevice = dv;
  c3.dstPitch = 64;
  c3.dstHeight = 3;
  c3.WidthInBytes = 4;
  c3.Height = 3;
  c3.Depth = 2;
  RES(cuMemcpy3D(&c3), CUDA_SUCCESS);
  unsigned char z1y2[4];
  RES(cuMemcpyDtoH(z1y2, dv + 64 * (1 * 3 + 2), 4), CUDA_SUCCESS);
  VAL("3-D: the first byte of slice 1, row 2, on the device", z1y2[0], vol[1][2][0]);
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = dv;
  c3.srcPitch = 64;
  c3.srcHeight = 3;
  c3.dstMemoryType = CU_MEMORYTYPE_HOST;
  c3.dstHost = vol2;
  c3.dstPitch = 4;
  c3.dstHeight = 3;
  c3.WidthInBytes = 4;
  c3.Height = 3;
  c3.Depth = 2;
  RES(cuMemcpy3DAsync(&c3, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  TRUE(memcmp(vol, vol2, sizeof vol) == 0, "3-D round trip of 24 bytes: vol2[1][2][3] = %d", vol2[1][2][3]);
  c3.srcMemoryType = CU_MEMORYTYPE_ARRAY; /* with no array */
  RES(cuMemcpy3D(&c3), CUDA_ERROR_INVALID_VALUE);
  /* cuMemcpy on unified addresses: host to device, device to device, device to host. */
  unsigned words[16], words2[16];
  for (int i = 0; i < 16; i++) words[i] = 0x1000u + (unsigned)i;
  memset(words2, 0, sizeof words2);
  CUdeviceptr u1 = 0, u2 = 0;
  MUST(cuMemAlloc(&u1, sizeof words));
  MUST(cuMemAlloc(&u2, sizeof words));
  RES(cuMemcpy(u1, (CUdeviceptr)(size_t)words, sizeof words), CUDA_SUCCESS);
  RES(cuMemcpyAsync(u2, u1, sizeof words, s), CUDA_SUCCESS);
  RES(cuMemcpyAsync((CUdeviceptr)(size_t)words2, u2, sizeof words, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  TRUE(memcmp(words, words2, sizeof words) == 0, "words2[15] = %#x", words2[15]);
  /* A captured 2-D copy replays in its graph. */
  memset(back, 0, sizeof back);
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = d;
  c.srcPitch = pitch;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = back;
  c.dstPitch = W;
  c.WidthInBytes = W;
  c.Height = H;
  CUgraph g;
  CUgraphExec ge;
  MUST(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  RES(cuMemcpy2DAsync(&c, s), CUDA_SUCCESS);
  MUST(cuStreamEndCapture(s, &g));
  VAL("nothing copied while capturing", back[6][99], 0);
  size_t nodes = 0;
  RES(cuGraphGetNodes(g, NULL, &nodes), CUDA_SUCCESS);
  VAL("nodes of the captured 2-D copy (one, as the driver captures one call)", nodes, 1);
  MUST(cuGraphInstantiate(&ge, g, 0));
  RES(cuGraphLaunch(ge, s), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s), CUDA_SUCCESS);
  TRUE(memcmp(back, host, sizeof host) == 0, "after the graph: back[6][99] = %d", back[6][99]);
  cuGraphExecDestroy(ge);
  cuGraphDestroy(g);
  RES(cuMemcpy2D(NULL), CUDA_ERROR_INVALID_VALUE);
  cuMemFree(d);
  cuMemFree(d2);
  cuMemFree(dv);
  cuMemFree(u1);
  cuMemFree(u2);
  cuStreamDestroy(s);
}

/* CUDA arrays (made, described, copied into and out of, destroyed), texture and
 * surface objects over them (made, described, refused for bad descriptors). Kernels
 * sampling them: the nvcc program tests/cu/textures.cu. */
static void g_arrays(void) {
  SETUP();
  int maxw = 0;
  RES(cuDeviceGetAttribute(&maxw, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, dev), CUDA_SUCCESS);
  VAL("MAXIMUM_TEXTURE2D_WIDTH", maxw, 131072);
  CUDA_ARRAY_DESCRIPTOR ad = {64, 32, CU_AD_FORMAT_FLOAT, 1};
  CUarray a;
  MUST(cuArrayCreate(&a, &ad));
  CUDA_ARRAY_DESCRIPTOR back;
  memset(&back, 0, sizeof back);
  RES(cuArrayGetDescriptor(&back, a), CUDA_SUCCESS);
  TRUE(back.Width == 64 && back.Height == 32 && back.Format == CU_AD_FORMAT_FLOAT && back.NumChannels == 1,
       "%zux%zu format %#x x%u", back.Width, back.Height, (unsigned)back.Format, back.NumChannels);
  CUDA_ARRAY_DESCRIPTOR bad = {64, 32, (CUarray_format)0x77, 1};
  CUarray b;
  RES(cuArrayCreate(&b, &bad), CUDA_ERROR_INVALID_VALUE);
  bad.Format = CU_AD_FORMAT_FLOAT;
  bad.NumChannels = 3;
  RES(cuArrayCreate(&b, &bad), CUDA_ERROR_INVALID_VALUE);
  /* A host image of 64x32 floats into the array, a 10x4 window back from (5, 7). */
  static float img[32][64], win[4][10];
  for (int y = 0; y < 32; y++)
    for (int x = 0; x < 64; x++) img[y][x] = (float)(y * 100 + x);
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = img;
  c.srcPitch = sizeof img[0];
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = a;
  c.WidthInBytes = sizeof img[0];
  c.Height = 32;
  RES(cuMemcpy2D(&c), CUDA_SUCCESS);
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = a;
  c.srcXInBytes = 5 * sizeof(float);
  c.srcY = 7;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = win;
  c.dstPitch = sizeof win[0];
  c.WidthInBytes = sizeof win[0];
  c.Height = 4;
  RES(cuMemcpy2D(&c), CUDA_SUCCESS);
  int wrong = 0;
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 10; x++) wrong += win[y][x] != img[y + 7][x + 5];
  VAL("floats wrong in a 10x4 window read back from (5, 7)", wrong, 0);
  float one = 0;
  RES(cuMemcpyAtoH(&one, a, (size_t)(2 * 64 + 3) * sizeof(float), sizeof one), CUDA_SUCCESS);
  VAL("cuMemcpyAtoH of texel (3, 2) * 1", (int)one, 203);
  RES(cuMemcpyAtoH(&one, a, 64 * 32 * sizeof(float), sizeof one), CUDA_ERROR_INVALID_VALUE);

  /* A texture object over it. */
  CUDA_RESOURCE_DESC rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = a;
  CUDA_TEXTURE_DESC td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_WRAP;
  td.filterMode = CU_TR_FILTER_MODE_LINEAR;
  td.flags = CU_TRSF_NORMALIZED_COORDINATES;
  CUtexObject t = 0;
  /* vmgpu's simulator reads texture objects itself (its private attribute says so); a
   * GPU behind vmgpu's service does not take them yet, NVIDIA's driver does. */
  int sim_textures = 0;
  if (cuDeviceGetAttribute(&sim_textures, (CUdevice_attribute)0x766d0001, dev) != CUDA_SUCCESS) sim_textures = 0;
  CUresult tr = cuTexObjectCreate(&t, &rd, &td, NULL);
  if (!sim_textures && tr == CUDA_ERROR_NOT_SUPPORTED) {
    printf("     arrays: texture objects are not supported on this backend; their checks skipped\n");
    RES(cuArrayDestroy(a), CUDA_SUCCESS);
    return;
  }
  RES(tr, CUDA_SUCCESS);
  TRUE(t != 0, "texture object %#llx", (unsigned long long)t);
  CUDA_RESOURCE_DESC rd2;
  memset(&rd2, 0, sizeof rd2);
  RES(cuTexObjectGetResourceDesc(&rd2, t), CUDA_SUCCESS);
  TRUE(rd2.resType == CU_RESOURCE_TYPE_ARRAY && rd2.res.array.hArray == a, "resource type %d", (int)rd2.resType);
  CUDA_TEXTURE_DESC td2;
  memset(&td2, 0, sizeof td2);
  RES(cuTexObjectGetTextureDesc(&td2, t), CUDA_SUCCESS);
  TRUE(td2.filterMode == CU_TR_FILTER_MODE_LINEAR && td2.flags == CU_TRSF_NORMALIZED_COORDINATES, "filter %d flags %u",
       (int)td2.filterMode, td2.flags);
  RES(cuTexObjectDestroy(t), CUDA_SUCCESS);
  RES(cuTexObjectDestroy(t), CUDA_ERROR_INVALID_VALUE);
  /* Linear filtering of integers read as integers is refused. */
  CUDA_ARRAY_DESCRIPTOR u8d = {16, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4};
  CUarray u8a;
  MUST(cuArrayCreate(&u8a, &u8d));
  rd.res.array.hArray = u8a;
  td.flags = CU_TRSF_READ_AS_INTEGER;
  RES(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);
  td.filterMode = CU_TR_FILTER_MODE_POINT;
  RES(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  RES(cuTexObjectDestroy(t), CUDA_SUCCESS);
  /* Linear memory and pitched memory. */
  CUdeviceptr lin;
  MUST(cuMemAlloc(&lin, 4096));
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_LINEAR;
  rd.res.linear.devPtr = lin;
  rd.res.linear.format = CU_AD_FORMAT_FLOAT;
  rd.res.linear.numChannels = 1;
  rd.res.linear.sizeInBytes = 4096;
  td.flags = 0;
  RES(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  RES(cuTexObjectDestroy(t), CUDA_SUCCESS);
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_PITCH2D;
  rd.res.pitch2D.devPtr = lin;
  rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
  rd.res.pitch2D.numChannels = 1;
  rd.res.pitch2D.width = 32;
  rd.res.pitch2D.height = 8;
  rd.res.pitch2D.pitchInBytes = 64; /* narrower than a row of 32 floats */
  RES(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_ERROR_INVALID_VALUE);
  rd.res.pitch2D.pitchInBytes = 128;
  RES(cuTexObjectCreate(&t, &rd, &td, NULL), CUDA_SUCCESS);
  RES(cuTexObjectDestroy(t), CUDA_SUCCESS);
  /* Surfaces need an array made for them. */
  memset(&rd, 0, sizeof rd);
  rd.resType = CU_RESOURCE_TYPE_ARRAY;
  rd.res.array.hArray = a;
  CUsurfObject sf = 0;
  RES(cuSurfObjectCreate(&sf, &rd), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY3D_DESCRIPTOR sd = {32, 8, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1, CUDA_ARRAY3D_SURFACE_LDST};
  CUarray sa;
  MUST(cuArray3DCreate(&sa, &sd));
  rd.res.array.hArray = sa;
  RES(cuSurfObjectCreate(&sf, &rd), CUDA_SUCCESS);
  RES(cuTexObjectDestroy(sf), CUDA_ERROR_INVALID_VALUE);
  RES(cuSurfObjectDestroy(sf), CUDA_SUCCESS);
  CUDA_ARRAY3D_DESCRIPTOR l3 = {16, 16, 5, CU_AD_FORMAT_HALF, 2, CUDA_ARRAY3D_LAYERED};
  CUarray la;
  RES(cuArray3DCreate(&la, &l3), CUDA_SUCCESS);
  CUDA_ARRAY3D_DESCRIPTOR l3b;
  memset(&l3b, 0, sizeof l3b);
  RES(cuArray3DGetDescriptor(&l3b, la), CUDA_SUCCESS);
  TRUE(l3b.Depth == 5 && l3b.Flags == CUDA_ARRAY3D_LAYERED && l3b.NumChannels == 2, "depth %zu flags %u", l3b.Depth, l3b.Flags);
  RES(cuArrayDestroy(la), CUDA_SUCCESS);
  RES(cuArrayDestroy(sa), CUDA_SUCCESS);
  RES(cuArrayDestroy(u8a), CUDA_SUCCESS);
  RES(cuArrayDestroy(a), CUDA_SUCCESS);
  RES(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  cuMemFree(lin);
}

/* Graph memory nodes: an allocation node's memory written by a kernel node and copied
 * out, freed by a free node; their types and parameters; graph memory attributes; a
 * free node of memory no graph allocated. */
static void g_graph_memory(void) {
  SETUP();
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "read_counter"));
  CUgraph g;
  RES(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.poolProps.location.id = dev;
  ap.bytesize = 64;
  CUgraphNode alloc, kern, copy, fr;
  RES(cuGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap), CUDA_SUCCESS);
  TRUE(ap.dptr != 0, "the allocation's address %llx", (unsigned long long)ap.dptr);
  CUDA_KERNEL_NODE_PARAMS kp = {0};
  void *args[] = {&ap.dptr};
  kp.func = f;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  RES(cuGraphAddKernelNode(&kern, g, &alloc, 1, &kp), CUDA_SUCCESS);
  unsigned host = 0;
  CUDA_MEMCPY3D cp = {0};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = ap.dptr;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = &host;
  cp.WidthInBytes = 4;
  cp.Height = 1;
  cp.Depth = 1;
  RES(cuGraphAddMemcpyNode(&copy, g, &kern, 1, &cp, primary), CUDA_SUCCESS);
  RES(cuGraphAddMemFreeNode(&fr, g, &copy, 1, ap.dptr), CUDA_SUCCESS);
  CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
  RES(cuGraphNodeGetType(alloc, &t), CUDA_SUCCESS);
  VAL("allocation node type", t, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  RES(cuGraphNodeGetType(fr, &t), CUDA_SUCCESS);
  VAL("free node type", t, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUDA_MEM_ALLOC_NODE_PARAMS got;
  memset(&got, 0, sizeof got);
  RES(cuGraphMemAllocNodeGetParams(alloc, &got), CUDA_SUCCESS);
  VAL("allocation node bytes", got.bytesize, 64);
  TRUE(got.dptr == ap.dptr, "allocation node address %llx", (unsigned long long)got.dptr);
  CUdeviceptr fp = 0;
  RES(cuGraphMemFreeNodeGetParams(fr, &fp), CUDA_SUCCESS);
  TRUE(fp == ap.dptr, "free node address %llx", (unsigned long long)fp);
  CUgraphExec x;
  RES(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  for (int k = 0; k < 2; k++) {
    host = 0;
    RES(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
    RES(cuCtxSynchronize(), CUDA_SUCCESS);
    VAL("the kernel's value, through the graph's allocation", host, 7);
  }
  RES(cuGraphExecDestroy(x), CUDA_SUCCESS);
  RES(cuGraphDestroy(g), CUDA_SUCCESS);
  RES(cuDeviceGraphMemTrim(dev), CUDA_SUCCESS);
  cuuint64_t used = 1;
  RES(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used), CUDA_SUCCESS);
  VAL("graph memory in use after the graph went", used, 0);
  CUdeviceptr plain;
  MUST(cuMemAlloc(&plain, 16));
  RES(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  RES(cuGraphAddMemFreeNode(&fr, g, NULL, 0, plain), CUDA_ERROR_INVALID_VALUE);
  RES(cuGraphDestroy(g), CUDA_SUCCESS);
  MUST(cuMemFree(plain));
}

/* Cooperative launches: the attribute, a cooperative grid, the same through
 * cuLaunchKernelEx's attribute, and a grid larger than the device holds at once. */
static void g_cooperative(void) {
  SETUP();
  int coop = 0, sms = 0, per_sm = 0;
  RES(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev), CUDA_SUCCESS);
  VAL("cooperative launch attribute", coop, 1);
  CUmodule m;
  MUST(cuModuleLoadData(&m, GLOBALS_PTX));
  CUfunction f;
  MUST(cuModuleGetFunction(&f, m, "read_counter"));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 4));
  MUST(cuMemsetD32(p, 0, 1));
  void *args[] = {&p};
  RES(cuLaunchCooperativeKernel(f, 4, 1, 1, 32, 1, 1, 0, NULL, args), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  unsigned v = 0;
  MUST(cuMemcpyDtoH(&v, p, 4));
  VAL("a cooperative grid's result", v, 7);
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = 2;
  lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = 32;
  lc.blockDimY = lc.blockDimZ = 1;
  lc.attrs = &attr;
  lc.numAttrs = 1;
  MUST(cuMemsetD32(p, 0, 1));
  RES(cuLaunchKernelEx(&lc, f, args, NULL), CUDA_SUCCESS);
  RES(cuCtxSynchronize(), CUDA_SUCCESS);
  MUST(cuMemcpyDtoH(&v, p, 4));
  VAL("cuLaunchKernelEx, cooperative: the result", v, 7);
  RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 32, 0), CUDA_SUCCESS);
  RES(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), CUDA_SUCCESS);
  RES(cuLaunchCooperativeKernel(f, (unsigned)(per_sm * sms + 1), 1, 1, 32, 1, 1, 0, NULL, args),
      CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  MUST(cuMemFree(p));
}

/* Child graph and event nodes: a child graph of two memsets run from a parent graph
 * (the node keeps its own copy), an event record node after it, a second graph whose
 * event wait node orders a copy after it on another stream; the nodes' events read and
 * changed; cuGraphAddNode making the same kinds. */
static void g_graph_child_event(void) {
  SETUP();
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 64));
  MUST(cuMemsetD32(p, 0, 16));
  CUgraph child, parent, waiter;
  RES(cuGraphCreate(&child, 0), CUDA_SUCCESS);
  RES(cuGraphCreate(&parent, 0), CUDA_SUCCESS);
  RES(cuGraphCreate(&waiter, 0), CUDA_SUCCESS);
  CUgraphNode a, b, childn, rec, wait, copyn, other;
  CUDA_MEMSET_NODE_PARAMS ms = {0};
  ms.dst = p;
  ms.value = 7;
  ms.elementSize = 4;
  ms.width = 8;
  ms.height = 1;
  RES(cuGraphAddMemsetNode(&a, child, NULL, 0, &ms, primary), CUDA_SUCCESS);
  ms.value = 9;
  ms.width = 4; /* words 0..3 again, after the first */
  RES(cuGraphAddMemsetNode(&b, child, &a, 1, &ms, primary), CUDA_SUCCESS);
  RES(cuGraphAddChildGraphNode(&childn, parent, NULL, 0, child), CUDA_SUCCESS);
  RES(cuGraphDestroy(child), CUDA_SUCCESS); /* the node has its own copy */
  CUgraph inside;
  size_t count = 0;
  RES(cuGraphChildGraphNodeGetGraph(childn, &inside), CUDA_SUCCESS);
  RES(cuGraphGetNodes(inside, NULL, &count), CUDA_SUCCESS);
  VAL("nodes of the child node's graph", count, 2);
  CUevent ev, ev2, got;
  MUST(cuEventCreate(&ev, CU_EVENT_DEFAULT));
  MUST(cuEventCreate(&ev2, CU_EVENT_DEFAULT));
  RES(cuGraphAddEventRecordNode(&rec, parent, &childn, 1, ev2), CUDA_SUCCESS);
  RES(cuGraphEventRecordNodeSetEvent(rec, ev), CUDA_SUCCESS);
  RES(cuGraphEventRecordNodeGetEvent(rec, &got), CUDA_SUCCESS);
  TRUE(got == ev, "the record node's event after setting it (%p, want %p)", (void *)got, (void *)ev);
  RES(cuGraphEventWaitNodeGetEvent(rec, &got), CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeType t;
  RES(cuGraphNodeGetType(childn, &t), CUDA_SUCCESS);
  VAL("child graph node type", t, CU_GRAPH_NODE_TYPE_GRAPH);
  RES(cuGraphNodeGetType(rec, &t), CUDA_SUCCESS);
  VAL("event record node type", t, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  np.eventWait.event = ev;
  RES(cuGraphAddNode(&wait, waiter, NULL, 0, &np), CUDA_SUCCESS);
  RES(cuGraphNodeGetType(wait, &t), CUDA_SUCCESS);
  VAL("event wait node type (cuGraphAddNode)", t, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  unsigned host[8] = {0};
  CUDA_MEMCPY3D cp = {0};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = p;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = host;
  cp.WidthInBytes = sizeof host;
  cp.Height = 1;
  cp.Depth = 1;
  RES(cuGraphAddMemcpyNode(&copyn, waiter, &wait, 1, &cp, primary), CUDA_SUCCESS);
  CUgraph scratch;
  RES(cuGraphCreate(&scratch, 0), CUDA_SUCCESS);
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_GRAPH;
  np.graph.graph = inside;
  RES(cuGraphAddNode(&other, scratch, NULL, 0, &np), CUDA_SUCCESS);
  RES(cuGraphNodeGetType(other, &t), CUDA_SUCCESS);
  VAL("child graph node type (cuGraphAddNode)", t, CU_GRAPH_NODE_TYPE_GRAPH);
  RES(cuGraphDestroy(scratch), CUDA_SUCCESS);
  CUgraphExec xp, xw;
  RES(cuGraphInstantiate(&xp, parent, 0), CUDA_SUCCESS);
  RES(cuGraphInstantiate(&xw, waiter, 0), CUDA_SUCCESS);
  CUstream s1, s2;
  MUST(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  MUST(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  RES(cuGraphLaunch(xp, s1), CUDA_SUCCESS);
  RES(cuGraphLaunch(xw, s2), CUDA_SUCCESS);
  RES(cuStreamSynchronize(s2), CUDA_SUCCESS);
  RES(cuEventQuery(ev), CUDA_SUCCESS);
  TRUE(host[0] == 9 && host[3] == 9 && host[4] == 7 && host[7] == 7,
       "the waiting graph's copy saw both memsets: %u %u %u %u", host[0], host[3], host[4], host[7]);
  RES(cuGraphExecDestroy(xp), CUDA_SUCCESS);
  RES(cuGraphExecDestroy(xw), CUDA_SUCCESS);
  RES(cuGraphDestroy(parent), CUDA_SUCCESS);
  RES(cuGraphDestroy(waiter), CUDA_SUCCESS);
  MUST(cuStreamDestroy(s1));
  MUST(cuStreamDestroy(s2));
  MUST(cuEventDestroy(ev));
  MUST(cuEventDestroy(ev2));
  MUST(cuMemFree(p));
}

/* Stream attributes: an access policy window set, read back and copied to another
 * stream; a window larger than the device's largest, a bad hit ratio and an unknown
 * attribute refused; the persisting L2 lines reset. */
static void g_stream_attributes(void) {
  SETUP();
  int persisting = 0, window = 0;
  RES(cuDeviceGetAttribute(&persisting, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev), CUDA_SUCCESS);
  RES(cuDeviceGetAttribute(&window, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, dev), CUDA_SUCCESS);
  TRUE(persisting > 0 && window > 0, "persisting L2 %d bytes, largest window %d", persisting, window);
  CUstream s, t;
  MUST(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  MUST(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  MUST(cuMemAlloc(&p, 1 << 20));
  CUstreamAttrValue v, got;
  memset(&v, 0, sizeof v);
  memset(&got, 0xee, sizeof got);
  RES(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got), CUDA_SUCCESS);
  VAL("a fresh stream's window bytes", got.accessPolicyWindow.num_bytes, 0);
  v.accessPolicyWindow.base_ptr = (void *)p;
  v.accessPolicyWindow.num_bytes = 1 << 20;
  v.accessPolicyWindow.hitRatio = 0.5f;
  v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
  v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
  RES(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v), CUDA_SUCCESS);
  RES(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got), CUDA_SUCCESS);
  VAL("the window's bytes", got.accessPolicyWindow.num_bytes, 1 << 20);
  TRUE(got.accessPolicyWindow.base_ptr == (void *)p && got.accessPolicyWindow.hitRatio == 0.5f &&
           got.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING,
       "the window read back: base %p, hit ratio %f, hit property %d", got.accessPolicyWindow.base_ptr,
       (double)got.accessPolicyWindow.hitRatio, (int)got.accessPolicyWindow.hitProp);
  RES(cuStreamCopyAttributes(t, s), CUDA_SUCCESS);
  memset(&got, 0, sizeof got);
  RES(cuStreamGetAttribute(t, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &got), CUDA_SUCCESS);
  VAL("the copied window's bytes", got.accessPolicyWindow.num_bytes, 1 << 20);
  v.accessPolicyWindow.num_bytes = (size_t)window + 1;
  RES(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v), CUDA_ERROR_INVALID_VALUE);
  v.accessPolicyWindow.num_bytes = 4096;
  v.accessPolicyWindow.hitRatio = 1.5f;
  RES(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v), CUDA_ERROR_INVALID_VALUE);
  RES(cuStreamGetAttribute(s, (CUstreamAttrID)0x7f, &got), CUDA_ERROR_INVALID_VALUE);
  RES(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (size_t)persisting), CUDA_SUCCESS);
  RES(cuCtxResetPersistingL2Cache(), CUDA_SUCCESS);
  MUST(cuMemFree(p));
  MUST(cuStreamDestroy(s));
  MUST(cuStreamDestroy(t));
}

/* ------------------------------------------------------------------------------------ */

static const struct {
  const char *name;
  void (*run)(void);
} groups[] = {
    {"errors", g_errors},           {"init", g_init},
    {"device", g_device},           {"primary", g_primary},
    {"stack", g_stack},             {"ctx_create", g_ctx_create},
    {"module_ex", g_module_ex},     {"module_file", g_module_file},
    {"globals", g_globals},         {"func_attr", g_func_attr},
    {"func_set_attr", g_func_set_attr}, {"launch_extra", g_launch_extra},
    {"per_thread", g_per_thread},   {"procaddr", g_procaddr},
    {"host_ptr", g_host_ptr},       {"pointer_attr", g_pointer_attr},
    {"mem_async", g_mem_async},     {"streams", g_streams},
    {"host_func", g_host_func},     {"library", g_library},
    {"occupancy", g_occupancy},     {"limits", g_limits},
    {"graphs", g_graphs},           {"managed", g_managed},
    {"graph_nodes", g_graph_nodes}, {"copies_2d", g_copies_2d}, {"arrays", g_arrays},
    {"graph_memory", g_graph_memory}, {"cooperative", g_cooperative},
    {"stream_attributes", g_stream_attributes}, {"graph_child_event", g_graph_child_event},
};

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s GROUP FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  fixtures = argv[2];
  int found = 0;
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    if (strcmp(argv[1], groups[i].name) == 0) {
      group = groups[i].name;
      groups[i].run();
      found = 1;
    }
  }
  if (!found) {
    fprintf(stderr, "no group %s\n", argv[1]);
    return 2;
  }
  printf("conformance %s: %d checks, %d failed\n", argv[1], checks, failures);
  return failures ? 1 : 0;
}
