/* cuda-serial-guest: runs inside the QEMU guest of tests/cuda-serial/, written against the
 * stock cuda.h and linked with -lcuda (vmgpu's libcuda.so.1 in forward mode, reaching the
 * host's `vmgpu cuda serve` through a virtio-serial port). One process per MODE, so that
 * every run is a session of its own over the port's one long-lived host connection.
 *
 * Prints `PASS name (values compared)` or `FAIL name: why` per check; exit 0 iff all of
 * the mode's checks passed (except `kill`, which SIGKILLs itself).
 *
 * Usage: cuda-serial-guest MODE [ARGS]
 *   basics PTX_DIR TOTAL_MEM  device query, vector add, synchronous memsets and copies
 *   streams                   async copies on two streams ordered by events
 *   jit                       a module that does not compile: its JIT error log
 *   oob PTX_DIR               out-of-bounds kernel: CUDA_ERROR_ILLEGAL_ADDRESS, sticky, reset
 *   leak BYTES                allocates BYTES in three buffers, loads a module, makes a
 *                             stream and exits without freeing (the host releases them)
 *   kill BYTES                allocates BYTES and SIGKILLs itself (no Goodbye)
 *   after_kill [CHECK]        a round trip in a fresh session after a killed process
 *                             (reported as CHECK, default session_after_kill)
 * and, for tests/cuda-vsock (the same program over VMGPU_CUDA_SERVER=vsock:2:PORT):
 *   pair NAME OTHER BYTES     one of two processes started together: holds BYTES in its
 *                             session while the other (OTHER) holds its own, each seeing
 *                             only its own memory in use; a kernel and a round trip each
 *   killcopy BYTES            a child process copies BYTES host-to-device over and over; it
 *                             is SIGKILLed while a copy is in progress
 *   unserved                  an address nobody serves: the first call that needs the
 *                             service fails; the code and the shim's message naming it
 *   halfframe CID PORT        a raw AF_VSOCK client: handshake, then half a frame, then close
 *   localcid                  the guest's vsock CID (IOCTL_VM_SOCKETS_GET_LOCAL_CID)
 *   bench LABEL MIB           the round trip (median of 4-byte cuMemcpyDtoH and of
 *                             cuCtxSynchronize) and the bandwidth of MIB MiB copies, printed
 *                             as `BENCH LABEL ...` figures (the data is checked, not the time) */
#include <cuda.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *check = "setup";
static int failed;

static void fail_call(const char *call, CUresult r, int line) {
  const char *n = NULL;
  cuGetErrorName(r, &n);
  printf("FAIL %s: %s returned %d %s (guest.c:%d)\n", check, call, (int)r, n ? n : "?", line);
  fflush(stdout);
  failed = 1;
}

/* A driver call that must succeed; otherwise the check fails and its function returns. */
#define TRY(call)                                                                        \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fail_call(#call, r_, __LINE__);                                                    \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

/* A condition that must hold; `fmt` says what was found. */
#define WANT(cond, ...)                                                                  \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      printf("FAIL %s: want %s; ", check, #cond);                                        \
      printf(__VA_ARGS__);                                                               \
      printf(" (guest.c:%d)\n", __LINE__);                                               \
      fflush(stdout);                                                                    \
      failed = 1;                                                                        \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

static void pass(const char *what) {
  printf("PASS %s (%s)\n", check, what);
  fflush(stdout);
}

static char *read_ptx(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("FAIL %s: cannot open %s\n", check, path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    printf("FAIL %s: cannot read %s\n", check, path);
    exit(1);
  }
  buf[n] = 0;
  fclose(f);
  return buf;
}

static int basics(const char *ptx_dir, size_t want_total) {
  check = "device_query";
  TRY(cuInit(0));
  int version = 0, count = 0, major = 0, minor = 0;
  TRY(cuDriverGetVersion(&version));
  TRY(cuDeviceGetCount(&count));
  WANT(count == 1, "%d devices", count);
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  char name[256];
  TRY(cuDeviceGetName(name, sizeof name, dev));
  TRY(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  TRY(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  size_t total = 0;
  TRY(cuDeviceTotalMem(&total, dev));
  /* The service reports the guest's quota (`--memory`) as the device's memory. */
  WANT(total == want_total, "total memory %zu", total);
  WANT(version >= 12000, "driver version %d", version);
  char what[512];
  snprintf(what, sizeof what, "1 device '%s', sm_%d%d, %zu bytes = the quota, driver %d", name,
           major, minor, total, version);
  pass(what);

  check = "vector_add";
  char *ptx = read_ptx(ptx_dir, "vector_add.nvrtc.ptx");
  CUcontext ctx;
  TRY(cuCtxCreate(&ctx, 0, dev));
  CUmodule mod;
  TRY(cuModuleLoadData(&mod, ptx));
  CUfunction k;
  TRY(cuModuleGetFunction(&k, mod, "vector_add"));
  CUresult nf = cuModuleGetFunction(&k, mod, "no_such_kernel");
  WANT(nf == CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction(no_such_kernel) = %d", (int)nf);
  TRY(cuModuleGetFunction(&k, mod, "vector_add"));
  int n = 1000;
  size_t bytes = n * sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
  for (int i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i;
    c[i] = -1.0f;
  }
  CUdeviceptr da, db, dc;
  TRY(cuMemAlloc(&da, bytes));
  TRY(cuMemAlloc(&db, bytes));
  TRY(cuMemAlloc(&dc, bytes));
  size_t free_mem = 0, total_mem = 0;
  TRY(cuMemGetInfo(&free_mem, &total_mem));
  WANT(total_mem == want_total && total_mem - free_mem == 3 * bytes, "free %zu of %zu", free_mem,
       total_mem);
  TRY(cuMemcpyHtoD(da, a, bytes));
  TRY(cuMemcpyHtoD(db, b, bytes));
  TRY(cuMemsetD32(dc, 0, n));
  void *args[] = {&da, &db, &dc, &n};
  TRY(cuLaunchKernel(k, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  TRY(cuCtxSynchronize());
  TRY(cuMemcpyDtoH(c, dc, bytes));
  for (int i = 0; i < n; i++)
    WANT(c[i] == a[i] + b[i], "c[%d] = %g, a + b = %g", i, c[i], a[i] + b[i]);
  snprintf(what, sizeof what,
           "c[i] = a[i] + b[i] exactly for all %d floats, 4 blocks of 256 (c[999] = %.1f); "
           "cuMemGetInfo: %zu bytes in use",
           n, c[999], total_mem - free_mem);
  pass(what);

  check = "sync_copies_memsets";
  /* D2D, memsets of each width, a copy at an offset: every byte of dc checked. */
  TRY(cuMemcpyDtoD(da, dc, bytes));
  TRY(cuMemsetD8(dc, 0xab, 6));
  TRY(cuMemsetD16(dc + 8, 0x1234, 3));
  TRY(cuMemsetD32(dc + 16, 0xdeadbeefu, 2));
  TRY(cuMemcpyDtoD(dc + 24, da + 4 * 500, 4 * 10));
  unsigned char got[64];
  TRY(cuMemcpyDtoH(got, dc, sizeof got));
  unsigned char want[64];
  memcpy(want, c, sizeof want); /* dc held c before */
  memset(want, 0xab, 6);
  for (int i = 0; i < 3; i++) memcpy(want + 8 + 2 * i, &(unsigned short){0x1234}, 2);
  for (int i = 0; i < 2; i++) memcpy(want + 16 + 4 * i, &(unsigned){0xdeadbeefu}, 4);
  memcpy(want + 24, c + 500, 4 * 10);
  for (size_t i = 0; i < sizeof got; i++)
    WANT(got[i] == want[i], "byte %zu = %#x, expected %#x", i, got[i], want[i]);
  /* The rest of the D2D copy is untouched. */
  float tail[4];
  TRY(cuMemcpyDtoH(tail, da + bytes - sizeof tail, sizeof tail));
  WANT(tail[3] == a[999] + b[999], "da[999] = %g", tail[3]);
  pass("D2D of 4000 bytes, memset D8/D16/D32 and a D2D at an offset: 64 bytes as expected, "
       "da[999] = 1498.5");

  TRY(cuMemFree(da));
  TRY(cuMemFree(db));
  TRY(cuMemFree(dc));
  TRY(cuModuleUnload(mod));
  TRY(cuCtxDestroy(ctx));
  return 0;
}

static int streams(void) {
  check = "streams_events_async";
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
  TRY(cuCtxSetCurrent(ctx));
  const size_t n = 1 << 18; /* 1 MiB of words */
  const size_t bytes = n * sizeof(unsigned);
  unsigned *host = NULL, *back = NULL;
  TRY(cuMemAllocHost((void **)&host, bytes));
  TRY(cuMemHostAlloc((void **)&back, bytes, 0));
  for (size_t i = 0; i < n; i++) host[i] = (unsigned)i ^ 0x5a5au;
  CUdeviceptr a, b, c, d;
  TRY(cuMemAlloc(&a, bytes));
  TRY(cuMemAlloc(&b, bytes));
  TRY(cuMemAlloc(&c, bytes));
  TRY(cuMemAlloc(&d, bytes));
  CUstream s1, s2;
  TRY(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  TRY(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent start, mid, end;
  TRY(cuEventCreate(&start, CU_EVENT_DEFAULT));
  TRY(cuEventCreate(&mid, CU_EVENT_DEFAULT));
  TRY(cuEventCreate(&end, CU_EVENT_DEFAULT));
  TRY(cuMemsetD32Async(d, 0xdeadbeefu, n, s2));
  TRY(cuEventRecord(start, s1));
  TRY(cuMemcpyHtoDAsync(a, host, bytes, s1));
  TRY(cuMemcpyDtoDAsync(b, a, bytes, s1));
  TRY(cuEventRecord(mid, s1));
  TRY(cuStreamWaitEvent(s2, mid, 0));
  TRY(cuMemcpyDtoDAsync(c, b, bytes, s2));
  /* d[0 .. n/2) = c[n/2 .. n) */
  TRY(cuMemcpyDtoDAsync(d, c + bytes / 2, bytes / 2, s2));
  TRY(cuMemsetD16Async(d + bytes / 2, 0x1234, 4, s2));
  TRY(cuMemcpyDtoHAsync(back, d, bytes, s2));
  TRY(cuEventRecord(end, s2));
  TRY(cuEventSynchronize(end));
  TRY(cuEventQuery(end));
  TRY(cuStreamQuery(s1));
  TRY(cuStreamQuery(s2));
  for (size_t i = 0; i < n / 2; i++)
    WANT(back[i] == ((unsigned)(n / 2 + i) ^ 0x5a5au), "back[%zu] = %#x", i, back[i]);
  WANT(back[n / 2] == 0x12341234u && back[n / 2 + 1] == 0x12341234u, "back[n/2] = %#x",
       back[n / 2]);
  for (size_t i = n / 2 + 2; i < n; i++)
    WANT(back[i] == 0xdeadbeefu, "back[%zu] = %#x", i, back[i]);
  float total = -1.0f, first = -1.0f;
  TRY(cuEventElapsedTime(&total, start, end));
  TRY(cuEventElapsedTime(&first, start, mid));
  WANT(total >= first && first >= 0.0f, "elapsed %g, %g", total, first);
  TRY(cuEventDestroy(start));
  TRY(cuEventDestroy(mid));
  TRY(cuEventDestroy(end));
  TRY(cuStreamDestroy(s1));
  TRY(cuStreamDestroy(s2));
  TRY(cuMemFree(a));
  TRY(cuMemFree(b));
  TRY(cuMemFree(c));
  TRY(cuMemFree(d));
  TRY(cuMemFreeHost(host));
  TRY(cuMemFreeHost(back));
  TRY(cuDevicePrimaryCtxRelease(dev));
  char what[256];
  snprintf(what, sizeof what,
           "%zu words: pinned H2D + D2D on s1, event, s2 waits, D2D chain, async memsets, async "
           "D2H: every word right; elapsed %.3f ms >= %.3f ms",
           n, total, first);
  pass(what);
  return 0;
}

static int jit(void) {
  check = "jit_error_log";
  static const char *bad_ptx = ".version 7.0\n.target sm_80\n.address_size 64\n"
                               ".visible .entry k(.param .u64 p)\n{\n"
                               "    frobnicate.u32 %r1, 3;\n    ret;\n}\n";
  static const char *good_ptx = ".version 7.0\n.target sm_80\n.address_size 64\n"
                                ".visible .entry empty()\n{\n    ret;\n}\n";
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuCtxCreate(&ctx, 0, dev));
  char error_log[8192];
  memset(error_log, 'x', sizeof error_log);
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {error_log, (void *)(size_t)sizeof error_log};
  CUmodule mod;
  CUresult r = cuModuleLoadDataEx(&mod, bad_ptx, 2, opts, vals);
  WANT(r == CUDA_ERROR_INVALID_PTX, "cuModuleLoadDataEx = %d", (int)r);
  size_t filled = (size_t)vals[1];
  WANT(filled > 0 && filled < sizeof error_log && strlen(error_log) == filled,
       "log size %zu", filled);
  WANT(strstr(error_log, "frobnicate") != NULL, "log '%s'", error_log);
  /* The session goes on. */
  TRY(cuModuleLoadData(&mod, good_ptx));
  CUfunction k;
  TRY(cuModuleGetFunction(&k, mod, "empty"));
  TRY(cuLaunchKernel(k, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
  TRY(cuCtxSynchronize());
  TRY(cuModuleUnload(mod));
  TRY(cuCtxDestroy(ctx));
  char *nl = strchr(error_log, '\n');
  if (nl) *nl = 0;
  char what[512];
  snprintf(what, sizeof what,
           "CUDA_ERROR_INVALID_PTX with a %zu-byte log naming the instruction: '%.200s'; a good "
           "module then loads and runs",
           filled, error_log);
  pass(what);
  return 0;
}

static int oob(const char *ptx_dir) {
  check = "oob_illegal_address";
  char *ptx = read_ptx(ptx_dir, "oob_write.nvrtc.ptx");
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
  TRY(cuCtxPushCurrent(ctx));
  CUmodule mod;
  TRY(cuModuleLoadData(&mod, ptx));
  CUfunction k;
  TRY(cuModuleGetFunction(&k, mod, "oob_write"));
  int n = 256;
  CUdeviceptr out;
  TRY(cuMemAlloc(&out, n * sizeof(float)));
  CUstream s;
  TRY(cuStreamCreate(&s, 0));
  void *args[] = {&out, &n};
  /* The launch itself succeeds (pipelined); the fault comes at the next synchronisation. */
  TRY(cuLaunchKernel(k, 2, 1, 1, 256, 1, 1, 0, s, args, NULL));
  CUresult r = cuStreamSynchronize(s);
  WANT(r == CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize = %d", (int)r);
  r = cuCtxSynchronize();
  WANT(r == CUDA_ERROR_ILLEGAL_ADDRESS, "sticky: cuCtxSynchronize = %d", (int)r);
  CUdeviceptr other;
  r = cuMemAlloc(&other, 16);
  WANT(r == CUDA_ERROR_ILLEGAL_ADDRESS, "sticky: cuMemAlloc = %d", (int)r);
  TRY(cuDevicePrimaryCtxReset(dev));
  CUdeviceptr fresh;
  TRY(cuMemAlloc(&fresh, 16));
  unsigned v[4] = {1, 2, 3, 4}, w[4] = {0};
  TRY(cuMemcpyHtoD(fresh, v, sizeof v));
  TRY(cuMemcpyDtoH(w, fresh, sizeof w));
  WANT(memcmp(v, w, sizeof v) == 0, "w = %u %u %u %u", w[0], w[1], w[2], w[3]);
  CUcontext popped = NULL;
  TRY(cuCtxPopCurrent(&popped));
  WANT(popped == ctx, "popped another context");
  TRY(cuDevicePrimaryCtxRelease(dev));
  pass("launch ok; cuStreamSynchronize, then cuCtxSynchronize and cuMemAlloc: "
       "CUDA_ERROR_ILLEGAL_ADDRESS (700); after cuDevicePrimaryCtxReset a round trip of 16 "
       "bytes is right");
  return 0;
}

/* Allocates `bytes` in three buffers (the last one gets the remainder), with data in them. */
static int hold(size_t bytes) {
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuCtxCreate(&ctx, 0, dev));
  size_t part = bytes / 3;
  size_t sizes[3] = {part, part, bytes - 2 * part};
  for (int i = 0; i < 3; i++) {
    CUdeviceptr p;
    TRY(cuMemAlloc(&p, sizes[i]));
    TRY(cuMemsetD8(p, (unsigned char)(i + 1), sizes[i]));
  }
  size_t free_mem = 0, total_mem = 0;
  TRY(cuMemGetInfo(&free_mem, &total_mem));
  WANT(total_mem - free_mem == bytes, "%zu bytes in use", total_mem - free_mem);
  return 0;
}

static int leak(size_t bytes) {
  check = "exit_holding_memory";
  if (hold(bytes)) return 1;
  static const char *ptx = ".version 7.0\n.target sm_80\n.address_size 64\n"
                           ".visible .entry empty()\n{\n    ret;\n}\n";
  CUmodule mod;
  TRY(cuModuleLoadData(&mod, ptx));
  CUstream s;
  TRY(cuStreamCreate(&s, 0));
  char what[256];
  snprintf(what, sizeof what,
           "%zu bytes in 3 allocations, a module and a stream held at exit (cuMemGetInfo)", bytes);
  pass(what);
  return 0; /* exit(): the shim says Goodbye */
}

static int kill_self(size_t bytes) {
  check = "killed_holding_memory";
  if (hold(bytes)) return 1;
  char what[128];
  snprintf(what, sizeof what, "%zu bytes allocated; now SIGKILL", bytes);
  pass(what);
  kill(getpid(), SIGKILL);
  return 1;
}

static int after_kill(const char *name) {
  check = name;
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
  TRY(cuCtxSetCurrent(ctx));
  size_t free_mem = 0, total_mem = 0;
  TRY(cuMemGetInfo(&free_mem, &total_mem));
  WANT(free_mem == total_mem, "free %zu of %zu in a fresh session", free_mem, total_mem);
  unsigned long long v[512], w[512];
  for (int i = 0; i < 512; i++) v[i] = 0x0123456789abcdefull * (unsigned long long)(i + 1);
  CUdeviceptr p;
  TRY(cuMemAlloc(&p, sizeof v));
  TRY(cuMemcpyHtoD(p, v, sizeof v));
  TRY(cuMemcpyDtoH(w, p, sizeof w));
  WANT(memcmp(v, w, sizeof v) == 0, "round trip differs");
  TRY(cuMemFree(p));
  TRY(cuDevicePrimaryCtxRelease(dev));
  char what[160];
  snprintf(what, sizeof what,
           "a new session after the killed one: all %zu bytes free, a 4096-byte round trip right",
           total_mem);
  pass(what);
  return 0;
}

/* ---- modes of tests/cuda-vsock ---- */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int wait_for_file(const char *path, int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    if (access(path, F_OK) == 0) return 1;
    usleep(10000);
  }
  return 0;
}

static int pair(const char *name, const char *other, size_t bytes) {
  static char check_name[64];
  snprintf(check_name, sizeof check_name, "concurrent_%s", name);
  check = check_name;
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuCtxCreate(&ctx, 0, dev));
  CUdeviceptr p;
  TRY(cuMemAlloc(&p, bytes));
  TRY(cuMemsetD8(p, (unsigned char)name[0], bytes));
  /* Both sessions are open now: say so, and wait for the other's. */
  char mine[128], theirs[128], done[128];
  snprintf(mine, sizeof mine, "/run/pair-%s.ready", name);
  snprintf(theirs, sizeof theirs, "/run/pair-%s.ready", other);
  snprintf(done, sizeof done, "/run/pair-%s.done", other);
  FILE *f = fopen(mine, "w");
  WANT(f != NULL, "cannot create %s", mine);
  fclose(f);
  WANT(wait_for_file(theirs, 60), "%s never appeared", theirs);
  double t0 = now_us();
  size_t free_mem = 0, total_mem = 0;
  TRY(cuMemGetInfo(&free_mem, &total_mem));
  /* Each its own session: the other's memory is not in this one's quota. */
  WANT(total_mem - free_mem == bytes, "%zu bytes in use, own %zu", total_mem - free_mem, bytes);
  unsigned char *back = malloc(bytes);
  int rounds = 0;
  /* Copies while the other process works too (at least 20 rounds, until it is done). */
  for (; rounds < 20 || (access(done, F_OK) != 0 && rounds < 2000); rounds++) {
    TRY(cuMemsetD8(p + (size_t)rounds % 64, (unsigned char)(name[0] + rounds), 1));
    TRY(cuMemcpyDtoH(back, p, 4096));
  }
  TRY(cuMemcpyDtoH(back, p, bytes));
  for (size_t i = 64; i < bytes; i++)
    WANT(back[i] == (unsigned char)name[0], "byte %zu = %#x, want %#x", i, back[i],
         (unsigned char)name[0]);
  snprintf(mine, sizeof mine, "/run/pair-%s.done", name);
  f = fopen(mine, "w");
  if (f) fclose(f);
  TRY(cuMemFree(p));
  TRY(cuCtxDestroy(ctx));
  char what[256];
  snprintf(what, sizeof what,
           "own session while '%s' held its own: %zu bytes in use = its own allocation, %d "
           "rounds of memset + 4 KiB D2H in %.0f ms, all %zu bytes read back right",
           other, total_mem - free_mem, rounds, (now_us() - t0) / 1e3, bytes);
  pass(what);
  free(back);
  return 0;
}

static int killcopy(size_t bytes) {
  check = "killed_mid_copy";
  /* state: 2k+1 while copy k runs, 2k+2 once it returned; shared with the parent. */
  volatile long *state =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  WANT(state != MAP_FAILED, "mmap failed");
  *state = 0;
  pid_t child = fork();
  WANT(child >= 0, "fork failed");
  if (child == 0) {
    if (cuInit(0) != CUDA_SUCCESS) _exit(3);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    if (cuDeviceGet(&dev, 0) || cuCtxCreate(&ctx, 0, dev) || cuMemAlloc(&p, bytes)) _exit(4);
    unsigned char *h = malloc(bytes);
    memset(h, 0x5c, bytes);
    for (long k = 0;; k++) {
      *state = 2 * k + 1;
      if (cuMemcpyHtoD(p, h, bytes) != CUDA_SUCCESS) _exit(5);
      *state = 2 * k + 2;
    }
  }
  /* Let the first copy finish, then kill during a later one (state odd: in a copy). */
  double t0 = now_us();
  while (*state < 3 && now_us() - t0 < 60e6) usleep(1000);
  WANT(*state >= 3, "the child made no copy in 60 s (state %ld)", *state);
  while ((*state & 1) == 0 && now_us() - t0 < 60e6) usleep(100);
  usleep(20000);
  long at_kill = *state;
  kill(child, SIGKILL);
  int status = 0;
  WANT(waitpid(child, &status, 0) == child, "waitpid failed");
  long final = *state;
  WANT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %#x", status);
  /* The copy that was running never returned: the child died inside it. */
  WANT((final & 1) == 1, "state %ld after the kill: not inside a copy", final);
  char what[256];
  snprintf(what, sizeof what,
           "child %d SIGKILLed inside copy #%ld of %zu bytes (H2D; %ld done before), %.0f ms "
           "after it started copying",
           (int)child, final / 2 + 1, bytes, at_kill / 2, (now_us() - t0) / 1e3);
  pass(what);
  return 0;
}

static int unserved(void) {
  check = "unserved_port_error";
  const char *server = getenv("VMGPU_CUDA_SERVER");
  WANT(server != NULL, "no VMGPU_CUDA_SERVER");
  /* The shim's message goes to standard error (at its default level, warn): catch it. */
  char path[] = "/run/unserved-XXXXXX";
  int fd = mkstemp(path);
  WANT(fd >= 0, "mkstemp failed");
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  CUresult r = cuInit(0);
  int count = -1;
  /* The shim connects at the first call that needs the service: that call fails, and so
   * does every later one, without connecting again. */
  double t0 = now_us();
  CUresult r2 = cuDeviceGetCount(&count);
  double t1 = now_us();
  CUresult r3 = cuDeviceGetCount(&count);
  double t2 = now_us();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char msg[4096] = {0};
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, msg, sizeof msg - 1);
  close(fd);
  unlink(path);
  if (n > 0) msg[n] = 0;
  /* The warning naming the address, once. */
  char *line = strstr(msg, "cannot open a session");
  int warnings = 0;
  for (char *w = line; w; w = strstr(w + 1, "cannot open a session")) warnings++;
  while (line && line > msg && line[-1] != '\n') line--;
  char *nl = line ? strchr(line, '\n') : NULL;
  if (nl) *nl = 0;
  const char *name = NULL, *name2 = NULL, *name3 = NULL;
  cuGetErrorName(r, &name);
  cuGetErrorName(r2, &name2);
  cuGetErrorName(r3, &name3);
  /* cuInit only chooses the mode (cuda-guest/libcuda/README.md: the connection opens at the
   * first call that needs the service). */
  WANT(r == CUDA_SUCCESS, "cuInit = %d %s", (int)r, name ? name : "?");
  WANT(r2 == CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount = %d %s", (int)r2,
       name2 ? name2 : "?");
  WANT(r3 == CUDA_ERROR_NOT_INITIALIZED, "the second cuDeviceGetCount = %d %s", (int)r3,
       name3 ? name3 : "?");
  char want[128];
  snprintf(want, sizeof want, "VMGPU_CUDA_SERVER=%s", server);
  WANT(line != NULL && strstr(line, want) != NULL && warnings == 1,
       "want one warning of the shim naming %s, got %d: '%s'", want, warnings, msg);
  char what[1400];
  snprintf(what, sizeof what,
           "cuInit = 0 (connects lazily), cuDeviceGetCount = %d %s after %.0f ms, again %d %s "
           "after %.1f ms (no new attempt); the shim, once: '%s'",
           (int)r2, name2, (t1 - t0) / 1e3, (int)r3, name3, (t2 - t1) / 1e3, line);
  pass(what);
  return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *b = buf;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) return 0;
    b += w;
    n -= (size_t)w;
  }
  return 1;
}

static int halfframe(unsigned cid, unsigned port) {
  check = "half_frame_close";
  int fd = socket(AF_VSOCK, SOCK_STREAM, 0);
  WANT(fd >= 0, "socket(AF_VSOCK) failed");
  struct sockaddr_vm addr;
  memset(&addr, 0, sizeof addr);
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = cid;
  addr.svm_port = port;
  WANT(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "connect to %u:%u failed", cid,
       port);
  /* The client hello (docs/protocol.md): "VGPC", version 1.1, no features, max_frame 1 MiB. */
  unsigned char hello[24] = {'V', 'G', 'P', 'C', 1, 0, 1, 0};
  uint32_t max_frame = 1 << 20;
  memcpy(hello + 16, &max_frame, 4);
  WANT(write_all(fd, hello, sizeof hello), "writing the hello failed");
  unsigned char sh[64];
  size_t got = 0;
  while (got < sizeof sh) {
    ssize_t r = read(fd, sh + got, sizeof sh - got);
    WANT(r > 0, "the server's hello ended after %zu bytes", got);
    got += (size_t)r;
  }
  uint32_t status;
  uint64_t session;
  memcpy(&status, sh + 8, 4);
  memcpy(&session, sh + 24, 8);
  WANT(memcmp(sh, "VGPS", 4) == 0 && status == 0, "server hello %.4s, status %u", sh, status);
  /* A frame header announcing 4096 bytes (id 1, opcode 1), then 1000 of them, then close. */
  unsigned char frame[1016];
  memset(frame, 0xee, sizeof frame);
  uint32_t len = 4096;
  uint64_t id = 1;
  uint16_t opcode = 1, flags = 0;
  memcpy(frame, &len, 4);
  memcpy(frame + 4, &id, 8);
  memcpy(frame + 12, &opcode, 2);
  memcpy(frame + 14, &flags, 2);
  WANT(write_all(fd, frame, sizeof frame), "writing half a frame failed");
  close(fd);
  char what[160];
  snprintf(what, sizeof what,
           "session %llu: handshake, then %zu of a 4096-byte frame, then close",
           (unsigned long long)session, sizeof frame);
  pass(what);
  return 0;
}

static int localcid(void) {
  check = "vsock_local_cid";
  int fd = open("/dev/vsock", O_RDONLY);
  WANT(fd >= 0, "cannot open /dev/vsock");
  unsigned cid = 0;
  WANT(ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) == 0, "ioctl failed");
  close(fd);
  WANT(cid == 3, "local CID %u", cid);
  char what[64];
  snprintf(what, sizeof what, "local CID %u (vhost-device-vsock --guest-cid 3)", cid);
  pass(what);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int bench(const char *label, size_t big) {
  static char check_name[64];
  snprintf(check_name, sizeof check_name, "bench_%s", label);
  check = check_name;
  enum { N = 200, REPS = 3 };
  TRY(cuInit(0));
  CUdevice dev;
  TRY(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  TRY(cuCtxCreate(&ctx, 0, dev));
  CUdeviceptr small, p;
  TRY(cuMemAlloc(&small, 4));
  TRY(cuMemAlloc(&p, big));
  static double t[N];
  unsigned v = 0;
  for (int i = 0; i < 20; i++) TRY(cuMemcpyDtoH(&v, small, 4)); /* warm up */
  for (int i = 0; i < N; i++) {
    double a = now_us();
    TRY(cuMemcpyDtoH(&v, small, 4));
    t[i] = now_us() - a;
  }
  qsort(t, N, sizeof t[0], cmp_double);
  double d2h4 = t[N / 2], d2h4_p90 = t[N * 9 / 10];
  for (int i = 0; i < N; i++) {
    double a = now_us();
    TRY(cuCtxSynchronize());
    t[i] = now_us() - a;
  }
  qsort(t, N, sizeof t[0], cmp_double);
  double sync = t[N / 2];
  unsigned *h = malloc(big), *back = malloc(big);
  WANT(h && back, "no host memory for 2 x %zu bytes", big);
  for (size_t i = 0; i < big / 4; i++) h[i] = (unsigned)i * 2654435761u;
  double h2d[REPS], d2h[REPS];
  for (int r = 0; r < REPS; r++) {
    double a = now_us();
    TRY(cuMemcpyHtoD(p, h, big));
    h2d[r] = (double)big / (now_us() - a); /* bytes per us = MB/s */
    memset(back, 0, big);
    a = now_us();
    TRY(cuMemcpyDtoH(back, p, big));
    d2h[r] = (double)big / (now_us() - a);
    WANT(memcmp(h, back, big) == 0, "the %zu MiB read back differs (rep %d)", big >> 20, r);
  }
  qsort(h2d, REPS, sizeof h2d[0], cmp_double);
  qsort(d2h, REPS, sizeof d2h[0], cmp_double);
  printf("BENCH %s: round trip (4-byte cuMemcpyDtoH) median %.0f us (p90 %.0f us), "
         "cuCtxSynchronize median %.0f us, over %d calls; %zu MiB cuMemcpyHtoD median %.0f MB/s "
         "(best %.0f), cuMemcpyDtoH median %.0f MB/s (best %.0f), %d each\n",
         label, d2h4, d2h4_p90, sync, N, big >> 20, h2d[REPS / 2], h2d[REPS - 1], d2h[REPS / 2],
         d2h[REPS - 1], REPS);
  TRY(cuMemFree(p));
  TRY(cuMemFree(small));
  TRY(cuCtxDestroy(ctx));
  char what[256];
  snprintf(what, sizeof what,
           "%d round trips and %d x %zu MiB each way: every copy read back equal; round trip "
           "%.0f us, H2D %.0f MB/s (figures, not asserted)",
           N, REPS, big >> 20, d2h4, h2d[REPS / 2]);
  pass(what);
  free(h);
  free(back);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int r;
  if (!strcmp(mode, "basics") && argc == 4)
    r = basics(argv[2], strtoull(argv[3], NULL, 0));
  else if (!strcmp(mode, "streams"))
    r = streams();
  else if (!strcmp(mode, "jit"))
    r = jit();
  else if (!strcmp(mode, "oob") && argc == 3)
    r = oob(argv[2]);
  else if (!strcmp(mode, "leak") && argc == 3)
    r = leak(strtoull(argv[2], NULL, 0));
  else if (!strcmp(mode, "kill") && argc == 3)
    r = kill_self(strtoull(argv[2], NULL, 0));
  else if (!strcmp(mode, "after_kill") && argc <= 3)
    r = after_kill(argc == 3 ? argv[2] : "session_after_kill");
  else if (!strcmp(mode, "pair") && argc == 5)
    r = pair(argv[2], argv[3], strtoull(argv[4], NULL, 0));
  else if (!strcmp(mode, "killcopy") && argc == 3)
    r = killcopy(strtoull(argv[2], NULL, 0));
  else if (!strcmp(mode, "unserved"))
    r = unserved();
  else if (!strcmp(mode, "halfframe") && argc == 4)
    r = halfframe((unsigned)strtoul(argv[2], NULL, 0), (unsigned)strtoul(argv[3], NULL, 0));
  else if (!strcmp(mode, "localcid"))
    r = localcid();
  else if (!strcmp(mode, "bench") && argc == 4)
    r = bench(argv[2], strtoull(argv[3], NULL, 0) << 20);
  else {
    printf("FAIL usage: cuda-serial-guest %s: unknown mode or arguments\n", mode);
    return 2;
  }
  return r || failed;
}
