// A graph built node by node with the runtime API, as cuda-samples' simpleCudaGraphs
// does: a host-to-device copy, a memset, a kernel after both, a pitched 2-D copy back
// and a host function after it; launched twice, cloned, and checked against the host.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__global__ void scale_add(const float *in, float *out, int n, float k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += k * in[i];
}

static int host_calls;
static float seen;
static void CUDART_CB after_copy(void *p) {
  host_calls++;
  seen = ((float *)p)[5];
}

int main() {
  const int n = 1024, rows = 4, cols = n / rows;
  float in_h[n];
  for (int i = 0; i < n; i++) in_h[i] = (float)i;
  float *in, *out;
  OK(cudaMalloc(&in, n * sizeof(float)));
  OK(cudaMalloc(&out, n * sizeof(float)));
  cudaGraph_t g;
  OK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t copy_in, set, kern, copy_out, host;

  cudaMemcpy3DParms cp = {0};
  cp.srcPtr = make_cudaPitchedPtr(in_h, n * sizeof(float), n, 1);
  cp.dstPtr = make_cudaPitchedPtr(in, n * sizeof(float), n, 1);
  cp.extent = make_cudaExtent(n * sizeof(float), 1, 1);
  cp.kind = cudaMemcpyHostToDevice;
  OK(cudaGraphAddMemcpyNode(&copy_in, g, NULL, 0, &cp));

  cudaMemsetParams ms = {0};
  ms.dst = out;
  ms.value = 0;
  ms.elementSize = sizeof(float);
  ms.width = n;
  ms.height = 1;
  OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &ms));

  float k = 2.0f;
  int count = n;
  void *args[] = {&in, &out, &count, &k};
  cudaKernelNodeParams kp = {0};
  kp.func = (void *)scale_add;
  kp.gridDim = dim3(n / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  cudaGraphNode_t both[] = {copy_in, set};
  OK(cudaGraphAddKernelNode(&kern, g, both, 2, &kp));
  k = 100.0f;  // the node keeps the arguments it was given

  // Rows of `cols` floats with a pitch of `cols` floats on the device, read back into
  // rows with a pitch of `cols + 3` floats: a pitched 2-D copy.
  static float back[rows * (cols + 3)];
  memset(back, 0, sizeof back);
  cudaMemcpy3DParms cb = {0};
  cb.srcPtr = make_cudaPitchedPtr(out, cols * sizeof(float), cols, rows);
  cb.dstPtr = make_cudaPitchedPtr(back, (cols + 3) * sizeof(float), cols, rows);
  cb.extent = make_cudaExtent(cols * sizeof(float), rows, 1);
  cb.kind = cudaMemcpyDeviceToHost;
  OK(cudaGraphAddMemcpyNode(&copy_out, g, &kern, 1, &cb));

  cudaHostNodeParams hp = {after_copy, back};
  OK(cudaGraphAddHostNode(&host, g, &copy_out, 1, &hp));

  size_t nodes = 0;
  OK(cudaGraphGetNodes(g, NULL, &nodes));
  CHECK("5 nodes", nodes == 5);
  size_t roots = 0;
  OK(cudaGraphGetRootNodes(g, NULL, &roots));
  CHECK("2 root nodes (the copy in and the memset)", roots == 2);
  cudaGraphNodeType t;
  OK(cudaGraphNodeGetType(kern, &t));
  CHECK("a kernel node", t == cudaGraphNodeTypeKernel);
  OK(cudaGraphNodeGetType(host, &t));
  CHECK("a host node", t == cudaGraphNodeTypeHost);

  cudaGraphExec_t x;
  OK(cudaGraphInstantiate(&x, g, 0));
  cudaStream_t s;
  OK(cudaStreamCreate(&s));
  for (int launch = 0; launch < 2; launch++) {
    OK(cudaGraphLaunch(x, s));
    OK(cudaStreamSynchronize(s));
  }
  int wrong = 0;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) wrong += back[r * (cols + 3) + c] != 2.0f * (r * cols + c);
  for (int r = 0; r < rows; r++)
    for (int c = cols; c < cols + 3; c++) wrong += back[r * (cols + 3) + c] != 0.0f;
  printf("graph_nodes: %d of %d elements wrong\n", wrong, rows * (cols + 3));
  CHECK("out = 0 + 2 * in after each launch, in pitched rows; the pitch gaps untouched", wrong == 0);
  CHECK("the host function ran after the copy, once per launch", host_calls == 2 && seen == 10.0f);

  cudaGraph_t c;
  OK(cudaGraphClone(&c, g));
  OK(cudaGraphGetNodes(c, NULL, &nodes));
  CHECK("the clone has 5 nodes", nodes == 5);
  cudaGraphExec_t xc;
  OK(cudaGraphInstantiate(&xc, c, 0));
  OK(cudaGraphLaunch(xc, s));
  OK(cudaStreamSynchronize(s));
  CHECK("the clone runs too", host_calls == 3);
  OK(cudaGraphAddDependencies(g, &host, &copy_in, NULL, 1)); // CUDA 13: edge data
  cudaGraphExec_t cyc;
  CHECK("a cycle is refused", cudaGraphInstantiate(&cyc, g, 0) == cudaErrorInvalidValue);
  cudaGetLastError();

  OK(cudaGraphExecDestroy(xc));
  OK(cudaGraphExecDestroy(x));
  OK(cudaGraphDestroy(c));
  OK(cudaGraphDestroy(g));

  // A child graph node (two scale_add kernels: b += 3 * a, then b += a), an event
  // record node after it, and, in a second graph on another stream, an event wait node
  // on that event.
  {
    int n = 256;
    float *a, *b;
    OK(cudaMalloc(&a, n * sizeof(float)));
    OK(cudaMalloc(&b, n * sizeof(float)));
    std::vector<float> ha(n);
    for (int i = 0; i < n; i++) ha[i] = (float)i;
    OK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    OK(cudaMemset(b, 0, n * sizeof(float)));
    cudaGraph_t child, parent;
    OK(cudaGraphCreate(&child, 0));
    OK(cudaGraphCreate(&parent, 0));
    float k1 = 3.0f, k2 = 1.0f;
    void *args1[] = {&a, &b, &n, &k1};
    void *args2[] = {&a, &b, &n, &k2};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)scale_add;
    kp.gridDim = dim3((n + 127) / 128);
    kp.blockDim = dim3(128);
    kp.kernelParams = args1;
    cudaGraphNode_t k1n, k2n, childn, rec, wait;
    OK(cudaGraphAddKernelNode(&k1n, child, NULL, 0, &kp));
    kp.kernelParams = args2;
    OK(cudaGraphAddKernelNode(&k2n, child, &k1n, 1, &kp));
    cudaEvent_t ev;
    OK(cudaEventCreate(&ev));
    OK(cudaGraphAddChildGraphNode(&childn, parent, NULL, 0, child));
    OK(cudaGraphAddEventRecordNode(&rec, parent, &childn, 1, ev));
    // The node holds a copy: changing the child graph now changes nothing.
    OK(cudaGraphDestroy(child));
    cudaGraph_t inside;
    size_t inside_nodes = 0;
    OK(cudaGraphChildGraphNodeGetGraph(childn, &inside));
    OK(cudaGraphGetNodes(inside, NULL, &inside_nodes));
    cudaEvent_t got_ev = nullptr;
    OK(cudaGraphEventRecordNodeGetEvent(rec, &got_ev));
    cudaGraphNodeType t_child, t_rec;
    OK(cudaGraphNodeGetType(childn, &t_child));
    OK(cudaGraphNodeGetType(rec, &t_rec));
    cudaGraph_t waiter;
    OK(cudaGraphCreate(&waiter, 0));
    OK(cudaGraphAddEventWaitNode(&wait, waiter, NULL, 0, ev));
    cudaGraphExec_t xp, xw;
    OK(cudaGraphInstantiate(&xp, parent, 0));
    OK(cudaGraphInstantiate(&xw, waiter, 0));
    cudaStream_t s2;
    OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    OK(cudaGraphLaunch(xp, s));
    OK(cudaGraphLaunch(xw, s2));
    OK(cudaStreamSynchronize(s2));
    cudaError_t q = cudaEventQuery(ev);
    std::vector<float> hb(n);
    OK(cudaMemcpy(hb.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong_b = 0;
    for (int i = 0; i < n; i++) wrong_b += hb[i] != 4.0f * i;
    char what[240];
    snprintf(what, sizeof what,
             "child graph node (type %d, %zu nodes inside) then event record node (type %d, its event %s): %d of %d "
             "wrong, the event %s after the waiting graph",
             (int)t_child, inside_nodes, (int)t_rec, got_ev == ev ? "kept" : "lost", wrong_b, n,
             q == cudaSuccess ? "complete" : "pending");
    CHECK(what, t_child == cudaGraphNodeTypeGraph && inside_nodes == 2 && t_rec == cudaGraphNodeTypeEventRecord &&
                    got_ev == ev && wrong_b == 0 && q == cudaSuccess);
    OK(cudaGraphExecDestroy(xp));
    OK(cudaGraphExecDestroy(xw));
    OK(cudaGraphDestroy(parent));
    OK(cudaGraphDestroy(waiter));
    OK(cudaEventDestroy(ev));
    OK(cudaStreamDestroy(s2));
    OK(cudaFree(a));
    OK(cudaFree(b));
  }
  OK(cudaStreamDestroy(s));
  OK(cudaFree(in));
  OK(cudaFree(out));
  return summary("graph_nodes");
}
