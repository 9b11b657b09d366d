#!/usr/bin/env bash
# Builds what tests/gpu/run.sh runs on a GPU host that has CUDA 13 but no Rust: the
# GPU-gated test binaries (debug, as CI builds them), the release `vmgpu`, libraries and
# examples, and cudarc's lib-test binary; stripped, packed into .gpu/bundle.tar.xz (xz: GPU hosts may lack zstd)
# (ignored by git; carry `.gpu` to the device machine).
#
#   bash tests/gpu/bundle.sh && (device) bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# `cargo ... --message-format=json` -> the executables it built, as "target name<TAB>path".
executables() {
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"] + "\t" + m["executable"])
'
}

{
  cargo test -p cuda-guest --features service --no-run --message-format=json \
    --test accel_native --test native_driver --test native_fault --test service_native \
    --test native_nvrtc --test conformance_native --test isa_goldens
  cargo test -p vmgpu-libcuda --no-run --message-format=json \
    --test conformance_forward_native --test cudarc_lib --test numba
  cargo test -p vmgpu-libcudart --no-run --message-format=json --test nvcc_programs
} | executables > "$stage/tests.tsv"
cargo build --release -p vmgpu -p vmgpu-libcuda -p vmgpu-libcudart
cargo build --release -p cuda-guest --features service \
  --example cuda_worker --example service_bench --example native_bench

# Every file keeps its path under the repository (the binaries find their libraries
# and fixtures by the paths cargo gave them).
files=(target/release/vmgpu target/release/libvmgpu_libcuda.so target/release/libvmgpu_libcudart.so
  target/release/examples/cuda_worker target/release/examples/service_bench
  target/release/examples/native_bench
  target/debug/deps/libvmgpu_libcuda.so target/debug/deps/libvmgpu_libcudart.so)
while IFS=$'\t' read -r name exe; do
  files+=("${exe#"$root"/}")
done < "$stage/tests.tsv"
cudarc=$(ls -t target/cudarc-target/debug/deps/cudarc-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
[ -n "$cudarc" ] && files+=("$cudarc") && echo "cudarc	$root/$cudarc" >> "$stage/tests.tsv"
for f in "${files[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  strip -o "$stage/$f" "$f"
done
sed "s|$root/||" "$stage/tests.tsv" > "$stage/target/gpu-tests.tsv"
mkdir -p .gpu
tar -C "$stage" -cf - target | xz -6 -T0 > .gpu/bundle.tar.xz
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
ls -la .gpu/bundle.tar.xz
cat "$stage/target/gpu-tests.tsv"
