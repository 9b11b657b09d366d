// Graphs changed after they are built: a node's parameters set in the graph and in an
// executable graph (kernel, memset, memcpy and host nodes), an executable graph updated
// from a graph of the same shape (and refused for another shape), and the nodes'
// dependencies and dependents. Prints one line per check and a summary; exits 1 on a
// failed check.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

__global__ void axpb(float *p, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = a * p[i] + b;
}

static int host_seen;
static void note(void *p) { host_seen = *(int *)p; }

#define N 256

// memset(p, v) -> axpb(p, a, b) -> copy p to out -> host note(tag)
static cudaGraph_t build(float *p, float *out, float v, float a, float b, int *tag,
                         cudaGraphNode_t nodes[4], float **ka, float **kb) {
  cudaGraph_t g;
  cudaGraphCreate(&g, 0);
  cudaMemsetParams ms = {};
  ms.dst = p;
  ms.value = *(unsigned *)&v;
  ms.elementSize = 4;
  ms.width = N;
  ms.height = 1;
  cudaGraphAddMemsetNode(&nodes[0], g, nullptr, 0, &ms);
  static float A, B;
  static int n = N;
  static float *P;
  A = a;
  B = b;
  P = p;
  *ka = &A;
  *kb = &B;
  void *args[] = {&P, &A, &B, &n};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)axpb;
  kp.gridDim = dim3(N / 64);
  kp.blockDim = dim3(64);
  kp.kernelParams = args;
  cudaGraphAddKernelNode(&nodes[1], g, &nodes[0], 1, &kp);
  cudaMemcpy3DParms cp = {};
  cp.srcPtr = make_cudaPitchedPtr(p, N * 4, N, 1);
  cp.dstPtr = make_cudaPitchedPtr(out, N * 4, N, 1);
  cp.extent = make_cudaExtent(N * 4, 1, 1);
  cp.kind = cudaMemcpyDeviceToHost;
  cudaGraphAddMemcpyNode(&nodes[2], g, &nodes[1], 1, &cp);
  cudaHostNodeParams hp = {note, tag};
  cudaGraphAddHostNode(&nodes[3], g, &nodes[2], 1, &hp);
  return g;
}

static bool all(const float *out, float want) {
  for (int i = 0; i < N; i++)
    if (out[i] != want) return false;
  return true;
}

int main() {
  float *p, *out;
  OK(cudaMalloc(&p, N * 4));
  OK(cudaMallocHost(&out, N * 4));
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  int tag1 = 11, tag2 = 22;
  cudaGraphNode_t n1[4];
  float *a1, *b1;
  cudaGraph_t g = build(p, out, 1.0f, 2.0f, 3.0f, &tag1, n1, &a1, &b1);
  cudaGraphExec_t x;
  OK(cudaGraphInstantiate(&x, g, 0));
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  printf("     first launch: out[0] = %g, host saw %d\n", out[0], host_seen);
  CHECK("built graph: 2 * 1 + 3 = 5 everywhere, host node saw 11", all(out, 5.0f) && host_seen == 11);

  // Dependencies and dependents.
  cudaGraphNode_t deps[4];
  size_t nd = 4;
  OK(cudaGraphNodeGetDependentNodes(n1[1], deps, nullptr, &nd));
  CHECK("the kernel node's one dependent is the memcpy node", nd == 1 && deps[0] == n1[2]);
  nd = 4;
  OK(cudaGraphNodeGetDependencies(n1[1], deps, nullptr, &nd));
  CHECK("the kernel node's one dependency is the memset node", nd == 1 && deps[0] == n1[0]);
  nd = 0;
  OK(cudaGraphNodeGetDependencies(n1[0], nullptr, nullptr, &nd));
  CHECK("the memset node has none", nd == 0);

  // Set parameters in the executable graph only: the graph keeps its own.
  float v2 = 4.0f;
  cudaMemsetParams ms = {};
  ms.dst = p;
  ms.value = *(unsigned *)&v2;
  ms.elementSize = 4;
  ms.width = N;
  ms.height = 1;
  OK(cudaGraphExecMemsetNodeSetParams(x, n1[0], &ms));
  float a = 10.0f, b = -1.0f;
  int n = N;
  void *args[] = {&p, &a, &b, &n};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)axpb;
  kp.gridDim = dim3(N / 64);
  kp.blockDim = dim3(64);
  kp.kernelParams = args;
  OK(cudaGraphExecKernelNodeSetParams(x, n1[1], &kp));
  a = 1000.0f; // the node copied its arguments when they were set
  cudaHostNodeParams hp = {note, &tag2};
  OK(cudaGraphExecHostNodeSetParams(x, n1[3], &hp));
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  printf("     after exec set params: out[0] = %g, host saw %d\n", out[0], host_seen);
  CHECK("exec params: 10 * 4 - 1 = 39, host node saw 22", all(out, 39.0f) && host_seen == 22);
  CHECK("a node's parameters for another node type are refused",
        cudaGraphExecHostNodeSetParams(x, n1[1], &hp) == cudaErrorInvalidValue);
  cudaGetLastError();

  // Set parameters in the graph, then update the executable graph from it.
  float *out2;
  OK(cudaMallocHost(&out2, N * 4));
  cudaMemcpy3DParms cp = {};
  cp.srcPtr = make_cudaPitchedPtr(p, N * 4, N, 1);
  cp.dstPtr = make_cudaPitchedPtr(out2, N * 4, N, 1);
  cp.extent = make_cudaExtent(N * 4, 1, 1);
  cp.kind = cudaMemcpyDeviceToHost;
  OK(cudaGraphMemcpyNodeSetParams(n1[2], &cp));
  a = 0.5f;
  b = 0.25f;
  OK(cudaGraphKernelNodeSetParams(n1[1], &kp));
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  CHECK("the executable graph is unchanged by the graph's new parameters", all(out, 39.0f));
  cudaGraphExecUpdateResultInfo info;
  memset(&info, 0xff, sizeof info);
  OK(cudaGraphExecUpdate(x, g, &info));
  CHECK("the update succeeded", info.result == cudaGraphExecUpdateSuccess);
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  printf("     after update: out2[0] = %g, host saw %d\n", out2[0], host_seen);
  // The graph's memset is still 1.0 and its host node 11: 0.5 * 1 + 0.25.
  CHECK("updated: 0.5 * 1 + 0.25 into the new buffer, host node saw 11", all(out2, 0.75f) && host_seen == 11);

  // A graph of another shape is refused, and the executable graph keeps working.
  cudaGraph_t other;
  OK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t e;
  OK(cudaGraphAddEmptyNode(&e, other, nullptr, 0));
  CHECK("another topology: cudaErrorGraphExecUpdateFailure",
        cudaGraphExecUpdate(x, other, &info) == cudaErrorGraphExecUpdateFailure &&
            info.result == cudaGraphExecUpdateErrorTopologyChanged);
  cudaGetLastError();
  OK(cudaGraphLaunch(x, s));
  OK(cudaStreamSynchronize(s));
  CHECK("the executable graph still runs after a refused update", all(out2, 0.75f));

  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(g));
  OK(cudaGraphDestroy(other));
  OK(cudaFree(p));
  OK(cudaFreeHost(out));
  OK(cudaFreeHost(out2));
  OK(cudaStreamDestroy(s));
  return summary("graph_update");
}
