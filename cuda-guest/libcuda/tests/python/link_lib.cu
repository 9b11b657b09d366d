// Linked into a numba kernel by numba_wide.py (link=[...]): numba compiles it with
// NVRTC. Numba's calling convention for a declared device function: a status return,
// the result through the first parameter.
extern "C" __device__ int scale(float *result, float x) {
  *result = 3.0f * x;
  return 0;
}
