#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, on a host with CUDA 13 (nvcc, NVIDIA's libcudart
# and driver) and no Rust: the binaries come from tests/gpu/bundle.sh (.gpu/bundle.tar.zst).
# Each step's log goes to /tmp/vmgpu-gpu, a line per step to its summary.txt; after each
# step the logs are packed into $OUT/logs.tgz (and the goldens into $OUT/goldens.tgz),
# so what ran comes back even if the whole run is stopped. Steps run in order of what
# they prove and stop being started when BUDGET seconds (default 520) have gone.
#
#   bash tests/gpu/run.sh [STEP ...]      # no STEP: all of them
set -u
cd "$(dirname "$0")/../.."
R=$PWD
O=/tmp/vmgpu-gpu
OUT=${OUT:-$O/out}
BUDGET=${BUDGET:-520}
mkdir -p "$O" "$OUT"
# The binaries carry the paths cargo built them at (fixtures, manifest directories).
if [ "$R" != /work/main ]; then mkdir -p /work && ln -sfn "$R" /work/main; fi
tar -xJf .gpu/bundle.tar.xz
mkdir -p target/tmp
bin() { awk -F'\t' -v n="$1" '$1 == n { print $2 }' target/gpu-tests.tsv | tail -1; }

CUDA=${CUDA_HOME:-/usr/local/cuda}
export VMGPU_CUDA_INCLUDE=$CUDA/include
export VMGPU_NVCC=$CUDA/bin/nvcc
export VMGPU_LIBNVRTC=$(ls "$CUDA"/lib64/libnvrtc.so.1[0-9]* 2>/dev/null | head -1)
export VMGPU_NVIDIA_CUDART_DIR=$CUDA/lib64
export VMGPU_CUDA_WORKER=$R/target/release/examples/cuda_worker
export RUST_BACKTRACE=1

step() { # name max_seconds command...
  local name=$1 max=$2
  shift 2
  if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then return; fi
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "$name: skipped (budget spent)" | tee -a "$O/summary.txt"
    return
  fi
  [ "$max" -gt "$((left - 10))" ] && max=$((left - 10))
  local t0=$SECONDS
  timeout -k 5 "$max" "$@" > "$O/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s (limit $max): $(grep -E '^test result|passed|pass$|checks' "$O/$name.log" | tail -1)" | tee -a "$O/summary.txt"
  pack
}
pack() {
  (cd "$O" && tar -czf "$OUT/logs.tgz" ./*.log ./*.txt 2>/dev/null
   [ -d goldens ] && tar -czf "$OUT/goldens.tgz" goldens
   cp summary.txt "$OUT/summary.txt" 2>/dev/null) || true
}
ONLY="$*"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cores: $(nproc)"
  "$VMGPU_NVCC" --version | tail -2
  echo "nvrtc: $VMGPU_LIBNVRTC"
} > "$O/machine.txt" 2>&1
cat "$O/machine.txt"

# 0. The simulator's scaling on every core (issue 16), first, on a quiet machine.
step bench_sim 300 target/release/vmgpu cuda bench --backend sim --threads 1,2,4,8,16
# 1. The ISA goldens (issue 14): every generated case on the GPU.
step goldens 120 env VMGPU_GOLDENS_OUT="$O/goldens" "$(bin isa_goldens)" --ignored --exact record_goldens_on_the_gpu --nocapture

# A service on the GPU for the forwarded runs.
target/release/vmgpu cuda serve --backend native --socket /tmp/native.sock --memory 8589934592 \
  > "$O/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do [ -S /tmp/native.sock ] && break; sleep 0.1; done
export VMGPU_NATIVE_SERVER=unix:/tmp/native.sock

# 2. nvcc programs forwarded to the GPU and on NVIDIA's own runtime (issue 15).
step nvcc_programs 240 "$(bin nvcc_programs)" --ignored --test-threads=4 --nocapture
# 3. cudarc's own tests on NVIDIA's driver and forwarded to the GPU (issue 14).
[ -n "$(bin cudarc)" ] && step cudarc 180 env VMGPU_CUDARC_TESTS="$R/$(bin cudarc)" \
  "$(bin cudarc_lib)" --ignored --exact cudarcs_own_tests_on_a_gpu --nocapture

# 4. The native backend's own suites (issue 13).
for t in native_driver native_fault conformance_native accel_native native_nvrtc; do
  step "$t" 120 "$(bin "$t")" --ignored --test-threads=1
done
step service_native 120 "$(bin service_native)" --ignored --test-threads=1 --nocapture
step conformance_forward_native 180 "$(bin conformance_forward_native)" --ignored --test-threads=1
# 5. Benchmarks: the native backend against raw driver calls (issue 13), a <<<>>> launch
#    through vmgpu's libcudart forwarded to the GPU against libcuda (issue 15), the
#    service on this machine's cores.
step bench_native 90 target/release/vmgpu cuda bench --backend native
step bench_native_json 90 target/release/vmgpu cuda bench --backend native --json
lb=/tmp/launch_bench
"$VMGPU_NVCC" -std=c++17 -cudart shared -L "$CUDA/lib64/stubs" -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80 \
  -lcuda cuda-guest/libcudart/tests/cu/launch_bench.cu -o $lb > "$O/launch_bench_build.log" 2>&1
shim=$(mktemp -d)
cp target/release/libvmgpu_libcuda.so "$shim/libcuda.so.1"
ln -s libcuda.so.1 "$shim/libcuda.so"
cp target/release/libvmgpu_libcudart.so "$shim/libcudart.so.13"
step launch_bench_nvidia 60 env LD_LIBRARY_PATH="$CUDA/lib64" $lb 20000 7
step launch_bench_forwarded 90 env LD_LIBRARY_PATH="$shim" VMGPU_CUDA_SERVER=$VMGPU_NATIVE_SERVER $lb 20000 7
step service_bench 90 target/release/examples/service_bench
kill -TERM $serve 2>/dev/null
wait $serve 2>/dev/null
echo "serve: exit $?" >> "$O/summary.txt"
pack
cat "$O/summary.txt"
