/* What NVRTC does with libcuda.so.1 while it compiles: cuInit(0), then a probe of the
 * driver's private export tables (cuGetExportTable, with the table id NVRTC 12.9 asks
 * for). With an argument it goes on:
 *   devices        device, context and memory calls after the probe, each reported as
 *                  "NAME = CODE" (no exit on failure); "export_probe: devices OK" when
 *                  all succeeded;
 *   version-first  cuDriverGetVersion before cuInit, then as "devices".
 * Prints "export_probe: probe OK" after the probe. */
#include "common.h"

#include <string.h>

static int failed;

static void report(const char *name, CUresult r) {
  const char *n = NULL;
  cuGetErrorName(r, &n);
  printf("%s = %d %s\n", name, (int)r, n ? n : "?");
  if (r != CUDA_SUCCESS) failed++;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "probe";
  int version_first = strcmp(mode, "version-first") == 0;
  int devices = version_first || strcmp(mode, "devices") == 0;
  if (version_first) {
    int v = 0;
    report("cuDriverGetVersion", cuDriverGetVersion(&v));
    EXPECT(v >= 12000);
  }

  CHECK(cuInit(0));
  static const CUuuid id = {{(char)0xda, (char)0x91, (char)0x51, (char)0xd3, (char)0x3a,
                             (char)0xe6, (char)0xcc, (char)0x41, (char)0xa5, (char)0xc0,
                             (char)0x4f, (char)0x26, (char)0xd5, (char)0x33, (char)0xe3,
                             (char)0x28}};
  const void *table = (const void *)1;
  CUresult r = cuGetExportTable(&table, &id);
  EXPECT(r == CUDA_ERROR_NOT_SUPPORTED);
  EXPECT(table == NULL);
  /* Twice, as a program probing several tables would. */
  EXPECT(cuGetExportTable(&table, &id) == CUDA_ERROR_NOT_SUPPORTED);
  printf("export_probe: probe OK\n");
  if (!devices) return 0;

  int count = 0;
  report("cuDeviceGetCount", cuDeviceGetCount(&count));
  CUdevice dev = 0;
  report("cuDeviceGet", cuDeviceGet(&dev, 0));
  char name[128] = "";
  report("cuDeviceGetName", cuDeviceGetName(name, sizeof name, dev));
  CUcontext ctx = NULL;
  report("cuCtxCreate", cuCtxCreate(&ctx, 0, dev));
  CUdeviceptr p = 0;
  report("cuMemAlloc", cuMemAlloc(&p, 4096));
  report("cuMemsetD32", cuMemsetD32(p, 7, 1024));
  unsigned back = 0;
  report("cuMemcpyDtoH", cuMemcpyDtoH(&back, p + 4092, 4));
  report("cuMemFree", cuMemFree(p));
  report("cuCtxDestroy", cuCtxDestroy(ctx));
  if (failed) {
    printf("export_probe: %d calls failed\n", failed);
    return 1;
  }
  EXPECT(count == 1 && back == 7);
  printf("export_probe: devices OK (%s)\n", name);
  return 0;
}
