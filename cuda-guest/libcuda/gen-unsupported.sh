#!/bin/sh
# Prints the entry points the shim exports as CUDA_ERROR_NOT_SUPPORTED stubs (the
# `unsupported!` list in src/api.rs): every function cuda.h declares — after its
# #defines, so the versioned names a program links (cuMemAlloc_v2, ...), in both the
# legacy and the per-thread-default-stream builds (_ptds/_ptsz) — plus the older names
# loaders such as cudarc look up by dlsym (and panic without), less what the built
# library implements.
#
#   gen-unsupported.sh CUDA_INCLUDE_DIR LIBRARY
set -eu
inc=$1
lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for def in "" "-DCUDA_API_PER_THREAD_DEFAULT_STREAM"; do
    echo '#include <cuda.h>' | cc -E $def -I"$inc" - | tr '\n' ' ' |
        grep -oE "CUresult +(__attribute__\(\(deprecated\)\) +)?cu[A-Za-z0-9_]+ *\(" |
        grep -oE "cu[A-Za-z0-9_]+ *\($" | tr -d ' ('
done > "$tmp/declared"
# Names of older headers that dlsym-based loaders (cudarc 0.16) also require, and the
# profiler's.
for n in cuGetProcAddress cuGraphAddKernelNode cuGraphExecKernelNodeSetParams \
    cuGraphExecUpdate cuGraphInstantiate_v2 cuGraphKernelNodeGetParams \
    cuGraphKernelNodeSetParams cuProfilerInitialize cuProfilerStart cuProfilerStop \
    cuStreamBatchMemOp cuStreamGetCaptureInfo cuStreamWaitValue32 cuStreamWaitValue64 \
    cuStreamWriteValue32 cuStreamWriteValue64; do
    echo "$n"
done >> "$tmp/declared"
sort -u "$tmp/declared" > "$tmp/all"
# Implemented: exported and not a stub (a stub's body is one call to `unsupported`).
grep -oE "^    cu[A-Za-z0-9_]+,$" "$(dirname "$0")/src/api.rs" | tr -d ' ,' | sort -u > "$tmp/stubs"
nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort -u > "$tmp/exported"
comm -23 "$tmp/exported" "$tmp/stubs" > "$tmp/implemented"
comm -23 "$tmp/all" "$tmp/implemented"
