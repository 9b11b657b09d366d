#!/bin/busybox sh
# /init of the cuda-vsock suite's guest (see run.sh): loads virtio-pci, the vsock modules and
# virtio-console, and runs cuda-serial-guest (tests/cuda-serial/guest.c, linked with -lcuda
# against vmgpu's libcuda.so.1) once per mode over VMGPU_CUDA_SERVER=vsock:2:PORT, each run a
# connection and a session of its own; then the same benchmark over vsock and over the
# virtio-serial port named vmgpu.cuda, in this boot.
# Checks print `PASS name` / `FAIL name: reason`; run.sh counts them.
/bin/busybox --install -s /bin
# Mounts, pass/fail/finish, find_vport, run, the modules of load-order: tests/qemu/init-common.sh.
. /lib/init-common.sh

VPORT=$(cat /etc/vmgpu-vsock-port)
UNSERVED=$(cat /etc/vmgpu-vsock-unserved-port)
BENCH_MIB=$(cat /etc/vmgpu-bench-mib)
if [ -d /sys/module/vmw_vsock_virtio_transport ] && [ -c /dev/vsock ]; then
  pass vsock_transport "vmw_vsock_virtio_transport loaded, /dev/vsock $(cat /sys/class/misc/vsock/dev 2>/dev/null)"
else
  fail vsock_transport "modules: $(cut -d' ' -f1 /proc/modules | tr '\n' ' '); /dev/vsock $([ -c /dev/vsock ] && echo present || echo missing)"
  finish
fi

export VMGPU_CUDA_SERVER=vsock:2:$VPORT
export VMGPU_CUDA_LOG=info
export LD_LIBRARY_PATH=/usr/lib/vmgpu
G=/bin/cuda-serial-guest
if ldd_out=$(/lib64/ld-linux-x86-64.so.2 --list $G 2>&1) && echo "$ldd_out" | grep -q "libcuda.so.1 => /usr/lib/vmgpu/libcuda.so.1"; then
  pass shim_linked "$(echo "$ldd_out" | grep libcuda | sed 's/^[[:space:]]*//; s/ (0x.*//')"
else
  fail shim_linked "$(echo "$ldd_out" | tr '\n' ' ')"
fi

run localcid
run basics /ptx "$(cat /etc/vmgpu-quota)"
run streams
run jit
run oob /ptx
run leak 3145728

# Two processes started together, each its own connection and session; each waits until the
# other holds its memory before checking its own.
echo "GUEST: run pair a b & pair b a (at once)"
$G pair a b 1048576 &
pa=$!
$G pair b a 2097152 &
pb=$!
wait $pa
ra=$?
wait $pb
rb=$?
echo "GUEST: pair exit $ra and $rb, uptime $(cut -d' ' -f1 /proc/uptime)s"

# A process SIGKILLed while a 32 MiB copy is on its way to the host; then a fresh one.
run killcopy 33554432
run after_kill

# Bad input: an address nobody serves (at the shim's default log level, what a user sees), and a
# connection that ends in the middle of a frame.
(export VMGPU_CUDA_SERVER=vsock:2:$UNSERVED; unset VMGPU_CUDA_LOG; run unserved)
run halfframe 2 "$VPORT"
run after_kill session_after_bad_input

# An unmodified nvcc-built runtime-API program (-cudart shared) on vmgpu's libcudart.so.13,
# forwarded over vsock: its own 140 checks of what a GPU gives.
echo "GUEST: run runtime_api (nvcc 13, libcudart.so.13)"
if ldd_out=$(/lib64/ld-linux-x86-64.so.2 --list /bin/runtime_api 2>&1) && echo "$ldd_out" | grep -q "libcudart.so.13 => /usr/lib/vmgpu/libcudart.so.13"; then
  pass cudart_linked "$(echo "$ldd_out" | grep libcudart | sed 's/^[[:space:]]*//; s/ (0x.*//')"
else
  fail cudart_linked "$(echo "$ldd_out" | tr '\n' ' ')"
fi
rt_out=$(/bin/runtime_api 2>&1)
rc=$?
echo "$rt_out" | grep -E '^FAIL|checks,'
summary=$(echo "$rt_out" | grep -E '^runtime_api: [0-9]+ checks, [0-9]+ failed$')
if [ "$rc" -eq 0 ] && [ "$summary" = "runtime_api: 140 checks, 0 failed" ]; then
  pass nvcc_runtime_api "$summary, exit 0"
else
  fail nvcc_runtime_api "exit $rc, '${summary:-no summary line}'; $(echo "$rt_out" | tail -n 5 | tr '\n' ' ')"
fi

# The same figures over both transports, in this boot: vsock, then the virtio-serial port.
run bench vsock "$BENCH_MIB"
if find_vport vmgpu.cuda; then
  pass serial_port_found "/dev/$PORT is the port named vmgpu.cuda, $(cat /sys/class/virtio-ports/$PORT/dev)"
  (export VMGPU_CUDA_SERVER=port:/dev/$PORT; run bench serial "$BENCH_MIB")
else
  fail serial_port_found "no virtio-serial port named vmgpu.cuda in /sys/class/virtio-ports: $(ls /sys/class/virtio-ports 2>&1 | tr '\n' ' ')"
fi
finish
