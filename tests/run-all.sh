#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, checks
# formatting and lints, runs every Rust test, then the real-kernel suites (VFIO, and CUDA
# forwarding over virtio-serial and over AF_VSOCK).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: lspci is the oracle for the sysfs reader; QEMU and busybox boot
# the guest of the VFIO suite. apt-install.sh prints what it will install before it does,
# and never removes or downgrades an installed package (see there).
missing=()
command -v lspci >/dev/null || missing+=(pciutils)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# clang-14 and NVRTC are the two compilers the PTX corpus (fixtures/ptx/) comes from: the
# suite recompiles every kernel with both and checks the committed PTX is what they emit.
command -v clang-14 >/dev/null || missing+=(clang-14)
# clang-19 compiles CUDA 12 programs (PyPI's CUDA 12 nvcc has no cudafe++), which run on
# vmgpu's libcudart.so.12 (cuda-guest/libcudart/tests/clang_cuda12.rs).
command -v clang++-19 >/dev/null || missing+=(clang-19)
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]}"
  bash tests/apt-install.sh "${missing[@]}"
fi

# NVRTC (libnvrtc.so.12) and the stock cuda.h come from NVIDIA's PyPI wheels; pinned, so
# the regenerated PTX is byte for byte the committed one.
wheels=(nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79)
python3 -m pip install -q --disable-pip-version-check "${wheels[@]}"
nvrtc_dir=$(python3 -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.join(list(m.__path__)[0], "lib"))')
export VMGPU_LIBNVRTC=$nvrtc_dir/libnvrtc.so.12

# numba-cuda, a real client of libcuda.so.1 (cuda-guest/libcuda/tests/numba.rs), in a
# virtual environment kept under target/ with pip's downloads; every version pinned. Its
# libNVVM comes from nvidia-cuda-nvcc-cu12; no nvJitLink (it would switch numba to SASS).
numba_venv=target/numba-venv
numba_pins=(numba-cuda==0.30.4 numba==0.68.1 llvmlite==0.50.0 numpy==2.4.6
  cuda-bindings==12.9.10 cuda-core==1.2.2 cuda-pathfinder==1.9.1
  nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79
  pytest==9.2.0 filecheck==1.0.6 cffi==2.1.1)
if ! "$numba_venv/bin/python" -c 'import numba.cuda, pytest, filecheck, cffi' 2>/dev/null; then
  python3 -m venv "$numba_venv"
  PIP_CACHE_DIR=target/pip-cache "$numba_venv/bin/pip" install -q --disable-pip-version-check "${numba_pins[@]}"
fi
export VMGPU_NUMBA_PYTHON=$PWD/$numba_venv/bin/python

# cudarc's own lib tests, another real client (cuda-guest/libcuda/tests/cudarc_lib.rs):
# the published crate, pinned, built once under target/ (its sources copied out of
# cargo's registry, where a throwaway package that depends on it fetched them).
cudarc=cudarc-0.19.10
cudarc_features=std,driver,nvrtc,dynamic-loading,cuda-12090
if [ ! -f "target/$cudarc/Cargo.toml" ]; then
  mkdir -p target/cudarc-fetch/src
  printf '[package]\nname = "cudarc-fetch"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\ncudarc = { version = "=0.19.10", default-features = false, features = ["%s"] }\n\n[workspace]\n' \
    "${cudarc_features//,/\", \"}" > target/cudarc-fetch/Cargo.toml
  echo 'fn main() {}' > target/cudarc-fetch/src/main.rs
  cargo fetch --manifest-path target/cudarc-fetch/Cargo.toml
  cp -r "$(cargo metadata --format-version 1 --manifest-path target/cudarc-fetch/Cargo.toml |
    python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc").rsplit("/", 1)[0])')" "target/$cudarc.tmp"
  printf '\n[workspace]\n' >> "target/$cudarc.tmp/Cargo.toml"
  mv "target/$cudarc.tmp" "target/$cudarc"
fi
VMGPU_CUDARC_TESTS=$(cd "target/$cudarc" && CARGO_TARGET_DIR=../cudarc-target cargo test --lib \
  --no-default-features --features "$cudarc_features" --no-run --message-format=json |
  python3 -c 'import json, sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable")][-1])')
export VMGPU_CUDARC_TESTS

# NVIDIA's nvcc 13, from PyPI into one folder under target/ (every wheel pinned), to build
# real runtime-API programs (cuda-guest/libcudart/tests/nvcc_programs.rs) with Debian's gcc.
nvcc_dir=target/nvcc13
nvcc_pins=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
if [ ! -x "$nvcc_dir/py/nvidia/cu13/bin/nvcc" ]; then
  PIP_CACHE_DIR=target/pip-cache python3 -m pip install -q --disable-pip-version-check \
    --target "$nvcc_dir/py" "${nvcc_pins[@]}"
fi
ln -sf libcudart.so.13 "$nvcc_dir/py/nvidia/cu13/lib/libcudart.so"
export VMGPU_NVCC=$PWD/$nvcc_dir/py/nvidia/cu13/bin/nvcc
# rust-vmm's vhost-device-vsock 0.3.0 from crates.io, the vhost-user vsock device of
# tests/cuda-vsock, built once into target/ (its Cargo.lock, --locked).
vdv_root=target/vhost-device-vsock
if ! "$vdv_root/bin/vhost-device-vsock" --version 2>/dev/null | grep -qx 'vhost-device-vsock 0.3.0'; then
  cargo install -q vhost-device-vsock --version 0.3.0 --locked --force --root "$vdv_root"
fi
export VHOST_DEVICE_VSOCK=$PWD/$vdv_root/bin/vhost-device-vsock
# A CUDA 12.9 installation for clang-19 (--cuda-path): the numba venv's cu12 wheels plus
# nvcc 13's fatbinary (cuda-guest/libcudart/tests/cu12/make-cuda-path.sh).
cu12_wheels=$("$numba_venv/bin/python" -c 'import nvidia.cuda_runtime as m, os; print(os.path.dirname(list(m.__path__)[0]))')
sh cuda-guest/libcudart/tests/cu12/make-cuda-path.sh "$PWD/target/cuda12" "$cu12_wheels" \
  "$PWD/$nvcc_dir/py/nvidia/cu13/bin/fatbinary"
export VMGPU_CUDA12_PATH=$PWD/target/cuda12 VMGPU_CLANG_CUDA=clang++-19

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every feature too (vm-passthrough's iommufd and fake, cuda-guest's service).
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# The crate documentation (with its examples, run as doctests below) builds without warnings.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked
# Both suites run even when the first fails, so the summary covers everything.
logs=target/test-logs
mkdir -p "$logs"
status=0
cargo test --workspace --locked 2>&1 | tee "$logs/cargo-test.log" || status=1
# The tests that need the compilers installed above are #[ignore]d in a plain `cargo test`
# (a developer may lack them); here they run, and count as run rather than skipped. Tests
# that need an NVIDIA GPU stay ignored: they are the skipped ones. The real clients'
# figures (cudarc's and numba's pass counts) are printed into the log.
{ cargo test -p cuda-guest --locked --test native_nvrtc --test reference_selftest -- --ignored &&
  cargo test -p vmgpu --locked --test cli_cuda -- --ignored &&
  cargo test -p vmgpu-libcuda --locked --test numba --test cudarc_lib -- --ignored --skip on_a_gpu --nocapture --test-threads 1 &&
  cargo test -p vmgpu-libcudart --locked --test nvcc_programs --test clang_cuda12 -- --ignored; } 2>&1 |
  tee "$logs/compilers.log" || status=1
bash tests/vfio-edu/run.sh 2>&1 | tee "$logs/vfio-edu.log" || status=1
# The CUDA-forwarding suite: a guest's -lcuda program through a virtio-serial port to `vmgpu
# cuda serve` (the same kernel/busybox .debs as vfio-edu; the debug build cargo test made).
bash tests/cuda-serial/run.sh 2>&1 | tee "$logs/cuda-serial.log" || status=1
# The same programs over AF_VSOCK in the guest kernel: QEMU's vhost-user-vsock-pci with
# vhost-device-vsock (installed above) forwarding to `vmgpu cuda serve`'s hybrid-vsock socket.
bash tests/cuda-vsock/run.sh 2>&1 | tee "$logs/cuda-vsock.log" || status=1

# One closing line over all: cargo's per-binary results plus each real-kernel suite's own line.
read -r passed failed ignored < <(
  { sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' "$logs/cargo-test.log"
    # Those ran after all: move them from skipped to passed/failed.
    sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \1 \2/p' "$logs/compilers.log" |
      awk '{ print $1, $2, -($3 + $4) }'
    for suite in vfio-edu cuda-serial cuda-vsock; do
      tail -n 1 "$logs/$suite.log" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1 \2 0/p'
    done
  } | awk '{ p += $1; f += $2; i += $3 } END { print p + 0, f + 0, i + 0 }')
# A suite that broke before counting anything still counts as a failure.
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "total: $passed passed, $failed failed, $ignored skipped"
exit "$status"
