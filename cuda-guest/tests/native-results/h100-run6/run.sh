#!/bin/bash
# Guest programs (stock cuda.h, -lcuda = vmgpu's libcuda.so.1 in forward mode) -> vmgpu cuda
# serve --backend native (a worker process per guest) -> the H100.
mkdir -p /work && ln -sfn "$PWD" /work/main
G=$PWD/.gpu
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
RUST_LOG=info $G/vmgpu cuda serve --backend native --socket /tmp/vmgpu.sock --guest-name vm 2> $OUT/serve.log &
srv=$!
for i in $(seq 100); do [ -S /tmp/vmgpu.sock ] && break; sleep 0.1; done
guest() { LD_LIBRARY_PATH=$G/shim VMGPU_CUDA_SERVER=unix:/tmp/vmgpu.sock "$@"; echo "exit $?"; }
echo "== vector_add"; guest $G/vector_add fixtures/ptx/vector_add.nvrtc.ptx
echo "== d2d_streams"; guest $G/d2d_streams
echo "== jit_error"; guest $G/jit_error
echo "== two guests at once"; (guest $G/d2d_streams > /tmp/a.txt 2>&1 &); guest $G/vector_add fixtures/ptx/vector_add.nvrtc.ptx | tail -2; sleep 3; cat /tmp/a.txt | tail -2
nvidia-smi --query-gpu=memory.used --format=csv,noheader
kill -TERM $srv; wait $srv; echo "serve exit $?"
grep -vE "^\s*$" $OUT/serve.log | tail -40
