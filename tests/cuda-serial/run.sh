#!/usr/bin/env bash
# Real-kernel CUDA-forwarding suite: boots Debian's kernel under QEMU (TCG) with a
# virtio-serial port named vmgpu.cuda whose host side is a `-chardev socket` connected to
# the host's `vmgpu cuda serve --backend sim`. In the guest, cuda-serial-guest (C, written
# against the stock cuda.h, linked with -lcuda against vmgpu's libcuda.so.1) runs once per
# mode with VMGPU_CUDA_SERVER=port:/dev/vportNpM (see init.sh and guest.c), and so does a
# runtime-API program built by nvcc 13 on vmgpu's libcudart.so.13. The server's
# log is checked on the host: one session per guest process, releases, clean shutdown.
#
# Prints the guest's and the host's PASS/FAIL lines and, as its last line,
# `N passed, M failed`. Exit status 0 iff every check passed. Never skips: a missing
# prerequisite is a failure.
#
# Environment: CUDA_SERIAL_TIMEOUT (s, default 300), CUDA_SERIAL_CACHE (default
#              target/cuda-serial), VFIO_EDU_CACHE (the kernel and busybox .debs, shared
#              with tests/vfio-edu; default target/vfio-edu), VFIO_EDU_KERNEL_PKG,
#              VMGPU_CUDA_INCLUDE (directory of cuda.h; default: the nvidia-cuda-runtime-cu12
#              wheel's), VMGPU_NVCC (nvcc 13; default target/nvcc13, as tests/run-all.sh
#              installs it).
set -euo pipefail

suite_start=$EPOCHREALTIME
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
suite=cuda-serial
# setup_failed, elapsed, the kernel/busybox/initramfs/boot helpers, count_checks.
. "$root/tests/qemu/lib.sh"
cache=${CUDA_SERIAL_CACHE:-$root/target/cuda-serial}
debcache=${VFIO_EDU_CACHE:-$root/target/vfio-edu}
timeout_s=${CUDA_SERIAL_TIMEOUT:-300}
quota=268435456 # --memory: what the guest sees as the device's memory
mkdir -p "$cache"
log=$cache/serial.log
server_log=$cache/server.log
host_log=$cache/host-checks.log
: >"$host_log"

# ---- host packages; the kernel and busybox (in the cache tests/vfio-edu uses) ----
need_qemu
command -v cc >/dev/null || setup_failed "no C compiler (cc)"
unpack_kernel_busybox "$debcache"

# ---- host programs and the guest program ----
# Exactly the build `cargo test --workspace` makes (target/debug/vmgpu for the CLI tests,
# target/debug/deps/libvmgpu_libcuda.so for the shim's): in tests/run-all.sh, after cargo test,
# nothing is compiled (a narrower `cargo build -p` unifies features differently and would
# rebuild the shim). The shim goes into the guest stripped.
build_start=$EPOCHREALTIME
(cd "$root" && cargo test --workspace --locked --no-run -q) >&2 ||
  setup_failed "building the workspace (cargo test --no-run) failed"
shim=$root/target/debug/deps/libvmgpu_libcuda.so
[ -x "$root/target/debug/vmgpu" ] && [ -f "$shim" ] ||
  setup_failed "cargo test --no-run made no target/debug/vmgpu or $shim"
vmgpu=$root/target/debug/vmgpu
include=${VMGPU_CUDA_INCLUDE:-$(python3 -c 'import nvidia.cuda_runtime as m, os; print(os.path.join(list(m.__path__)[0], "include"))' 2>/dev/null || true)}
[ -f "$include/cuda.h" ] ||
  setup_failed "no cuda.h (pip install nvidia-cuda-runtime-cu12, or set VMGPU_CUDA_INCLUDE)"
shimdir=$cache/shim
rm -rf "$shimdir" && mkdir -p "$shimdir"
strip --strip-debug -o "$shimdir/libcuda.so.1" "$shim" ||
  setup_failed "cannot strip the shim"
ln -s libcuda.so.1 "$shimdir/libcuda.so"
cc -std=c11 -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror -I"$include" "$here/guest.c" \
  -L"$shimdir" -lcuda -o "$cache/cuda-serial-guest" || setup_failed "compiling guest.c failed"
# A runtime-API program built by NVIDIA's nvcc 13 (-cudart shared), run in the guest on
# vmgpu's libcudart.so.13 over the same port (tests/run-all.sh installs nvcc from PyPI).
nvcc=${VMGPU_NVCC:-$root/target/nvcc13/py/nvidia/cu13/bin/nvcc}
[ -x "$nvcc" ] || setup_failed "no nvcc 13 at $nvcc (tests/run-all.sh installs it from PyPI; or set VMGPU_NVCC)"
cudart=""
for f in "$root"/target/debug/deps/lib*cudart*.so; do
  readelf -d "$f" 2>/dev/null | grep -q 'SONAME.*\[libcudart\.so\.13\]' && cudart=$f
done
[ -n "$cudart" ] || setup_failed "cargo test --no-run made no library with the soname libcudart.so.13 in target/debug/deps"
strip --strip-debug -o "$shimdir/libcudart.so.13" "$cudart" || setup_failed "cannot strip $cudart"
"$nvcc" -cudart shared -L"$(dirname "$(dirname "$nvcc")")/lib" -gencode arch=compute_80,code=compute_80 \
  "$root/cuda-guest/libcudart/tests/cu/runtime_api.cu" -o "$cache/runtime_api" ||
  setup_failed "nvcc could not build runtime_api.cu"
build_s=$(elapsed "$build_start" "$EPOCHREALTIME")s

# ---- initramfs ----
initrd=$cache/initrd
new_initrd "$initrd" "$here/init.sh" etc ptx usr/lib/vmgpu
cp "$cache/cuda-serial-guest" "$initrd/bin/"
cp "$cache/runtime_api" "$initrd/bin/"
cp "$shimdir/libcuda.so.1" "$shimdir/libcudart.so.13" "$initrd/usr/lib/vmgpu/"
cp "$root/fixtures/ptx/vector_add.nvrtc.ptx" "$root/fixtures/ptx/oob_write.nvrtc.ptx" "$initrd/ptx/"
echo "$quota" >"$initrd/etc/vmgpu-quota"
# The C library and what the shim needs, at the paths the loader resolved on this host
# (the guest runs the same binaries), and the loader itself.
libs=$(LD_LIBRARY_PATH=$shimdir ldd "$cache/cuda-serial-guest" "$shimdir/libcuda.so.1" \
  "$cache/runtime_api" "$shimdir/libcudart.so.13" |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u | grep -v "^$shimdir/" || true)
[ -n "$libs" ] || setup_failed "ldd found no libraries"
for l in $libs; do
  mkdir -p "$initrd$(dirname "$l")"
  cp -L "$l" "$initrd$l"
done
[ -e "$initrd/lib64/ld-linux-x86-64.so.2" ] || setup_failed "the dynamic loader is not among: $libs"
# virtio-pci and virtio-console with their dependencies, in modules.dep order.
queue_module virtio_pci
queue_module virtio_console
install_modules "$initrd"
pack_initrd "$initrd" "$cache/initramfs.gz"

# ---- the server ----
sock=$cache/cuda.sock
rm -f "$sock"
# A long handshake timeout: QEMU connects when the VM starts, and again after each session
# (the service hangs up after Goodbye), long before the next guest process says hello.
RUST_LOG=info "$vmgpu" cuda serve --socket "$sock" --backend sim --memory "$quota" \
  --handshake-timeout 3600 --guest-name qemu >"$server_log" 2>&1 &
server_pid=$!
stop_server() { kill -TERM "$server_pid" 2>/dev/null || true; }
trap stop_server EXIT
for _ in $(seq 100); do
  [ -S "$sock" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
[ -S "$sock" ] || setup_failed "vmgpu cuda serve did not listen on $sock: $(tr '\n' ' ' <"$server_log")"

# ---- boot ----
boot "$log" "$timeout_s" "$cache/initramfs.gz" "" \
  -device virtio-serial-pci,id=vser0 \
  -chardev socket,id=cuda0,path="$sock",reconnect-ms=100 \
  -device virtserialport,bus=vser0.0,chardev=cuda0,name=vmgpu.cuda

# ---- the server's side ----
stop_server
server_rc=0
wait "$server_pid" || server_rc=$?
trap - EXIT
host_pass() { echo "PASS $1${2:+ ($2)}" >>"$host_log"; }
host_fail() { echo "FAIL $1: $2" >>"$host_log"; }
runs=$(grep -c '^[^ ]* GUEST: run ' "$log" || true)
connected=$(grep -cE 'guest qemu#[0-9]+ \(session [0-9]+\): connected' "$server_log" || true)
ended=$(grep -cE 'guest qemu#[0-9]+ \(session [0-9]+\): session ended' "$server_log" || true)
distinct=$(grep -oE 'guest qemu#[0-9]+ \(session [0-9]+\): connected' "$server_log" | sort -u | wc -l || true)
if [ "$runs" -gt 0 ] && [ "$connected" -eq "$runs" ] && [ "$ended" -eq "$runs" ] && [ "$distinct" -eq "$runs" ]; then
  host_pass server_one_session_per_process "$runs guest processes: $connected connections (qemu#1..#$connected), each with its session, all $ended ended"
else
  host_fail server_one_session_per_process "$runs guest processes, $connected sessions connected ($distinct distinct), $ended ended"
fi
if grep -qE 'sticky fault CUDA_ERROR_ILLEGAL_ADDRESS .* caused by request [0-9]+ \(LaunchKernel\)' "$server_log"; then
  host_pass server_sticky_fault_logged "$(grep -oE 'guest qemu#[0-9]+ \(session [0-9]+\): sticky fault CUDA_ERROR_ILLEGAL_ADDRESS' "$server_log" | head -n1), caused by its LaunchKernel"
else
  host_fail server_sticky_fault_logged "no sticky CUDA_ERROR_ILLEGAL_ADDRESS of a LaunchKernel in $server_log"
fi
if line=$(grep -m1 -oE 'guest qemu#[0-9]+ \(session [0-9]+\): goodbye; releasing its 1 context\(s\), 3145728 bytes of device memory and 6 objects' "$server_log"); then
  host_pass server_goodbye_released "$line"
else
  host_fail server_goodbye_released "no 'goodbye; releasing its 1 context(s), 3145728 bytes of device memory and 6 objects' (the cuCtxCreate context, 3 allocations, the module, the stream) in $server_log"
fi
# The killed process sent no Goodbye: the next process's hello ends that session (a protocol
# violation on the old stream), which releases what it held.
if grep -qE 'protocol violation, closing' "$server_log" &&
  line=$(grep -m1 -oE 'guest qemu#[0-9]+ \(session [0-9]+\): session ended; released its 1 context\(s\), 2097152 bytes of device memory and 4 objects' "$server_log"); then
  host_pass server_killed_session_released "$line (closed at the next process's hello)"
else
  host_fail server_killed_session_released "no protocol-violation close releasing 1 context, 2097152 bytes and 4 objects in $server_log"
fi
if [ "$server_rc" -eq 0 ] && [ ! -e "$sock" ] && grep -q 'shutting down: draining guest sessions' "$server_log"; then
  host_pass server_clean_shutdown "SIGTERM: drained, exit 0, socket removed"
else
  host_fail server_clean_shutdown "exit $server_rc, socket $([ -e "$sock" ] && echo left || echo removed)"
fi

# ---- report ----
sed 's/^[^ ]* //' "$log" | grep -E '^(GUEST|PASS |FAIL |vmgpu libcuda: )' || true
echo "cuda-serial: server log ($server_log):"
sed 's/^/  | /' "$server_log"
cat "$host_log"
report=$(sed 's/^[^ ]* //' "$log"; cat "$host_log")
count_checks "$report" "$here/checks.txt"
if ! guest_finished "$log"; then
  tail -n 20 "$log" | sed 's/^[^ ]* /  | /'
  failed=$((failed + 1))
fi
init_at=$(log_time "$log" ' GUEST: init started')
first_run=$(log_time "$log" ' GUEST: run ')
done_at=$(log_time "$log" ' GUEST: done')
boot_s=$([ -n "$init_at" ] && echo "$(elapsed "$boot_start" "$init_at")s" || echo n/a)
run_s=$([ -n "$first_run" ] && [ -n "$done_at" ] && echo "$(elapsed "$first_run" "$done_at")s" || echo n/a)
echo "cuda-serial: kernel $kver; build ${build_s} (cargo, strip, cc), boot to init $boot_s," \
  "guest programs $run_s, QEMU run $(elapsed "$boot_start" "$boot_end")s," \
  "suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
