// The other half of rdc_main.cu.
__device__ float offset = 0.5f;
__device__ float scale_by(float x) { return 3.0f * x; }
