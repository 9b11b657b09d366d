#!/bin/sh
# Makes a CUDA 12 installation for clang (`--cuda-path`) out of NVIDIA's PyPI wheels, for
# tests/clang_cuda12.rs: CUDA 12.9's headers (nvidia-cuda-runtime-cu12's and
# nvidia-cuda-nvcc-cu12's crt/), ptxas and libdevice, and lib64/libcudart.so (NVIDIA's
# libcudart.so.12, which programs link against: they then ask for `name@libcudart.so.12`,
# as any CUDA 12 program does). CUDA 12's wheels have no fatbinary: bin/fatbinary is
# ./fatbinary, which runs CUDA 13's (bin/fatbinary-13) with clang's options translated.
#
#   make-cuda-path.sh OUT CU12_WHEELS FATBINARY_13
#     CU12_WHEELS: the `nvidia` folder the cu12 wheels are installed in (site-packages/nvidia)
#     FATBINARY_13: nvcc 13's fatbinary
set -eu
out=$1 wheels=$2 fatbinary13=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/bin" "$out/include" "$out/nvvm" "$out/lib64"
ln -sfn "$wheels/cuda_nvcc/bin/ptxas" "$out/bin/ptxas"
ln -sfn "$here/fatbinary" "$out/bin/fatbinary"
ln -sfn "$fatbinary13" "$out/bin/fatbinary-13"
ln -sfn "$wheels/cuda_nvcc/nvvm/libdevice" "$out/nvvm/libdevice"
ln -sfn "$wheels/cuda_runtime/lib/libcudart.so.12" "$out/lib64/libcudart.so"
for f in "$wheels"/cuda_runtime/include/* "$wheels"/cuda_nvcc/include/*; do
  ln -sfn "$f" "$out/include/"
done
# clang's CUDA wrapper header includes cuRAND's, which is not part of this installation.
[ -e "$out/include/curand_mtgp32_kernel.h" ] ||
  echo '/* cuRAND is not part of this installation (clang'"'"'s CUDA wrapper includes this). */' \
    >"$out/include/curand_mtgp32_kernel.h"
