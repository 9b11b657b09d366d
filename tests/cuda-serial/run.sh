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
# setup_failed, elapsed, the kernel/busybox/initramfs/boot helpers, build_cuda_guest,
# install_cuda_guest, start_cuda_server/stop_servers, count_checks.
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
unpack_kernel_busybox "$debcache"

# ---- host programs and the guest program ----
# vmgpu, the stripped shim and libcudart.so.13, cuda-serial-guest (guest.c, -lcuda) and
# runtime_api (nvcc 13): tests/qemu/lib.sh, shared with tests/cuda-vsock.
build_cuda_guest "$cache"

# ---- initramfs ----
initrd=$cache/initrd
new_initrd "$initrd" "$here/init.sh" etc ptx usr/lib/vmgpu
# The programs, the libraries, the PTX files, the quota, and the C library the programs need.
install_cuda_guest "$initrd" "$cache" "$quota"
# virtio-pci and virtio-console with their dependencies, in modules.dep order.
queue_module virtio_pci
queue_module virtio_console
install_modules "$initrd"
pack_initrd "$initrd" "$cache/initramfs.gz"

# ---- the server ----
sock=$cache/cuda.sock
# A long handshake timeout: QEMU connects when the VM starts, and again after each session
# (the service hangs up after Goodbye), long before the next guest process says hello.
start_cuda_server "$sock" "$server_log" --memory "$quota" --handshake-timeout 3600 --guest-name qemu
trap stop_servers EXIT

# ---- boot ----
boot "$log" "$timeout_s" "$cache/initramfs.gz" "" \
  -device virtio-serial-pci,id=vser0 \
  -chardev socket,id=cuda0,path="$sock",reconnect-ms=100 \
  -device virtserialport,bus=vser0.0,chardev=cuda0,name=vmgpu.cuda

# ---- the server's side ----
stop_servers
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
echo "cuda-serial: kernel $kver; build ${build_s} (cargo, strip, cc, nvcc), boot to init $boot_s," \
  "guest programs $run_s, QEMU run $(elapsed "$boot_start" "$boot_end")s," \
  "suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
