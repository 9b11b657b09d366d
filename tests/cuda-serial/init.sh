#!/bin/busybox sh
# /init of the cuda-serial suite's guest (see run.sh): loads virtio-pci and virtio-console,
# finds the virtio-serial port named vmgpu.cuda, and runs cuda-serial-guest (a C program
# linked with -lcuda against vmgpu's libcuda.so.1) once per mode, each run a session of its
# own with the host's `vmgpu cuda serve` over the port.
# Checks print `PASS name` / `FAIL name: reason`; run.sh counts them.
/bin/busybox --install -s /bin
# Mounts, pass/fail/finish, the modules of load-order: tests/qemu/init-common.sh.
. /lib/init-common.sh

# The port named vmgpu.cuda as /dev/vportNpM in PORT (init-common.sh).
if ! find_vport vmgpu.cuda; then
  fail port_found "no virtio-serial port named vmgpu.cuda in /sys/class/virtio-ports: $(ls /sys/class/virtio-ports 2>&1 | tr '\n' ' ')"
  finish
fi
pass port_found "/dev/$PORT is the port named $(cat /sys/class/virtio-ports/$PORT/name), $(cat /sys/class/virtio-ports/$PORT/dev)"

export VMGPU_CUDA_SERVER=port:/dev/$PORT
export VMGPU_CUDA_LOG=info
export LD_LIBRARY_PATH=/usr/lib/vmgpu
G=/bin/cuda-serial-guest
if ldd_out=$(/lib64/ld-linux-x86-64.so.2 --list $G 2>&1) && echo "$ldd_out" | grep -q "libcuda.so.1 => /usr/lib/vmgpu/libcuda.so.1"; then
  pass shim_linked "$(echo "$ldd_out" | grep libcuda | sed 's/^[[:space:]]*//; s/ (0x.*//')"
else
  fail shim_linked "$(echo "$ldd_out" | tr '\n' ' ')"
fi

run basics /ptx "$(cat /etc/vmgpu-quota)"
run streams
run jit
run oob /ptx
run leak 3145728
run kill 2097152
rc=$?
if [ "$rc" -eq 137 ]; then
  pass killed_by_sigkill "exit status 137, no Goodbye sent"
else
  fail killed_by_sigkill "exit status $rc, want 137"
fi
run after_kill

# An unmodified nvcc-built runtime-API program (-cudart shared) on vmgpu's libcudart.so.13,
# forwarded over the same port: its own 140 checks of what a GPU gives.
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
finish
