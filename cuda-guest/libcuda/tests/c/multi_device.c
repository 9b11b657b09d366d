/* Several devices (VMGPU_SIM_DEVICES=3 on the simulator): each with its own primary
 * context, memory, UUID and PCI address; a kernel on device 1; copies between devices
 * with cuMemcpyPeer[Async]; no peer access between them. Usage: multi_device PTX. */
#include <string.h>

#include "common.h"

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char *ptx = read_file(argv[1]);
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  EXPECT(count == 3);
  CUdevice devs[3];
  CUuuid uuids[3];
  char bus[3][32];
  for (int i = 0; i < 3; i++) {
    CHECK(cuDeviceGet(&devs[i], i));
    CHECK(cuDeviceGetUuid(&uuids[i], devs[i]));
    CHECK(cuDeviceGetPCIBusId(bus[i], sizeof bus[i], devs[i]));
    int pci_bus = -1;
    CHECK(cuDeviceGetAttribute(&pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, devs[i]));
    char want[32];
    snprintf(want, sizeof want, "0000:%02x:00.0", pci_bus);
    EXPECT(strcmp(want, bus[i]) == 0);
    CUdevice back = -1;
    CHECK(cuDeviceGetByPCIBusId(&back, bus[i]));
    EXPECT(back == devs[i]);
  }
  EXPECT(memcmp(&uuids[0], &uuids[1], sizeof uuids[0]) != 0);
  EXPECT(strcmp(bus[1], bus[2]) != 0);
  CUdevice bad;
  EXPECT(cuDeviceGet(&bad, 3) == CUDA_ERROR_INVALID_DEVICE);
  CUcontext c0, c1, c2;
  CHECK(cuDevicePrimaryCtxRetain(&c0, devs[0]));
  CHECK(cuDevicePrimaryCtxRetain(&c1, devs[1]));
  CHECK(cuDevicePrimaryCtxRetain(&c2, devs[2]));
  EXPECT(c0 != c1 && c1 != c2);
  unsigned flags = 0;
  int active = 0;
  CHECK(cuDevicePrimaryCtxGetState(devs[2], &flags, &active));
  EXPECT(active == 1);

  /* A kernel on device 1. */
  CHECK(cuCtxSetCurrent(c1));
  CUdevice cur = -1;
  CHECK(cuCtxGetDevice(&cur));
  EXPECT(cur == 1);
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx));
  CUfunction k;
  CHECK(cuModuleGetFunction(&k, mod, "vector_add"));
  int n = 1000;
  size_t bytes = n * sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
  for (int i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = 2.0f;
  }
  CUdeviceptr da, db, dc;
  CHECK(cuMemAlloc(&da, bytes));
  CHECK(cuMemAlloc(&db, bytes));
  CHECK(cuMemAlloc(&dc, bytes));
  CHECK(cuMemcpyHtoD(da, a, bytes));
  CHECK(cuMemcpyHtoD(db, b, bytes));
  void *args[] = {&da, &db, &dc, &n};
  CHECK(cuLaunchKernel(k, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  CHECK(cuCtxSynchronize());
  int ordinal = -1;
  CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dc));
  EXPECT(ordinal == 1);
  size_t free1 = 0, total1 = 0, free2 = 0, total2 = 0;
  CHECK(cuMemGetInfo(&free1, &total1));

  /* Device 1's result copied to device 2, then to device 0 on a stream. */
  CHECK(cuCtxSetCurrent(c2));
  CHECK(cuMemGetInfo(&free2, &total2));
  EXPECT(free2 > free1); /* each device has memory of its own */
  CUdeviceptr d2;
  CHECK(cuMemAlloc(&d2, bytes));
  CHECK(cuMemcpyPeer(d2, c2, dc, c1, bytes));
  CHECK(cuCtxSetCurrent(c0));
  CUdeviceptr d0;
  CHECK(cuMemAlloc(&d0, bytes));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemsetD32Async(d0, 0, n, s));
  CHECK(cuMemcpyPeerAsync(d0, c0, d2, c2, bytes, s));
  CHECK(cuStreamSynchronize(s));
  memset(c, 0, bytes);
  CHECK(cuMemcpyDtoH(c, d0, bytes));
  for (int i = 0; i < n; i++) {
    if (c[i] != a[i] + b[i]) {
      fprintf(stderr, "c[%d] = %f after two peer copies, expected %f\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }
  /* Within one context, a peer copy is a device-to-device copy. */
  CUdeviceptr d0b;
  CHECK(cuMemAlloc(&d0b, bytes));
  CHECK(cuMemcpyPeer(d0b, c0, d0, c0, bytes));
  float first = 0;
  CHECK(cuMemcpyDtoH(&first, d0b + 4 * 10, 4));
  EXPECT(first == 12.0f);
  /* A device's memory is not another's: a copy there fails. */
  EXPECT(cuMemcpyPeer(d0b, c0, d0, c1, bytes) == CUDA_ERROR_INVALID_VALUE);

  /* No peer access between the simulated devices. */
  int can = -1;
  CHECK(cuDeviceCanAccessPeer(&can, devs[0], devs[1]));
  EXPECT(can == 0);
  EXPECT(cuDeviceCanAccessPeer(&can, devs[0], 7) == CUDA_ERROR_INVALID_DEVICE);
  EXPECT(cuCtxEnablePeerAccess(c1, 0) == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  EXPECT(cuCtxDisablePeerAccess(c1) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

  /* A created context on device 2. */
  CUcontext made;
  CHECK(cuCtxCreate(&made, 0, devs[2]));
  CHECK(cuCtxGetDevice(&cur));
  EXPECT(cur == 2);
  CHECK(cuCtxDestroy(made));

  CHECK(cuStreamDestroy(s));
  CHECK(cuDevicePrimaryCtxRelease(devs[2]));
  CHECK(cuDevicePrimaryCtxRelease(devs[1]));
  CHECK(cuDevicePrimaryCtxRelease(devs[0]));
  EXPECT(cuDevicePrimaryCtxRelease(devs[1]) == CUDA_ERROR_INVALID_CONTEXT);
  printf("multi_device: 3 devices, peer copies OK\n");
  return 0;
}
