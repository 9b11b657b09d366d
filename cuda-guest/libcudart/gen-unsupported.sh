#!/bin/sh
# Regenerates an `unsupported!` list: every `cuda*` function NVIDIA's library exports that
# ours does not implement. Usage: gen-unsupported.sh NVIDIA_LIB OUR_LIB
#   core/src/unsupported.rs (every soname): NVIDIA's libcudart.so.13 (nvidia-cuda-runtime
#     13.0.96, the wheel tests/run-all.sh installs) against ours;
#   so12/src/lib.rs (the names only 12 exports): NVIDIA's libcudart.so.12
#     (nvidia-cuda-runtime-cu12 12.9.79, in target/numba-venv) against our libcudart.so.12.
set -eu
nm -D --defined-only "$1" | awk '$2=="T"{print $3}' | sed 's/@.*//' | grep '^cuda' | sort -u > /tmp/nv.$$
nm -D --defined-only "$2" | awk '$2=="T"{print $3}' | sed 's/@.*//' | sort -u > /tmp/ours.$$
comm -23 /tmp/nv.$$ /tmp/ours.$$ | sed 's/^/    /; s/$/,/'
rm -f /tmp/nv.$$ /tmp/ours.$$
