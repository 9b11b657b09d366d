// Kernels of the native driver tests and the bench. kernels.ptx beside this file is
// generated from it by gen.py (NVRTC 12, compute_52, so any newer GPU JIT-compiles it).

extern "C" __global__ void empty() {}

extern "C" __global__ void vector_add(const float *a, const float *b, float *c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// Sums each block's slice in dynamic shared memory; out[blockIdx.x] = sum.
extern "C" __global__ void block_sum(const unsigned *in, unsigned *out, unsigned n) {
    extern __shared__ unsigned s[];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Busy for about `cycles` SM clock cycles, then writes `value` to *flag.
extern "C" __global__ void spin(long long cycles, unsigned *flag, unsigned value) {
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    if (threadIdx.x == 0) *flag = value;
}

// Writes one terabyte past `p`: an illegal address.
extern "C" __global__ void oob_write(unsigned *p) {
    p[(1ull << 40) / sizeof(unsigned) + threadIdx.x] = 1u;
}

// Keeps 96 floats live across a loop: about 100 registers a thread, so 1024-thread
// blocks exceed the 64K registers of an SM (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).
extern "C" __global__ void register_hog(float *p, int n) {
    float acc[96];
#pragma unroll
    for (int j = 0; j < 96; j++) acc[j] = p[j];
    for (int i = 0; i < n; i++) {
#pragma unroll
        for (int j = 0; j < 96; j++) acc[j] = acc[j] * acc[(j + 1) % 96] + p[i];
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 96; j++) s += acc[j];
    p[threadIdx.x] = s;
}
