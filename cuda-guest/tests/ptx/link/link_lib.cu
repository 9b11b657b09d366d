// The other unit of link_main.cu.
__device__ float offset = 0.5f;
extern "C" __device__ float scale(float x) { return 3.0f * x; }
