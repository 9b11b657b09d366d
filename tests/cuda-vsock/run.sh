#!/usr/bin/env bash
# Real-kernel CUDA-forwarding suite over AF_VSOCK: boots Debian's kernel under QEMU (TCG) with a
# vhost-user vsock device (`vhost-user-vsock-pci`, the guest's memory a shared memfd) whose
# backend is rust-vmm's vhost-device-vsock 0.3.0 (guest CID 3). It forwards a guest's
# connection to host CID 2 port P to the Unix socket `<uds-path>_P`, where `vmgpu cuda serve
# --backend sim` listens. In the guest, cuda-serial-guest (tests/cuda-serial/guest.c, -lcuda
# against vmgpu's libcuda.so.1) runs once per mode with VMGPU_CUDA_SERVER=vsock:2:PORT (see
# init.sh), and so does the runtime-API program built by nvcc 13 on vmgpu's libcudart.so.13.
# The same VM has the virtio-serial port of tests/cuda-serial, with its own server, so the
# guest measures the round trip and the bandwidth over both transports in one boot. The
# servers' logs are checked on the host: one session per guest process, two at once,
# releases, the half frame's session ended, clean shutdowns.
#
# Prints the guest's and the host's PASS/FAIL lines, the BENCH figures and, as its last line,
# `N passed, M failed`. Exit status 0 iff every check passed. Never skips: a missing
# prerequisite is a failure.
#
# Environment: CUDA_VSOCK_TIMEOUT (s, default 300), CUDA_VSOCK_CACHE (default
#              target/cuda-vsock), CUDA_VSOCK_BENCH_MIB (the benchmark's copies, default
#              64), VHOST_DEVICE_VSOCK (the backend; default
#              target/vhost-device-vsock/bin/vhost-device-vsock, as tests/run-all.sh installs
#              it), and those of tests/cuda-serial/run.sh: VFIO_EDU_CACHE,
#              VFIO_EDU_KERNEL_PKG, VMGPU_CUDA_INCLUDE, VMGPU_NVCC.
set -euo pipefail

suite_start=$EPOCHREALTIME
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
suite=cuda-vsock
# setup_failed, elapsed, the kernel/busybox/initramfs/boot helpers, build_cuda_guest,
# install_cuda_guest, start_cuda_server/stop_servers, count_checks.
. "$root/tests/qemu/lib.sh"
cache=${CUDA_VSOCK_CACHE:-$root/target/cuda-vsock}
debcache=${VFIO_EDU_CACHE:-$root/target/vfio-edu}
timeout_s=${CUDA_VSOCK_TIMEOUT:-300}
vhost_device=${VHOST_DEVICE_VSOCK:-$root/target/vhost-device-vsock/bin/vhost-device-vsock}
quota=268435456 # --memory: what the guest sees as the device's memory
vport=7000      # the host port the guests connect to (vsock:2:7000)
unserved=7001   # a port nobody serves
bench_mib=${CUDA_VSOCK_BENCH_MIB:-64} # the benchmark's copies, in MiB
mkdir -p "$cache"
log=$cache/serial.log
server_log=$cache/server.log
serial_server_log=$cache/server-serial.log
device_log=$cache/vhost-device-vsock.log
host_log=$cache/host-checks.log
: >"$host_log"

# ---- host packages; the kernel and busybox (in the cache tests/vfio-edu uses) ----
need_qemu
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vhost-user-vsock-pci"' ||
  setup_failed "$(qemu-system-x86_64 --version | head -n1) has no vhost-user-vsock-pci device"
[ -x "$vhost_device" ] ||
  setup_failed "no vhost-device-vsock at $vhost_device (tests/run-all.sh installs it: cargo install vhost-device-vsock --version 0.3.0 --locked --root target/vhost-device-vsock; or set VHOST_DEVICE_VSOCK)"
unpack_kernel_busybox "$debcache"

# ---- host programs and the guest program (tests/qemu/lib.sh, shared with tests/cuda-serial) ----
build_cuda_guest "$cache"

# ---- initramfs ----
initrd=$cache/initrd
new_initrd "$initrd" "$here/init.sh" etc ptx usr/lib/vmgpu
install_cuda_guest "$initrd" "$cache" "$quota"
echo "$vport" >"$initrd/etc/vmgpu-vsock-port"
echo "$unserved" >"$initrd/etc/vmgpu-vsock-unserved-port"
echo "$bench_mib" >"$initrd/etc/vmgpu-bench-mib"
# virtio-pci, the virtio vsock transport (vsock, vmw_vsock_virtio_transport_common) and
# virtio-console, with their dependencies, in modules.dep order.
queue_module virtio_pci
queue_module vsock
queue_module vmw_vsock_virtio_transport_common
queue_module vmw_vsock_virtio_transport
queue_module virtio_console
install_modules "$initrd"
pack_initrd "$initrd" "$cache/initramfs.gz"

# ---- the servers and the vsock device ----
uds=$cache/vsock.sock # vhost-device-vsock's --uds-path: host port P is ${uds}_P
vhost_sock=$cache/vhost-vsock.sock
serial_sock=$cache/cuda.sock
rm -f "$uds" "${uds}_"* "$vhost_sock"
start_cuda_server "${uds}_$vport" "$server_log" --memory "$quota" --guest-name vsock
vsock_server=$server_pid
trap 'stop_servers; kill -TERM "${device_pid:-}" 2>/dev/null || true' EXIT
# The virtio-serial port's server (for the comparison): its connection is made by QEMU at
# start and sits idle until the guest's benchmark, hence the long handshake timeout.
start_cuda_server "$serial_sock" "$serial_server_log" --memory "$quota" --handshake-timeout 3600 \
  --guest-name serial
serial_server=$server_pid
RUST_LOG=info "$vhost_device" --guest-cid 3 --socket "$vhost_sock" --uds-path "$uds" \
  >"$device_log" 2>&1 &
device_pid=$!
for _ in $(seq 100); do
  [ -S "$vhost_sock" ] && break
  kill -0 "$device_pid" 2>/dev/null || break
  sleep 0.1
done
[ -S "$vhost_sock" ] ||
  setup_failed "vhost-device-vsock did not listen on $vhost_sock: $(tr '\n' ' ' <"$device_log")"

# ---- boot: the guest's memory shared with vhost-device-vsock ----
boot_shared_mem=1
boot "$log" "$timeout_s" "$cache/initramfs.gz" "" \
  -chardev socket,id=vsock0,path="$vhost_sock" \
  -device vhost-user-vsock-pci,chardev=vsock0 \
  -device virtio-serial-pci,id=vser0 \
  -chardev socket,id=cuda0,path="$serial_sock",reconnect-ms=100 \
  -device virtserialport,bus=vser0.0,chardev=cuda0,name=vmgpu.cuda

# ---- the servers' side ----
stop_servers
server_rc=0 serial_rc=0
wait "$vsock_server" || server_rc=$?
wait "$serial_server" || serial_rc=$?
device_alive=0
kill -0 "$device_pid" 2>/dev/null && device_alive=1
kill -TERM "$device_pid" 2>/dev/null || true
wait "$device_pid" 2>/dev/null || true
trap - EXIT
host_pass() { echo "PASS $1${2:+ ($2)}" >>"$host_log"; }
host_fail() { echo "FAIL $1: $2" >>"$host_log"; }
guest_out=$(sed 's/^[^ ]* //' "$log")
# The vsock server's sessions: basics, streams, jit, oob, leak, pair a, pair b, the killcopy
# child, after_kill, halfframe, after_kill (after bad input), runtime_api, bench vsock. (localcid
# opens no session, unserved reaches no server, bench serial is the other server's.)
want_sessions=13
connected=$(grep -cE 'guest vsock#[0-9]+ \(session [0-9]+\): connected' "$server_log" || true)
ended=$(grep -cE 'guest vsock#[0-9]+ \(session [0-9]+\): session ended' "$server_log" || true)
distinct=$(grep -oE 'guest vsock#[0-9]+ \(session [0-9]+\): connected' "$server_log" | sort -u | wc -l || true)
if [ "$connected" -eq "$want_sessions" ] && [ "$ended" -eq "$want_sessions" ] && [ "$distinct" -eq "$want_sessions" ]; then
  host_pass server_one_session_per_process "$want_sessions guest connections over vsock: $connected sessions (vsock#1..#$connected), each its own, all $ended ended"
else
  host_fail server_one_session_per_process "want $want_sessions: $connected sessions connected ($distinct distinct), $ended ended"
fi
# Sessions open at once, from the order of the log's connects and ends.
most=$(grep -oE '\(session [0-9]+\): (connected|session ended)' "$server_log" |
  awk '/connected/ { n++; if (n > m) m = n } /session ended/ { n-- } END { print m + 0 }')
if [ "$most" -eq 2 ]; then
  host_pass server_two_sessions_at_once "at most $most sessions open at once (the pair), the rest one at a time"
else
  host_fail server_two_sessions_at_once "at most $most sessions open at once, want 2 (the pair)"
fi
if line=$(grep -m1 -oE 'guest vsock#[0-9]+ \(session [0-9]+\): sticky fault CUDA_ERROR_ILLEGAL_ADDRESS .* caused by request [0-9]+ \(LaunchKernel\)' "$server_log"); then
  host_pass server_sticky_fault_logged "$line"
else
  host_fail server_sticky_fault_logged "no sticky CUDA_ERROR_ILLEGAL_ADDRESS of a LaunchKernel in $server_log"
fi
if line=$(grep -m1 -oE 'guest vsock#[0-9]+ \(session [0-9]+\): goodbye; releasing its 1 context\(s\), 3145728 bytes of device memory and 6 objects' "$server_log"); then
  host_pass server_goodbye_released "$line"
else
  host_fail server_goodbye_released "no 'goodbye; releasing its 1 context(s), 3145728 bytes of device memory and 6 objects' (the cuCtxCreate context, 3 allocations, the module, the stream) in $server_log"
fi
# The killed process sent no Goodbye: over vsock its connection closes with it, and the
# session ends at once, releasing what it held (no protocol violation, unlike virtio-serial).
if line=$(grep -m1 -oE 'guest vsock#[0-9]+ \(session [0-9]+\): session ended; released its 1 context\(s\), 33554432 bytes of device memory and 2 objects' "$server_log"); then
  host_pass server_killed_session_released "$line (its connection closed by the guest kernel)"
else
  host_fail server_killed_session_released "no 'session ended; released its 1 context(s), 33554432 bytes of device memory and 2 objects' in $server_log"
fi
# The half frame's session (its number printed by the guest) ended, and the server went on.
hf=$(sed -nE 's/^PASS half_frame_close \(session ([0-9]+):.*/\1/p' <<<"$guest_out")
# (The log after that line is read whole first: `grep -q` leaving a pipe early fails the
# pipeline under pipefail.)
after_hf=$(grep -A1000 -E "\\(session ${hf:-none}\\): session ended" "$server_log" || true)
if [ -n "$hf" ] && [ -n "$after_hf" ] && grep -qE '\(session [0-9]+\): connected' <<<"$after_hf"; then
  host_pass server_half_frame_session_ended "session $hf: $(grep -m1 -oE "\\(session $hf\\): session ended[^;]*" "$server_log"), later sessions served"
else
  host_fail server_half_frame_session_ended "session '${hf:-?}' did not end, or no session came after it, in $server_log"
fi
# The virtio-serial port's one session is the benchmark's, which destroys its context before
# exiting: its Goodbye finds nothing to release (no "goodbye; releasing" line), and the session
# ends with nothing left ("session ended" alone).
serial_sessions=$(grep -cE 'guest serial#[0-9]+ \(session [0-9]+\): connected' "$serial_server_log" || true)
if [ "$serial_sessions" -eq 1 ] &&
  line=$(grep -m1 -oE 'guest serial#1 \(session 1\): session ended$' "$serial_server_log"); then
  host_pass serial_server_one_session "the virtio-serial port's server: one session (the benchmark's), '$line', nothing left to release"
else
  host_fail serial_server_one_session "want 1 session that ends holding nothing: $serial_sessions connected; $(grep -E 'session ended' "$serial_server_log" | sed 's/^.*\] //' | tr '\n' ' ')in $serial_server_log"
fi
if [ "$server_rc" -eq 0 ] && [ "$serial_rc" -eq 0 ] && [ ! -e "${uds}_$vport" ] && [ ! -e "$serial_sock" ] &&
  grep -q 'shutting down: draining guest sessions' "$server_log"; then
  host_pass server_clean_shutdown "SIGTERM to both servers: exit 0 and 0, sockets removed"
else
  host_fail server_clean_shutdown "exits $server_rc and $serial_rc"
fi
if [ "$device_alive" -eq 1 ]; then
  host_pass vhost_device_served "vhost-device-vsock $("$vhost_device" --version | awk '{ print $2 }') still running after the guest powered off"
else
  host_fail vhost_device_served "vhost-device-vsock exited before the end: $(tail -n 5 "$device_log" | tr '\n' ' ')"
fi

# ---- report ----
grep -E '^(GUEST|PASS |FAIL |BENCH |vmgpu libcuda: )' <<<"$guest_out" || true
echo "cuda-vsock: the vsock server's log ($server_log):"
sed 's/^/  | /' "$server_log"
echo "cuda-vsock: the virtio-serial server's log ($serial_server_log):"
sed 's/^/  | /' "$serial_server_log"
echo "cuda-vsock: vhost-device-vsock's log ($device_log), last 20 lines:"
tail -n 20 "$device_log" | sed 's/^/  | /'
cat "$host_log"
report=$(cat <<<"$guest_out"; cat "$host_log")
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
grep -E '^BENCH ' <<<"$guest_out" | sed 's/^/cuda-vsock: /' || true
echo "cuda-vsock: kernel $kver; build ${build_s} (cargo, strip, cc, nvcc), boot to init $boot_s," \
  "guest programs $run_s, QEMU run $(elapsed "$boot_start" "$boot_end")s," \
  "suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
