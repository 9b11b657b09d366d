#!/bin/sh
# Builds vmgpu's libcuda for guests and installs it into DIR as libcuda.so.1 with a
# libcuda.so link beside it (the names the loader and `cc -lcuda` look for).
#
#   cuda-guest/libcuda/install.sh [--release] DIR
#
# Then: cc prog.c -I<cuda.h dir> -LDIR -lcuda && LD_LIBRARY_PATH=DIR ./a.out
set -eu
profile=debug
flag=
if [ "${1:-}" = "--release" ]; then
    profile=release
    flag=--release
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 [--release] DIR" >&2
    exit 2
fi
dir=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cargo build $flag --manifest-path "$root/Cargo.toml" -p vmgpu-libcuda
target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$dir"
cp "$target/$profile/libvmgpu_libcuda.so" "$dir/libcuda.so.1.tmp"
mv -f "$dir/libcuda.so.1.tmp" "$dir/libcuda.so.1"
ln -sfn libcuda.so.1 "$dir/libcuda.so"
echo "installed $dir/libcuda.so.1 (and libcuda.so)"
