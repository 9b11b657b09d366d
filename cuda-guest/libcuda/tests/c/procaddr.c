/* Every entry point through cuGetProcAddress_v2, as NVIDIA's Python bindings resolve
 * them: the library is dlopen'ed and only cuGetProcAddress_v2 is looked up by name.
 * Checks which variant each (name, version, flags) selects against the exported
 * versioned symbols, the not-found answers, and then runs vector_add through the
 * resolved pointers, with the legacy and with the per-thread default stream.
 * Usage: procaddr LIBCUDA PTX_FILE */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);  \
      exit(1);                                                             \
    }                                                                      \
  } while (0)
#define CHECK(call) EXPECT((call) == CUDA_SUCCESS)

static void *lib;
static PFN_cuGetProcAddress_v12000 gpa;

static void *resolve(const char *name, int version, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  CUresult r = gpa(name, &p, version, flags, &st);
  if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
    fprintf(stderr, "cuGetProcAddress_v2(%s, %d, %llu) = %d, status %d\n", name, version,
            (unsigned long long)flags, (int)r, (int)st);
    exit(1);
  }
  return p;
}

struct expect {
  const char *name;
  int version;
  cuuint64_t flags;
  const char *symbol;
};

static const struct expect table[] = {
    {"cuInit", 12000, 0, "cuInit"},
    {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemFree", 12000, 0, "cuMemFree_v2"},
    {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2"},
    {"cuDeviceGetUuid", 12000, 0, "cuDeviceGetUuid_v2"},
    {"cuDeviceGetUuid", 11000, 0, "cuDeviceGetUuid"},
    {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
    {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate", 12080, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate_v4", 12080, 0, "cuCtxCreate_v4"},
    {"cuCtxDestroy", 12000, 0, "cuCtxDestroy_v2"},
    {"cuCtxPushCurrent", 12000, 0, "cuCtxPushCurrent_v2"},
    {"cuCtxPopCurrent", 12000, 0, "cuCtxPopCurrent_v2"},
    {"cuDevicePrimaryCtxRelease", 12000, 0, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxRelease", 10000, 0, "cuDevicePrimaryCtxRelease"},
    {"cuDevicePrimaryCtxReset", 12000, 0, "cuDevicePrimaryCtxReset_v2"},
    {"cuStreamDestroy", 12000, 0, "cuStreamDestroy_v2"},
    {"cuEventDestroy", 12000, 0, "cuEventDestroy_v2"},
    {"cuMemHostRegister", 12000, 0, "cuMemHostRegister_v2"},
    {"cuModuleGetGlobal", 12000, 0, "cuModuleGetGlobal_v2"},
    {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoHAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyDtoHAsync_v2_ptsz"},
    {"cuMemsetD32", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD32_v2_ptds"},
    {"cuMemsetD8Async", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD8Async_ptsz"},
    {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuLaunchKernel"},
    {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
    {"cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamSynchronize_ptsz"},
    {"cuEventRecord", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuEventRecord_ptsz"},
    /* No per-thread variant: the legacy one. */
    {"cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
    {"cuGetErrorName", 12000, 0, "cuGetErrorName"},
    /* Unsupported entry points resolve (and answer CUDA_ERROR_NOT_SUPPORTED). */
    {"cuMemAllocManaged", 12000, 0, "cuMemAllocManaged"},
};

/* vector_add through the resolved pointers. */
static int run(const char *ptx_path, int per_thread) {
  FILE *f = fopen(ptx_path, "rb");
  EXPECT(f != NULL);
  static char ptx[1 << 20];
  size_t len = fread(ptx, 1, sizeof ptx - 1, f);
  fclose(f);
  ptx[len] = 0;
  cuuint64_t fl = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                             : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  PFN_cuInit_v2000 init = resolve("cuInit", 12000, fl);
  PFN_cuDeviceGet_v2000 device_get = resolve("cuDeviceGet", 12000, fl);
  PFN_cuDevicePrimaryCtxRetain_v7000 retain = resolve("cuDevicePrimaryCtxRetain", 12000, fl);
  PFN_cuDevicePrimaryCtxRelease_v11000 release = resolve("cuDevicePrimaryCtxRelease", 12000, fl);
  PFN_cuCtxSetCurrent_v4000 set_current = resolve("cuCtxSetCurrent", 12000, fl);
  PFN_cuModuleLoadData_v2000 load = resolve("cuModuleLoadData", 12000, fl);
  PFN_cuModuleGetFunction_v2000 get_function = resolve("cuModuleGetFunction", 12000, fl);
  PFN_cuModuleUnload_v2000 unload = resolve("cuModuleUnload", 12000, fl);
  PFN_cuMemAlloc_v3020 mem_alloc = resolve("cuMemAlloc", 12000, fl);
  PFN_cuMemFree_v3020 mem_free = resolve("cuMemFree", 12000, fl);
  PFN_cuMemcpyHtoD_v3020 htod = resolve("cuMemcpyHtoD", 12000, fl);
  PFN_cuMemcpyDtoHAsync_v3020 dtoh_async = resolve("cuMemcpyDtoHAsync", 12000, fl);
  PFN_cuMemsetD32_v3020 memset32 = resolve("cuMemsetD32", 12000, fl);
  PFN_cuLaunchKernel_v4000 launch = resolve("cuLaunchKernel", 12000, fl);
  PFN_cuStreamSynchronize_v2000 stream_sync = resolve("cuStreamSynchronize", 12000, fl);
  PFN_cuGetErrorName_v6000 error_name = resolve("cuGetErrorName", 12000, fl);

  CHECK(init(0));
  CUdevice dev;
  CHECK(device_get(&dev, 0));
  CUcontext ctx;
  CHECK(retain(&ctx, dev));
  CHECK(set_current(ctx));
  CUmodule mod;
  CHECK(load(&mod, ptx));
  CUfunction k;
  CHECK(get_function(&k, mod, "vector_add"));
  int n = 300;
  float a[300], c[300];
  for (int i = 0; i < n; i++) a[i] = (float)(i * 3);
  CUdeviceptr da, dc;
  CHECK(mem_alloc(&da, sizeof a));
  CHECK(mem_alloc(&dc, sizeof c));
  CHECK(htod(da, a, sizeof a));
  CHECK(memset32(dc, 0, n));
  void *args[] = {&da, &da, &dc, &n};
  /* The null stream: legacy or per-thread depending on the variant resolved. */
  CHECK(launch(k, 3, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
  CHECK(dtoh_async(c, dc, sizeof c, NULL));
  CHECK(stream_sync(NULL));
  for (int i = 0; i < n; i++) EXPECT(c[i] == 2.0f * a[i]);
  const char *name = NULL;
  CHECK(error_name(CUDA_ERROR_ILLEGAL_ADDRESS, &name));
  EXPECT(strcmp(name, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  CHECK(mem_free(da));
  CHECK(mem_free(dc));
  CHECK(unload(mod));
  CHECK(release(dev));
  return 0;
}

int main(int argc, char **argv) {
  EXPECT(argc == 3);
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  gpa = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
  EXPECT(gpa != NULL);

  int checked = 0;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    const struct expect *e = &table[i];
    void *want = dlsym(lib, e->symbol);
    void *got = resolve(e->name, e->version, e->flags);
    if (!want || got != want) {
      fprintf(stderr, "%s @%d flags %llu: got %p, expected %s = %p\n", e->name, e->version,
              (unsigned long long)e->flags, got, e->symbol, want);
      return 1;
    }
    checked++;
  }

  /* Not found: unknown symbols, and versions before a symbol existed. */
  void *p = (void *)1;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT(gpa("cuNoSuchEntryPoint", &p, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND);
  EXPECT(p == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  p = (void *)1;
  EXPECT(gpa("cuMemAlloc", &p, 2000, 0, &st) == CUDA_ERROR_NOT_FOUND);
  EXPECT(p == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT(gpa(NULL, &p, 12000, 0, &st) == CUDA_ERROR_INVALID_VALUE);
  /* The v1 entry point, found through v2. */
  PFN_cuGetProcAddress_v11030 gpa1 = resolve("cuGetProcAddress", 11030, 0);
  void *q = NULL;
  EXPECT(gpa1("cuMemAlloc", &q, 12000, 0) == CUDA_SUCCESS && q == dlsym(lib, "cuMemAlloc_v2"));
  /* An unsupported entry point answers CUDA_ERROR_NOT_SUPPORTED. */
  PFN_cuIpcGetMemHandle_v4010 ipc_handle = resolve("cuIpcGetMemHandle", 12000, 0);
  CUipcMemHandle ipc;
  EXPECT(ipc_handle(&ipc, 0) == CUDA_ERROR_NOT_SUPPORTED);

  EXPECT(run(argv[2], 0) == 0);
  EXPECT(run(argv[2], 1) == 0);
  printf("procaddr: %d variants checked, vector_add legacy and per-thread OK\n", checked);
  return 0;
}
