/*
 * A fake libcuda.so for the loader's tests (cuda-guest/tests/native_loader_fake.rs),
 * compiled at test time with `cc -shared -fPIC`. Macros choose its behaviour:
 *
 *   WITH_GPA      export cuGetProcAddress_v2, resolving every name to the functions
 *                 below or to a stub that returns CUDA_ERROR_NOT_SUPPORTED
 *   MISSING="x"   cuGetProcAddress_v2 reports symbol x as not found
 *   WITH_CORE     export cuInit and friends by name (the dlsym fallback needs them;
 *                 the generated file adds every other versioned name)
 *   INIT_RESULT   what cuInit returns (default 0)
 *   DEVICE_COUNT  what cuDeviceGetCount reports (default 1)
 *   STICKY=code   after cuDevicePrimaryCtxReset, cuDevicePrimaryCtxRetain fails with
 *                 `code`, as CUDA 13 on an H100 does after CUDA_ERROR_ILLEGAL_ADDRESS (700)
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifndef INIT_RESULT
#define INIT_RESULT 0
#endif
#ifndef DEVICE_COUNT
#define DEVICE_COUNT 1
#endif

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_NOT_FOUND 500

static int initialised = 0;
static int last_version = -1;
static unsigned long long last_flags = 0xffff;
static int lookups = 0;

int fake_last_version(void) { return last_version; }
unsigned long long fake_last_flags(void) { return last_flags; }
int fake_lookups(void) { return lookups; }

/* One primary context, reference counted. */
static char primary_ctx;
static int ctx_refs = 0;
int fake_ctx_refs(void) { return ctx_refs; }
static int resets = 0;
static int fake_cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (!ctx || dev < 0 || dev >= DEVICE_COUNT) return CUDA_ERROR_INVALID_VALUE;
#ifdef STICKY
    if (resets > 0) return STICKY;
#endif
    *ctx = &primary_ctx;
    ctx_refs++;
    return CUDA_SUCCESS;
}
static int fake_cuDevicePrimaryCtxRelease(int dev) {
    if (dev < 0 || dev >= DEVICE_COUNT) return CUDA_ERROR_INVALID_VALUE;
    if (ctx_refs <= 0) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    ctx_refs--;
    return CUDA_SUCCESS;
}
/* The references survive a reset. */
static int fake_cuDevicePrimaryCtxReset(int dev) {
    if (dev < 0 || dev >= DEVICE_COUNT) return CUDA_ERROR_INVALID_VALUE;
    resets++;
    return CUDA_SUCCESS;
}
static int fake_cuCtxSetCurrent(void *ctx) {
    return ctx == &primary_ctx && ctx_refs > 0 ? CUDA_SUCCESS : 201;
}

static int fake_stub(void) { return CUDA_ERROR_NOT_SUPPORTED; }

static int fake_cuInit(unsigned flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (INIT_RESULT == 0) initialised = 1;
    return INIT_RESULT;
}
static int fake_cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}
static int fake_cuDeviceGetCount(int *n) {
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    *n = DEVICE_COUNT;
    return CUDA_SUCCESS;
}
static int fake_cuDeviceGet(int *d, int ordinal) {
    if (!d || ordinal < 0 || ordinal >= DEVICE_COUNT) return 101;
    *d = ordinal;
    return CUDA_SUCCESS;
}
static int fake_cuDeviceGetName(char *name, int len, int dev) {
    if (!name || len <= 0 || dev < 0 || dev >= DEVICE_COUNT) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake GPU %d", dev);
    return CUDA_SUCCESS;
}
/* As nvidia-smi writes it: 8-digit domain, uppercase. */
static int fake_cuDeviceGetPCIBusId(char *id, int len, int dev) {
    if (!id || len <= 0 || dev < 0 || dev >= DEVICE_COUNT) return CUDA_ERROR_INVALID_VALUE;
    snprintf(id, (size_t)len, "00000000:%02X:00.0", 0x1b + dev);
    return CUDA_SUCCESS;
}
/* Names are left to the caller's table; descriptions come from here. */
static int fake_cuGetErrorName(int e, const char **s) {
    (void)e; (void)s;
    return CUDA_ERROR_NOT_SUPPORTED;
}
static int fake_cuGetErrorString(int e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
    case 100: *s = "fake driver: no CUDA-capable device is detected"; return CUDA_SUCCESS;
    case 801: *s = "fake driver: operation not supported"; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

#ifdef WITH_GPA
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                        int *status) {
    last_version = version;
    last_flags = flags;
    lookups++;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
#ifdef MISSING
    if (strcmp(symbol, MISSING) == 0) {
        *pfn = NULL;
        if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
        return CUDA_ERROR_NOT_FOUND;
    }
#endif
    if (strcmp(symbol, "cuInit") == 0) *pfn = (void *)fake_cuInit;
    else if (strcmp(symbol, "cuDriverGetVersion") == 0) *pfn = (void *)fake_cuDriverGetVersion;
    else if (strcmp(symbol, "cuDeviceGetCount") == 0) *pfn = (void *)fake_cuDeviceGetCount;
    else if (strcmp(symbol, "cuDeviceGet") == 0) *pfn = (void *)fake_cuDeviceGet;
    else if (strcmp(symbol, "cuDevicePrimaryCtxRetain") == 0) *pfn = (void *)fake_cuDevicePrimaryCtxRetain;
    else if (strcmp(symbol, "cuDevicePrimaryCtxRelease") == 0) *pfn = (void *)fake_cuDevicePrimaryCtxRelease;
    else if (strcmp(symbol, "cuDevicePrimaryCtxReset") == 0) *pfn = (void *)fake_cuDevicePrimaryCtxReset;
    else if (strcmp(symbol, "cuCtxSetCurrent") == 0) *pfn = (void *)fake_cuCtxSetCurrent;
    else if (strcmp(symbol, "cuDeviceGetName") == 0) *pfn = (void *)fake_cuDeviceGetName;
    else if (strcmp(symbol, "cuDeviceGetPCIBusId") == 0) *pfn = (void *)fake_cuDeviceGetPCIBusId;
    else if (strcmp(symbol, "cuGetErrorName") == 0) *pfn = (void *)fake_cuGetErrorName;
    else if (strcmp(symbol, "cuGetErrorString") == 0) *pfn = (void *)fake_cuGetErrorString;
    else *pfn = (void *)fake_stub;
    if (status) *status = 0;
    return CUDA_SUCCESS;
}
#endif

#ifdef WITH_CORE
int cuInit(unsigned flags) { return fake_cuInit(flags); }
int cuDriverGetVersion(int *v) { return fake_cuDriverGetVersion(v); }
int cuDeviceGetCount(int *n) { return fake_cuDeviceGetCount(n); }
int cuDeviceGet(int *d, int o) { return fake_cuDeviceGet(d, o); }
int cuGetErrorName(int e, const char **s) { return fake_cuGetErrorName(e, s); }
int cuGetErrorString(int e, const char **s) { return fake_cuGetErrorString(e, s); }
#endif
