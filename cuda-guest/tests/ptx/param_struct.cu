// A 2 KB struct passed by value and indexed at run time: NVRTC takes the kernel
// parameter's address (`mov.b64 %rd, param` then `ld.param [%rd+...]`), as in cudarc's
// test_launch_arrays.
struct Meta {
  unsigned long long n;
  unsigned long long values[255];
};
extern "C" __global__ void gather(const Meta meta, const int *index, unsigned long long *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < meta.n) out[i] = meta.values[index[i]];
}
