// Pitched memory through the runtime: cudaMallocPitch and cudaMalloc3D, a kernel that
// walks the pitched rows and slices, cudaMemcpy2D/2DAsync (host and device, a
// sub-rectangle, cudaMemcpyDefault), cudaMemset2D/3D, cudaMemcpy3D/3DAsync between
// pitched device memory and a host volume, and a pitch narrower than the width refused.
// Prints one line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

// Adds 1000 * z + 100 * y to every float of a pitched volume (w x h x d floats).
__global__ void bump(cudaPitchedPtr p, int w, int h, int d) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y, z = blockIdx.z;
  if (x >= w || y >= h || z >= d) return;
  char *slice = (char *)p.ptr + (size_t)z * p.pitch * p.ysize;
  float *row = (float *)(slice + (size_t)y * p.pitch);
  row[x] += 1000.0f * z + 100.0f * y;
}

int main() {
  const int W = 37, H = 5; // floats per row, rows
  float host[H][W], back[H][W];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) host[y][x] = (float)(y * W + x);

  float *d = nullptr;
  size_t pitch = 0;
  OK(cudaMallocPitch((void **)&d, &pitch, W * sizeof(float), H));
  printf("     pitch %zu for a %zu-byte row\n", pitch, W * sizeof(float));
  CHECK("the pitch holds a row and is a multiple of 512", pitch >= W * sizeof(float) && pitch % 512 == 0);
  OK(cudaMemcpy2D(d, pitch, host, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
  cudaPitchedPtr pp = make_cudaPitchedPtr(d, pitch, W, H);
  bump<<<dim3(1, H, 1), 64>>>(pp, W, H, 1);
  OK(cudaGetLastError());
  memset(back, 0, sizeof back);
  OK(cudaMemcpy2D(back, W * sizeof(float), d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) wrong += back[y][x] != host[y][x] + 100.0f * y;
  CHECK("a kernel walked the pitched rows (2-D round trip)", wrong == 0);

  // A sub-rectangle, with cudaMemcpyDefault, on a stream: columns 3..9 of rows 1..3.
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  float sub[3][7];
  memset(sub, 0, sizeof sub);
  OK(cudaMemcpy2DAsync(sub, sizeof sub[0], (char *)d + 1 * pitch + 3 * sizeof(float), pitch,
                       sizeof sub[0], 3, cudaMemcpyDefault, s));
  OK(cudaStreamSynchronize(s));
  wrong = 0;
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 7; x++) wrong += sub[y][x] != host[y + 1][x + 3] + 100.0f * (y + 1);
  CHECK("a 7x3 sub-rectangle copied with cudaMemcpyDefault on a stream", wrong == 0);
  CHECK("a pitch narrower than the width is cudaErrorInvalidPitchValue",
        cudaMemcpy2D(back, 4, d, pitch, 8, 2, cudaMemcpyDeviceToHost) == cudaErrorInvalidPitchValue);
  cudaGetLastError();

  // cudaMemset2D: bytes of every row, not the padding's.
  OK(cudaMemset2D(d, pitch, 0x3f, 8, H));
  unsigned char row[16];
  OK(cudaMemcpy(row, (char *)d + 4 * pitch, 16, cudaMemcpyDeviceToHost));
  CHECK("cudaMemset2D set the first 8 bytes of row 4 and left the 9th", row[0] == 0x3f && row[7] == 0x3f && row[8] != 0x3f);

  // 3-D: a 9 x 4 x 3 float volume.
  const int X = 9, Y = 4, Z = 3;
  cudaExtent ext = make_cudaExtent(X * sizeof(float), Y, Z);
  cudaPitchedPtr vol;
  OK(cudaMalloc3D(&vol, ext));
  CHECK("cudaMalloc3D's pitch and sizes", vol.pitch >= X * sizeof(float) && vol.xsize == X * sizeof(float) && vol.ysize == Y);
  OK(cudaMemset3D(vol, 0, ext));
  static float hv[Z][Y][X], hv2[Z][Y][X];
  for (int z = 0; z < Z; z++)
    for (int y = 0; y < Y; y++)
      for (int x = 0; x < X; x++) hv[z][y][x] = (float)(x + 10 * y + 100 * z) / 4.0f;
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(hv, X * sizeof(float), X * sizeof(float), Y);
  up.dstPtr = vol;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  OK(cudaMemcpy3D(&up));
  bump<<<dim3(1, Y, Z), 32>>>(vol, X, Y, Z);
  OK(cudaGetLastError());
  cudaMemcpy3DParms down = {};
  down.srcPtr = vol;
  down.dstPtr = make_cudaPitchedPtr(hv2, X * sizeof(float), X * sizeof(float), Y);
  down.extent = ext;
  down.kind = cudaMemcpyDeviceToHost;
  OK(cudaMemcpy3DAsync(&down, s));
  OK(cudaStreamSynchronize(s));
  wrong = 0;
  for (int z = 0; z < Z; z++)
    for (int y = 0; y < Y; y++)
      for (int x = 0; x < X; x++) wrong += hv2[z][y][x] != hv[z][y][x] + 1000.0f * z + 100.0f * y;
  printf("     volume: hv2[2][3][8] = %g (want %g)\n", hv2[2][3][8], hv[2][3][8] + 2300.0f);
  CHECK("a kernel walked the pitched slices (3-D round trip)", wrong == 0);
  // cudaMemset3D of one slice's first two rows, 4 bytes wide.
  OK(cudaMemset3D(make_cudaPitchedPtr((char *)vol.ptr + 2 * vol.pitch * Y, vol.pitch, vol.xsize, Y), 0, make_cudaExtent(4, 2, 1)));
  float f[2];
  OK(cudaMemcpy(f, (char *)vol.ptr + 2 * vol.pitch * Y + vol.pitch, 8, cudaMemcpyDeviceToHost));
  CHECK("cudaMemset3D zeroed slice 2, row 1, float 0 and left float 1", f[0] == 0.0f && f[1] == hv[2][1][1] + 2100.0f);
  OK(cudaFree(vol.ptr));
  OK(cudaFree(d));
  OK(cudaStreamDestroy(s));
  return summary("pitched");
}
