// Linked with link_lib.cu by the driver's linker (cuLink*): the kernel calls a device
// function and reads a variable that only the other unit defines (NVRTC -rdc=true).
extern "C" __device__ float scale(float x);
extern __device__ float offset;
extern "C" __global__ void scaled_add(const float *a, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scale(a[i]) + offset;
}
