// __managed__ variables: the host reads and writes them directly, kernels update them,
// the symbol API reaches them (cudaMemcpyTo/FromSymbol, cudaGetSymbolAddress/Size), one
// is initialised in the source, they are fresh copies after cudaDeviceReset, and
// managed_var_lib.cu (built into the same program) has its own. Prints one line per check and a summary; exits 1 on a failed check.
#include <cstdio>
#include <cuda_runtime.h>

#include "check.h"

#define N 1000

__managed__ int counter;
__managed__ float vals[N];
__managed__ int seeded = 42;

__global__ void update(int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    vals[i] = vals[i] * 3.0f + 1.0f;
    atomicAdd(&counter, 1);
  }
  if (i == 0) seeded += 100;
}

__global__ void double_all(int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) vals[i] *= 2.0f;
}

cudaError_t lib_run(int n);
long long lib_get();
void lib_set(long long v);

int main() {
  CHECK("an initialised __managed__ variable reads 42 on the host", seeded == 42);

  // The host writes, a kernel updates, the host reads after a synchronisation.
  counter = 5;
  for (int i = 0; i < N; i++) vals[i] = (float)i;
  update<<<(N + 255) / 256, 256>>>(N);
  OK(cudaGetLastError());
  OK(cudaDeviceSynchronize());
  CHECK("the kernel's atomicAdds reach the host's counter (5 + 1000)", counter == 5 + N);
  int wrong = 0;
  for (int i = 0; i < N; i++) wrong += vals[i] != (float)i * 3.0f + 1.0f;
  CHECK("the kernel's updates of the host's array (3i + 1 for 1000 elements)", wrong == 0);
  CHECK("the kernel's update of the initialised variable (142)", seeded == 142);

  // Again: the host's second writes reach the device.
  for (int i = 0; i < N; i++) vals[i] += 10.0f;
  double_all<<<(N + 255) / 256, 256>>>(N);
  OK(cudaDeviceSynchronize());
  wrong = 0;
  for (int i = 0; i < N; i++) wrong += vals[i] != ((float)i * 3.0f + 11.0f) * 2.0f;
  CHECK("a second round trip (host += 10, kernel doubles)", wrong == 0);

  // The symbol API on managed variables.
  void *addr = nullptr;
  OK(cudaGetSymbolAddress(&addr, vals));
  CHECK("cudaGetSymbolAddress(vals) is the host's &vals[0]", addr == (void *)&vals[0]);
  size_t size = 0;
  OK(cudaGetSymbolSize(&size, vals));
  CHECK("cudaGetSymbolSize(vals) is 4000", size == sizeof(float) * N);
  float src[N];
  for (int i = 0; i < N; i++) src[i] = 0.5f * i;
  OK(cudaMemcpyToSymbol(vals, src, sizeof src));
  OK(cudaDeviceSynchronize());
  wrong = 0;
  for (int i = 0; i < N; i++) wrong += vals[i] != 0.5f * i;
  CHECK("cudaMemcpyToSymbol(vals) is what the host reads", wrong == 0);
  int seven = 7;
  OK(cudaMemcpyToSymbol(counter, &seven, sizeof seven, 0));
  OK(cudaDeviceSynchronize());
  CHECK("cudaMemcpyToSymbol(counter) is what the host reads (7)", counter == 7);
  counter = 1234;
  int back = 0;
  OK(cudaMemcpyFromSymbol(&back, counter, sizeof back));
  CHECK("cudaMemcpyFromSymbol(counter) reads the host's write (1234)", back == 1234);
  float tail[2] = {0, 0};
  OK(cudaMemcpyFromSymbol(tail, vals, sizeof tail, sizeof(float) * (N - 2)));
  CHECK("cudaMemcpyFromSymbol(vals, offset 998) reads 499 and 499.5",
        tail[0] == 499.0f && tail[1] == 499.5f);
  update<<<(N + 255) / 256, 256>>>(N);
  OK(cudaDeviceSynchronize());
  CHECK("a kernel after the symbol copies (counter 1234 + 1000)", counter == 1234 + N);
  CHECK("... and vals[10] 3 * 5 + 1", vals[10] == 16.0f);

  // The second unit: its kernel uses its variable before its host code does.
  OK(lib_run(100));
  CHECK("the other unit's variable after its kernel (5050)", lib_get() == 5050);
  lib_set(1000000000000LL);
  OK(lib_run(10));
  CHECK("the other unit's variable after a host write and a kernel (10^12 + 55)",
        lib_get() == 1000000000055LL);

  // After a reset the variables are fresh copies (their initialisers' values), still
  // shared by the host and kernels.
  OK(cudaDeviceReset());
  CHECK("after cudaDeviceReset the initialised variable is 42 again", seeded == 42);
  counter = 3;
  update<<<(N + 255) / 256, 256>>>(N);
  OK(cudaDeviceSynchronize());
  CHECK("after cudaDeviceReset: the host's counter and the kernel's atomicAdds (1003)",
        counter == 3 + N);
  CHECK("after cudaDeviceReset: vals[7] is 3 * 0 + 1, seeded 142",
        vals[7] == 1.0f && seeded == 142);

  return summary("managed_var");
}
