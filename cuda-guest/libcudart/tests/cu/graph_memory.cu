// Graph memory nodes: cudaMallocAsync/cudaFreeAsync captured into a graph, allocation
// and free nodes built by hand (with 1-D memcpy nodes), an allocation freed outside its
// graph, the nodes' parameters and types, graph memory attributes, a free node refused
// for memory no graph allocated.
#include <cstdio>
#include <cstring>

#include "check.h"

__global__ void square(const int *in, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i];
}

static int wrong(const int *v, const int *in, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) bad += v[i] != in[i] * in[i];
  return bad;
}

int main() {
  const int n = 1000;
  const size_t bytes = n * sizeof(int);
  char what[200];
  int in[n], out[n];
  for (int i = 0; i < n; i++) in[i] = i - 300;
  int *d_in;
  OK(cudaMalloc(&d_in, bytes));
  OK(cudaMemcpy(d_in, in, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Captured: allocate, compute, copy out, free; launched three times.
  cudaGraph_t g;
  int *d_tmp = nullptr;
  OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK(cudaMallocAsync(&d_tmp, bytes, s));
  square<<<(n + 127) / 128, 128, 0, s>>>(d_in, d_tmp, n);
  OK(cudaMemcpyAsync(out, d_tmp, bytes, cudaMemcpyDeviceToHost, s));
  OK(cudaFreeAsync(d_tmp, s));
  OK(cudaStreamEndCapture(s, &g));
  size_t count = 0;
  OK(cudaGraphGetNodes(g, nullptr, &count));
  cudaGraphNode_t nodes[8];
  OK(cudaGraphGetNodes(g, nodes, &count));
  cudaGraphNodeType first, last;
  OK(cudaGraphNodeGetType(nodes[0], &first));
  OK(cudaGraphNodeGetType(nodes[count - 1], &last));
  snprintf(what, sizeof what, "captured: %zu nodes, the first of type %d, the last %d", count, (int)first, (int)last);
  CHECK(what, count == 4 && first == cudaGraphNodeTypeMemAlloc && last == cudaGraphNodeTypeMemFree);
  cudaGraphExec_t x;
  OK(cudaGraphInstantiate(&x, g, 0));
  int bad = 0;
  for (int k = 0; k < 3; k++) {
    memset(out, 0, bytes);
    OK(cudaGraphLaunch(x, s));
    OK(cudaStreamSynchronize(s));
    bad += wrong(out, in, n);
  }
  snprintf(what, sizeof what, "captured graph launched 3 times: out[7] = %d, %d wrong", out[7], bad);
  CHECK(what, bad == 0);
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(g));

  // Built by hand: allocation node, kernel node, 1-D copy node, free node.
  OK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  cudaGraphNode_t alloc, kernel, copy, freeing;
  OK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  int *d_sq = (int *)ap.dptr;
  int n_ = n;
  void *args[] = {&d_in, &d_sq, &n_};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)square;
  kp.gridDim = dim3((n + 127) / 128);
  kp.blockDim = dim3(128);
  kp.kernelParams = args;
  OK(cudaGraphAddKernelNode(&kernel, g, &alloc, 1, &kp));
  OK(cudaGraphAddMemcpyNode1D(&copy, g, &kernel, 1, out, d_sq, bytes, cudaMemcpyDeviceToHost));
  OK(cudaGraphAddMemFreeNode(&freeing, g, &copy, 1, d_sq));
  cudaMemAllocNodeParams got;
  OK(cudaGraphMemAllocNodeGetParams(alloc, &got));
  void *freed = nullptr;
  OK(cudaGraphMemFreeNodeGetParams(freeing, &freed));
  snprintf(what, sizeof what, "allocation node: %zu bytes at the address it gave; the free node names it: %s",
           got.bytesize, got.dptr == ap.dptr && freed == ap.dptr ? "yes" : "no");
  CHECK(what, got.bytesize == bytes && got.dptr == ap.dptr && freed == ap.dptr);
  OK(cudaGraphInstantiate(&x, g, 0));
  bad = 0;
  for (int k = 0; k < 2; k++) {
    memset(out, 0, bytes);
    OK(cudaGraphLaunch(x, s));
    OK(cudaStreamSynchronize(s));
    bad += wrong(out, in, n);
  }
  snprintf(what, sizeof what, "graph built with memory nodes, launched twice: out[999] = %d, %d wrong", out[999], bad);
  CHECK(what, bad == 0);
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(g));

  // An allocation the graph does not free: used after the launch, freed outside.
  OK(cudaGraphCreate(&g, 0));
  OK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  d_sq = (int *)ap.dptr;
  OK(cudaGraphAddKernelNode(&kernel, g, &alloc, 1, &kp));
  OK(cudaGraphInstantiate(&x, g, 0));
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  unsigned long long used = 0;
  OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  memset(out, 0, bytes);
  OK(cudaMemcpy(out, d_sq, bytes, cudaMemcpyDeviceToHost));
  bad = wrong(out, in, n);
  snprintf(what, sizeof what, "an unfreed graph allocation outlives the launch: out[0] = %d, %d wrong, %llu bytes in use",
           out[0], bad, used);
  CHECK(what, bad == 0 && used >= bytes);
  OK(cudaFree(d_sq));
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(g));
  OK(cudaDeviceGraphMemTrim(0));
  OK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  snprintf(what, sizeof what, "freed, destroyed and trimmed: %llu bytes in use", used);
  CHECK(what, used == 0);

  // A free node for memory no graph allocated.
  OK(cudaGraphCreate(&g, 0));
  cudaError_t e = cudaGraphAddMemFreeNode(&freeing, g, nullptr, 0, d_in);
  snprintf(what, sizeof what, "a free node of cudaMalloc's memory: %s", cudaGetErrorName(e));
  CHECK(what, e == cudaErrorInvalidValue);
  cudaGetLastError();
  OK(cudaGraphDestroy(g));
  OK(cudaFree(d_in));
  OK(cudaStreamDestroy(s));
  return summary("graph_memory");
}
