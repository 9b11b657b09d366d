// Textures and surfaces, as cuda-samples' simpleTexture, simplePitchLinearTexture and
// simpleSurfaceWrite use them: a float image in a CUDA array sampled with normalized
// wrapped coordinates and bilinear filtering, point sampling with clamp and border,
// 8-bit texels read as normalized floats and as integers, tex1Dfetch over linear memory,
// pitched 2-D memory, a layered array, a 3-D array, a surface read and written in
// place, and a texture over freed memory failing the launch.
// Prints one line per check and a summary; exits 1 on a failed check.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

#define W 16
#define H 8

__global__ void sample2d(cudaTextureObject_t t, float *out, float dx, float dy, int normalized) {
  int x = threadIdx.x, y = blockIdx.x;
  float u = x + dx, v = y + dy;
  if (normalized) {
    u /= W;
    v /= H;
  }
  out[y * W + x] = tex2D<float>(t, u, v);
}

__global__ void fetch1d(cudaTextureObject_t t, float *out, int n) {
  int i = threadIdx.x;
  out[i] = tex1Dfetch<float>(t, i - 2);  // two before the start: 0 outside
}

__global__ void rgba(cudaTextureObject_t t, float4 *f, uchar4 *u, cudaTextureObject_t ti) {
  int i = threadIdx.x;
  f[i] = tex1D<float4>(t, i + 0.5f);
  u[i] = tex1D<uchar4>(ti, i + 0.5f);
}

__global__ void layered(cudaTextureObject_t t, float *out) {
  out[threadIdx.x] = tex2DLayered<float>(t, 1.5f, 0.5f, threadIdx.x);
}

__global__ void volume(cudaTextureObject_t t, float *out) {
  out[threadIdx.x] = tex3D<float>(t, 0.5f, 1.5f, threadIdx.x + 0.5f);
}

__global__ void invert(cudaSurfaceObject_t s) {
  int x = threadIdx.x, y = blockIdx.x;
  unsigned v = surf2Dread<unsigned>(s, x * 4, y);
  surf2Dwrite(~v, s, x * 4, y);
}

__global__ void outside(cudaSurfaceObject_t s, unsigned *out) {
  out[0] = surf2Dread<unsigned>(s, 1000 * 4, 0, cudaBoundaryModeZero);
  out[1] = surf2Dread<unsigned>(s, 1000 * 4, 0, cudaBoundaryModeClamp);
  surf2Dwrite(7u, s, 1000 * 4, 0, cudaBoundaryModeTrap);
}

static float img(int x, int y) { return (float)(y * 100 + x); }

int main() {
  float host[H][W];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) host[y][x] = img(x, y);
  cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
  CHECK("cudaCreateChannelDesc<float>: 32 bits, float", fd.x == 32 && fd.y == 0 && fd.f == cudaChannelFormatKindFloat);
  cudaArray_t arr;
  OK(cudaMallocArray(&arr, &fd, W, H));
  OK(cudaMemcpy2DToArray(arr, 0, 0, host, sizeof host[0], sizeof host[0], H, cudaMemcpyHostToDevice));
  cudaResourceDesc rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;
  cudaTextureDesc td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t;
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  float *out, hout[H][W];
  OK(cudaMalloc(&out, sizeof hout));

  // Point sampling at texel centres: the image itself.
  sample2d<<<H, W>>>(t, out, 0.5f, 0.5f, 0);
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  CHECK("point samples at texel centres are the texels", memcmp(hout, host, sizeof host) == 0);
  // Clamp: three texels right and down of each reads the nearest edge texel.
  sample2d<<<H, W>>>(t, out, 3.5f, 3.5f, 0);
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) wrong += hout[y][x] != img(x + 3 < W ? x + 3 : W - 1, y + 3 < H ? y + 3 : H - 1);
  CHECK("clamped point samples read the edge", wrong == 0);
  OK(cudaDestroyTextureObject(t));

  // Bilinear, normalized, wrapped: halfway between texel centres is the mean.
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeWrap;
  td.filterMode = cudaFilterModeLinear;
  td.normalizedCoords = 1;
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  sample2d<<<H, W>>>(t, out, 1.0f, 0.5f, 1);
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      float want = 0.5f * (img(x, y) + img((x + 1) % W, y));  // wraps at the right edge
      if (fabsf(hout[y][x] - want) > 1e-3f) {
        if (wrong++ < 3) printf("     bilinear (%d,%d) = %g, want %g\n", x, y, hout[y][x], want);
      }
    }
  printf("     bilinear: out[2][15] = %g (wraps to the first column)\n", hout[2][15]);
  CHECK("bilinear samples between centres are the means, wrapping at the edge", wrong == 0);
  OK(cudaDestroyTextureObject(t));

  // Border: outside is the border color.
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeBorder;
  td.filterMode = cudaFilterModePoint;
  td.normalizedCoords = 0;
  td.borderColor[0] = -1.0f;
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  sample2d<<<H, W>>>(t, out, 8.5f, 0.5f, 0);
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  CHECK("border: inside reads the texel, outside the border color",
        hout[0][0] == img(8, 0) && hout[0][7] == img(15, 0) && hout[0][8] == -1.0f && hout[3][15] == -1.0f);
  OK(cudaDestroyTextureObject(t));

  // tex1Dfetch over linear memory: reads 0 outside.
  float lin[32];
  for (int i = 0; i < 32; i++) lin[i] = 0.25f * i;
  float *dlin;
  OK(cudaMalloc(&dlin, sizeof lin));
  OK(cudaMemcpy(dlin, lin, sizeof lin, cudaMemcpyHostToDevice));
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeLinear;
  rd.res.linear.devPtr = dlin;
  rd.res.linear.desc = fd;
  rd.res.linear.sizeInBytes = sizeof lin;
  memset(&td, 0, sizeof td);
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  fetch1d<<<1, 32>>>(t, out, 32);
  float f1[32];
  OK(cudaMemcpy(f1, out, sizeof f1, cudaMemcpyDeviceToHost));
  CHECK("tex1Dfetch: index -2 and -1 read 0, index 5 reads lin[5]", f1[0] == 0.0f && f1[1] == 0.0f && f1[7] == lin[5]);
  OK(cudaDestroyTextureObject(t));

  // 8-bit RGBA texels: normalized floats, and the same as integers.
  unsigned char px[8][4];
  for (int i = 0; i < 8; i++)
    for (int c = 0; c < 4; c++) px[i][c] = (unsigned char)(i * 30 + c * 5);
  cudaChannelFormatDesc u4 = cudaCreateChannelDesc<uchar4>();
  cudaArray_t arr8;
  OK(cudaMallocArray(&arr8, &u4, 8, 0));
  OK(cudaMemcpy2DToArray(arr8, 0, 0, px, sizeof px, sizeof px, 1, cudaMemcpyHostToDevice));
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr8;
  memset(&td, 0, sizeof td);
  td.readMode = cudaReadModeNormalizedFloat;
  cudaTextureObject_t tn, ti;
  OK(cudaCreateTextureObject(&tn, &rd, &td, nullptr));
  td.readMode = cudaReadModeElementType;
  OK(cudaCreateTextureObject(&ti, &rd, &td, nullptr));
  float4 *df;
  uchar4 *du;
  OK(cudaMalloc(&df, 8 * sizeof(float4)));
  OK(cudaMalloc(&du, 8 * sizeof(uchar4)));
  rgba<<<1, 8>>>(tn, df, du, ti);
  float4 hf[8];
  uchar4 hu[8];
  OK(cudaMemcpy(hf, df, sizeof hf, cudaMemcpyDeviceToHost));
  OK(cudaMemcpy(hu, du, sizeof hu, cudaMemcpyDeviceToHost));
  printf("     texel 3 as floats: %g %g %g %g\n", hf[3].x, hf[3].y, hf[3].z, hf[3].w);
  CHECK("8-bit texels read as normalized floats (v / 255)",
        hf[3].x == 90.0f / 255.0f && hf[3].w == 105.0f / 255.0f && hf[7].y == 215.0f / 255.0f);
  CHECK("and as integers", hu[3].x == 90 && hu[3].w == 105 && hu[7].y == 215);

  // Pitched 2-D memory.
  float *pitched;
  size_t pitch;
  OK(cudaMallocPitch((void **)&pitched, &pitch, W * sizeof(float), H));
  OK(cudaMemcpy2D(pitched, pitch, host, sizeof host[0], sizeof host[0], H, cudaMemcpyHostToDevice));
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypePitch2D;
  rd.res.pitch2D.devPtr = pitched;
  rd.res.pitch2D.desc = fd;
  rd.res.pitch2D.width = W;
  rd.res.pitch2D.height = H;
  rd.res.pitch2D.pitchInBytes = pitch;
  memset(&td, 0, sizeof td);
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  sample2d<<<H, W>>>(t, out, 0.5f, 0.5f, 0);
  OK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
  CHECK("pitched 2-D memory samples as the image", memcmp(hout, host, sizeof host) == 0);
  OK(cudaDestroyTextureObject(t));

  // A layered array: 4 layers of 2x1, layer l holds 10 l + x.
  float lay[4][1][2];
  for (int l = 0; l < 4; l++)
    for (int x = 0; x < 2; x++) lay[l][0][x] = 10.0f * l + x;
  cudaArray_t la;
  OK(cudaMalloc3DArray(&la, &fd, make_cudaExtent(2, 1, 4), cudaArrayLayered));
  cudaMemcpy3DParms cp;
  memset(&cp, 0, sizeof cp);
  cp.srcPtr = make_cudaPitchedPtr(lay, 2 * sizeof(float), 2, 1);
  cp.dstArray = la;
  cp.extent = make_cudaExtent(2, 1, 4);
  cp.kind = cudaMemcpyHostToDevice;
  OK(cudaMemcpy3D(&cp));
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = la;
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  layered<<<1, 4>>>(t, out);
  float fl[4];
  OK(cudaMemcpy(fl, out, sizeof fl, cudaMemcpyDeviceToHost));
  CHECK("each layer's texel (1, 0): 1, 11, 21, 31", fl[0] == 1.0f && fl[1] == 11.0f && fl[2] == 21.0f && fl[3] == 31.0f);
  OK(cudaDestroyTextureObject(t));

  // A 3-D array of 1x2x4: slice z holds 100 z + 10 y.
  float vol[4][2][1];
  for (int z = 0; z < 4; z++)
    for (int y = 0; y < 2; y++) vol[z][y][0] = 100.0f * z + 10.0f * y;
  cudaArray_t va;
  OK(cudaMalloc3DArray(&va, &fd, make_cudaExtent(1, 2, 4), 0));
  memset(&cp, 0, sizeof cp);
  cp.srcPtr = make_cudaPitchedPtr(vol, sizeof(float), 1, 2);
  cp.dstArray = va;
  cp.extent = make_cudaExtent(1, 2, 4);
  cp.kind = cudaMemcpyHostToDevice;
  OK(cudaMemcpy3D(&cp));
  rd.res.array.array = va;
  OK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  volume<<<1, 4>>>(t, out);
  OK(cudaMemcpy(fl, out, sizeof fl, cudaMemcpyDeviceToHost));
  CHECK("3-D: texel (0, 1, z) of each slice: 10, 110, 210, 310", fl[0] == 10.0f && fl[1] == 110.0f && fl[2] == 210.0f && fl[3] == 310.0f);
  OK(cudaDestroyTextureObject(t));

  // A surface read and written in place.
  unsigned words[H][W];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) words[y][x] = (unsigned)(y * W + x);
  cudaChannelFormatDesc ud = cudaCreateChannelDesc<unsigned>();
  cudaArray_t sa;
  OK(cudaMallocArray(&sa, &ud, W, H, cudaArraySurfaceLoadStore));
  OK(cudaMemcpy2DToArray(sa, 0, 0, words, sizeof words[0], sizeof words[0], H, cudaMemcpyHostToDevice));
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = sa;
  cudaSurfaceObject_t s;
  OK(cudaCreateSurfaceObject(&s, &rd));
  invert<<<H, W>>>(s);
  OK(cudaGetLastError());
  unsigned back[H][W];
  OK(cudaMemcpy2DFromArray(back, sizeof back[0], sa, 0, 0, sizeof back[0], H, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) wrong += back[y][x] != ~words[y][x];
  CHECK("every surface word inverted in place", wrong == 0);

  // Outside a surface: zero and clamp read, a trapping write fails the launch.
  unsigned *dw;
  OK(cudaMalloc(&dw, 2 * sizeof(unsigned)));
  outside<<<1, 1>>>(s, dw);
  cudaError_t e = cudaDeviceSynchronize();
  printf("     trapping surface write outside: %s\n", cudaGetErrorName(e));
  CHECK("a .trap surface write outside the surface fails the launch", e == cudaErrorIllegalAddress);

  return summary("textures");
}
