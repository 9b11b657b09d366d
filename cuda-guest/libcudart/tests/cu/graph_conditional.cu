// Conditional graph nodes: IF (with and without an else body), WHILE (a handle's
// default value given at each launch), SWITCH, a conditional node added to a graph
// being captured (cudaStreamGetCaptureInfo, cudaStreamUpdateCaptureDependencies) and a
// body filled by capturing into it (cudaStreamBeginCaptureToGraph), a bad node refused.
#include <cstdio>

#include "check.h"

__global__ void set_cond(cudaGraphConditionalHandle h, const int *v) { cudaGraphSetConditional(h, *v); }
__global__ void add(int *x, int k) { atomicAdd(x, k); }
// A loop body: counts its runs, and keeps the loop going while the counter is positive.
__global__ void count_down(int *counter, int *runs, cudaGraphConditionalHandle h) {
  (*runs)++;
  (*counter)--;
  cudaGraphSetConditional(h, *counter > 0 ? 1 : 0);
}

static int get(const int *d) {
  int v = -1;
  cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost);
  return v;
}

// A kernel node of `g` after `dep` (if any).
static cudaGraphNode_t kernel_node(cudaGraph_t g, cudaGraphNode_t dep, void *fn, void **args) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeKernel;
  p.kernel.func = fn;
  p.kernel.gridDim = dim3(1);
  p.kernel.blockDim = dim3(1);
  p.kernel.kernelParams = args;
  cudaGraphNode_t n = nullptr;
  cudaError_t e = cudaGraphAddNode(&n, g, dep ? &dep : nullptr, nullptr, dep ? 1 : 0, &p);
  if (e != cudaSuccess) printf("kernel node: %s\n", cudaGetErrorName(e));
  return n;
}

// A conditional node of `g` of `type` with `size` bodies on `h`, after `deps`: its
// parameters (the bodies in `conditional.phGraph_out`) and the result in `*e`.
static cudaGraphNodeParams cond_node(cudaGraphNode_t *n, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
                                     cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size,
                                     cudaError_t *e) {
  cudaGraphNodeParams c = {};
  c.type = cudaGraphNodeTypeConditional;
  c.conditional.handle = h;
  c.conditional.type = type;
  c.conditional.size = size;
  *e = cudaGraphAddNode(n, g, deps, nullptr, ndeps, &c);
  return c;
}

int main() {
  char what[240];
  int *v, *x, *counter, *runs;
  OK(cudaMalloc(&v, sizeof(int)));
  OK(cudaMalloc(&x, sizeof(int)));
  OK(cudaMalloc(&counter, sizeof(int)));
  OK(cudaMalloc(&runs, sizeof(int)));

  // IF, then IF/ELSE: set_cond(v) -> conditional [add 1 | add 100].
  for (int size = 1; size <= 2; size++) {
    cudaGraph_t g;
    OK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    OK(cudaGraphConditionalHandleCreate(&h, g));
    void *set_args[] = {&h, &v};
    cudaGraphNode_t set = kernel_node(g, nullptr, (void *)set_cond, set_args);
    cudaGraphNode_t cn;
    cudaError_t added;
    cudaGraphNodeParams c = cond_node(&cn, g, &set, 1, h, cudaGraphCondTypeIf, size, &added);
    OK(added);
    int one = 1, hundred = 100;
    void *then_args[] = {&x, &one};
    kernel_node(c.conditional.phGraph_out[0], nullptr, (void *)add, then_args);
    void *else_args[] = {&x, &hundred};
    if (size == 2) kernel_node(c.conditional.phGraph_out[1], nullptr, (void *)add, else_args);
    cudaGraphNodeType type;
    OK(cudaGraphNodeGetType(cn, &type));
    cudaGraphExec_t ex;
    OK(cudaGraphInstantiate(&ex, g, 0));
    int got[2];
    for (int cond = 0; cond < 2; cond++) {
      OK(cudaMemset(x, 0, sizeof(int)));
      OK(cudaMemcpy(v, &cond, sizeof cond, cudaMemcpyHostToDevice));
      OK(cudaGraphLaunch(ex, 0));
      OK(cudaDeviceSynchronize());
      got[cond] = get(x);
    }
    snprintf(what, sizeof what, "IF with %d bodies (node type %d): condition 0 gives %d, 1 gives %d", size, (int)type,
             got[0], got[1]);
    CHECK(what, type == cudaGraphNodeTypeConditional && got[0] == (size == 2 ? 100 : 0) && got[1] == 1);
    OK(cudaGraphExecDestroy(ex));
    OK(cudaGraphDestroy(g));
  }

  // WHILE: the handle starts at 1 at each launch (cudaGraphCondAssignDefault); the body
  // runs until the counter reaches 0.
  {
    cudaGraph_t g;
    OK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNode_t cn;
    cudaError_t added;
    cudaGraphNodeParams c = cond_node(&cn, g, nullptr, 0, h, cudaGraphCondTypeWhile, 1, &added);
    OK(added);
    void *args[] = {&counter, &runs, &h};
    kernel_node(c.conditional.phGraph_out[0], nullptr, (void *)count_down, args);
    cudaGraphExec_t ex;
    OK(cudaGraphInstantiate(&ex, g, 0));
    int total = 0, last = 0;
    for (int launch = 0; launch < 3; launch++) {
      int start = 5 + launch;
      OK(cudaMemcpy(counter, &start, sizeof start, cudaMemcpyHostToDevice));
      OK(cudaMemset(runs, 0, sizeof(int)));
      OK(cudaGraphLaunch(ex, 0));
      OK(cudaStreamSynchronize(0));
      last = get(runs);
      total += last;
    }
    snprintf(what, sizeof what, "WHILE from 5, 6, 7 (default value at each launch): %d runs in all, %d the last time",
             total, last);
    CHECK(what, total == 18 && last == 7 && get(counter) == 0);
    OK(cudaGraphExecDestroy(ex));
    OK(cudaGraphDestroy(g));
  }

  // SWITCH over three bodies (add 1, 10, 100); a value past them runs none.
  {
    cudaGraph_t g;
    OK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    OK(cudaGraphConditionalHandleCreate(&h, g));
    void *set_args[] = {&h, &v};
    cudaGraphNode_t set = kernel_node(g, nullptr, (void *)set_cond, set_args);
    cudaGraphNode_t cn;
    cudaError_t added;
    cudaGraphNodeParams c = cond_node(&cn, g, &set, 1, h, cudaGraphCondTypeSwitch, 3, &added);
    OK(added);
    int ks[3] = {1, 10, 100};
    void *body_args[3][2];
    for (int i = 0; i < 3; i++) {
      body_args[i][0] = &x;
      body_args[i][1] = &ks[i];
      kernel_node(c.conditional.phGraph_out[i], nullptr, (void *)add, body_args[i]);
    }
    cudaGraphExec_t ex;
    OK(cudaGraphInstantiate(&ex, g, 0));
    int got[4];
    for (int s = 0; s < 4; s++) {
      OK(cudaMemset(x, 0, sizeof(int)));
      OK(cudaMemcpy(v, &s, sizeof s, cudaMemcpyHostToDevice));
      OK(cudaGraphLaunch(ex, 0));
      OK(cudaDeviceSynchronize());
      got[s] = get(x);
    }
    snprintf(what, sizeof what, "SWITCH values 0..3: %d %d %d %d", got[0], got[1], got[2], got[3]);
    CHECK(what, got[0] == 1 && got[1] == 10 && got[2] == 100 && got[3] == 0);
    OK(cudaGraphExecDestroy(ex));
    OK(cudaGraphDestroy(g));
  }

  // A WHILE node added to a graph being captured, its body captured into it:
  // add 1000 -> WHILE [count_down] -> add 1000.
  {
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus st;
    cudaGraph_t g = nullptr;
    const cudaGraphNode_t *deps = nullptr;
    size_t ndeps = 99;
    OK(cudaStreamGetCaptureInfo(s, &st, nullptr, &g, &deps, nullptr, &ndeps));
    size_t ndeps_at_start = ndeps;
    cudaGraphConditionalHandle h;
    OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
    add<<<1, 1, 0, s>>>(x, 1000);
    OK(cudaStreamGetCaptureInfo(s, &st, nullptr, &g, &deps, nullptr, &ndeps));
    size_t ndeps_after_kernel = ndeps;
    cudaGraphNode_t cn;
    cudaError_t added;
    cudaGraphNodeParams c = cond_node(&cn, g, deps, ndeps, h, cudaGraphCondTypeWhile, 1, &added);
    OK(added);
    cudaGraph_t body = c.conditional.phGraph_out[0];
    OK(cudaStreamUpdateCaptureDependencies(s, &cn, nullptr, 1, cudaStreamSetCaptureDependencies));
    add<<<1, 1, 0, s>>>(x, 1000);
    cudaGraph_t captured;
    OK(cudaStreamEndCapture(s, &captured));
    OK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    count_down<<<1, 1, 0, s>>>(counter, runs, h);
    cudaGraph_t body_again;
    OK(cudaStreamEndCapture(s, &body_again));
    size_t nodes = 0, body_nodes = 0;
    OK(cudaGraphGetNodes(captured, nullptr, &nodes));
    OK(cudaGraphGetNodes(body, nullptr, &body_nodes));
    cudaGraphExec_t ex;
    OK(cudaGraphInstantiate(&ex, captured, 0));
    int four = 4;
    OK(cudaMemcpy(counter, &four, sizeof four, cudaMemcpyHostToDevice));
    OK(cudaMemset(runs, 0, sizeof(int)));
    OK(cudaMemset(x, 0, sizeof(int)));
    OK(cudaGraphLaunch(ex, s));
    OK(cudaStreamSynchronize(s));
    snprintf(what, sizeof what,
             "captured WHILE: graph %s the capture's, %zu then %zu dependencies, %zu nodes (body %zu, captured into "
             "%s), %d runs, x = %d",
             captured == g ? "is" : "is not", ndeps_at_start, ndeps_after_kernel, nodes, body_nodes,
             body_again == body ? "it" : "another", get(runs), get(x));
    CHECK(what, captured == g && ndeps_at_start == 0 && ndeps_after_kernel == 1 && nodes == 3 && body_nodes == 1 &&
                    body_again == body && get(runs) == 4 && get(x) == 2000);
    OK(cudaGraphExecDestroy(ex));
    OK(cudaGraphDestroy(captured));
    OK(cudaStreamDestroy(s));
  }

  // An IF node with three bodies is refused.
  {
    cudaGraph_t g;
    OK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    OK(cudaGraphConditionalHandleCreate(&h, g));
    cudaGraphNode_t cn;
    cudaError_t e;
    cond_node(&cn, g, nullptr, 0, h, cudaGraphCondTypeIf, 3, &e);
    snprintf(what, sizeof what, "IF with 3 bodies: %s", cudaGetErrorName(e));
    CHECK(what, e == cudaErrorInvalidValue);
    OK(cudaGraphDestroy(g));
  }
  return summary("graph_conditional");
}
