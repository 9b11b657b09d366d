#!/usr/bin/env bash
# Real-kernel CUDA-forwarding suite: boots Debian's kernel under QEMU (TCG) with a
# virtio-serial port named vmgpu.cuda whose host side is a `-chardev socket` connected to
# the host's `vmgpu cuda serve --backend sim`. In the guest, cuda-serial-guest (C, written
# against the stock cuda.h, linked with -lcuda against vmgpu's libcuda.so.1) runs once per
# mode with VMGPU_CUDA_SERVER=port:/dev/vportNpM (see init.sh and guest.c). The server's
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
#              wheel's).
set -euo pipefail

suite_start=$EPOCHREALTIME
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CUDA_SERIAL_CACHE:-$root/target/cuda-serial}
debcache=${VFIO_EDU_CACHE:-$root/target/vfio-edu}
timeout_s=${CUDA_SERIAL_TIMEOUT:-300}
quota=268435456 # --memory: what the guest sees as the device's memory
mkdir -p "$cache" "$debcache/debs"
log=$cache/serial.log
server_log=$cache/server.log
host_log=$cache/host-checks.log
: >"$host_log"

setup_failed() {
  echo "FAIL setup: $*"
  echo "0 passed, 1 failed"
  exit 1
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---- host packages ----
if ! command -v qemu-system-x86_64 >/dev/null; then
  echo "cuda-serial: qemu-system-x86_64 missing"
  bash "$root/tests/apt-install.sh" qemu-system-x86 ||
    setup_failed "cannot install qemu-system-x86 (needs root and Debian's package archive; see above)"
fi
command -v cc >/dev/null || setup_failed "no C compiler (cc)"
# The kernel and busybox .debs (only unpacked), in the cache tests/vfio-edu uses.
download() { # download PACKAGE -> path of its cached .deb
  local deb
  deb=$(ls "$debcache/debs/$1"_*.deb 2>/dev/null | head -n1 || true)
  if [ -z "$deb" ]; then
    (cd "$debcache/debs" && { apt-get download -q "$1" || { apt-get update -q && apt-get download -q "$1"; }; }) >&2 ||
      return 1
    deb=$(ls "$debcache/debs/$1"_*.deb | head -n1)
  fi
  echo "$deb"
}
kernel_pkg=${VFIO_EDU_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 2>/dev/null |
  awk '/Depends: linux-image-[0-9]/ { print $2; exit }')}
[ -n "$kernel_pkg" ] || { apt-get update -q >&2 && kernel_pkg=$(apt-cache depends linux-image-amd64 |
  awk '/Depends: linux-image-[0-9]/ { print $2; exit }'); } || true
[ -n "$kernel_pkg" ] || setup_failed "cannot resolve linux-image-amd64 to a kernel package"
kernel_deb=$(download "$kernel_pkg") || setup_failed "cannot download $kernel_pkg"
busybox_deb=$(download busybox-static) || setup_failed "cannot download busybox-static"
unpack() { # unpack DEB -> directory it was unpacked into (the same as vfio-edu's)
  local dir
  dir="$debcache/root-$(basename "$1" .deb)"
  [ -f "$dir/.unpacked" ] || { rm -rf "$dir" && dpkg-deb -x "$1" "$dir" && touch "$dir/.unpacked"; } || return 1
  echo "$dir"
}
kernel_root=$(unpack "$kernel_deb") || setup_failed "cannot unpack $kernel_deb"
busybox_root=$(unpack "$busybox_deb") || setup_failed "cannot unpack $busybox_deb"
busybox=$busybox_root/bin/busybox
kver=$(ls "$kernel_root/lib/modules" | head -n1)
kimage=$kernel_root/boot/vmlinuz-$kver
moddir=$kernel_root/lib/modules/$kver
[ -x "$busybox" ] && [ -f "$kimage" ] || setup_failed "kernel or busybox missing after unpacking"
[ -f "$moddir/modules.dep" ] || "$busybox" depmod -b "$kernel_root" "$kver" ||
  setup_failed "depmod failed for $kver"

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
build_s=$(elapsed "$build_start" "$EPOCHREALTIME")s

# ---- initramfs ----
initrd=$cache/initrd
rm -rf "$initrd"
mkdir -p "$initrd"/{bin,dev,proc,sys,run,etc,ptx,usr/lib/vmgpu,lib/modules}
cp "$busybox" "$initrd/bin/busybox"
cp "$cache/cuda-serial-guest" "$initrd/bin/"
cp "$shimdir/libcuda.so.1" "$initrd/usr/lib/vmgpu/"
cp "$root/fixtures/ptx/vector_add.nvrtc.ptx" "$root/fixtures/ptx/oob_write.nvrtc.ptx" "$initrd/ptx/"
echo "$quota" >"$initrd/etc/vmgpu-quota"
cp "$here/init.sh" "$initrd/init"
chmod +x "$initrd/init"
# The C library and what the shim needs, at the paths the loader resolved on this host
# (the guest runs the same binaries), and the loader itself.
libs=$(LD_LIBRARY_PATH=$shimdir ldd "$cache/cuda-serial-guest" "$shimdir/libcuda.so.1" |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u | grep -v "^$shimdir/" || true)
[ -n "$libs" ] || setup_failed "ldd found no libraries"
for l in $libs; do
  mkdir -p "$initrd$(dirname "$l")"
  cp -L "$l" "$initrd$l"
done
[ -e "$initrd/lib64/ld-linux-x86-64.so.2" ] || setup_failed "the dynamic loader is not among: $libs"
# virtio-pci and virtio-console with their dependencies, in modules.dep order.
declare -A queued=()
load_order=()
module_path() {
  awk -F: -v m="${1//-/_}" '{ b = $1; sub(/.*\//, "", b); sub(/\.ko(\..*)?$/, "", b); gsub(/-/, "_", b) }
    b == m { print $1; exit }' "$moddir/modules.dep"
}
queue_module() {
  local rel dep
  rel=$(module_path "$1")
  [ -n "$rel" ] || return 0 # built in
  [ -z "${queued[$rel]:-}" ] || return 0
  queued[$rel]=1
  for dep in $(awk -F': *' -v r="$rel" '$1 == r { print $2 }' "$moddir/modules.dep"); do
    dep=$(basename "$dep")
    queue_module "${dep%%.ko*}"
  done
  load_order+=("$rel")
}
queue_module virtio_pci
queue_module virtio_console
guest_moddir=$initrd/lib/modules/$kver
: >"$initrd/lib/modules/load-order"
for rel in "${load_order[@]}"; do
  mkdir -p "$guest_moddir/$(dirname "$rel")"
  cp "$moddir/$rel" "$guest_moddir/$rel"
  case $rel in
    *.xz) "$busybox" unxz "$guest_moddir/$rel" && rel=${rel%.xz} ;;
    *.zst) zstd -q -d --rm "$guest_moddir/$rel" && rel=${rel%.zst} ;;
  esac
  echo "$kver/$rel" >>"$initrd/lib/modules/load-order"
done
(cd "$initrd" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/initramfs.gz" ||
  setup_failed "building the initramfs failed"

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
echo "cuda-serial: booting $kver under QEMU/TCG (timeout ${timeout_s}s)"
boot_start=$EPOCHREALTIME
set +e
timeout "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -machine q35 -m 512 -smp 2 \
  -nodefaults -display none -no-reboot -serial stdio \
  -device virtio-serial-pci,id=vser0 \
  -chardev socket,id=cuda0,path="$sock",reconnect-ms=100 \
  -device virtserialport,bus=vser0.0,chardev=cuda0,name=vmgpu.cuda \
  -kernel "$kimage" -initrd "$cache/initramfs.gz" \
  -append "console=ttyS0 panic=-1 softlockup_panic=1 loglevel=3" </dev/null 2>&1 |
  while IFS= read -r line; do
    printf '%s %s\n' "$EPOCHREALTIME" "${line%$'\r'}"
  done >"$log"
qemu_rc=${PIPESTATUS[0]}
set -e
boot_end=$EPOCHREALTIME

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
if line=$(grep -m1 -oE 'guest qemu#[0-9]+ \(session [0-9]+\): goodbye; releasing its context, 3145728 bytes of device memory and 5 objects' "$server_log"); then
  host_pass server_goodbye_released "$line"
else
  host_fail server_goodbye_released "no 'goodbye; releasing its context, 3145728 bytes of device memory and 5 objects' (3 allocations, the module, the stream) in $server_log"
fi
# The killed process sent no Goodbye: the next process's hello ends that session (a protocol
# violation on the old stream), which releases what it held.
if grep -qE 'protocol violation, closing' "$server_log" &&
  line=$(grep -m1 -oE 'guest qemu#[0-9]+ \(session [0-9]+\): session ended; released its context, 2097152 bytes of device memory and 3 objects' "$server_log"); then
  host_pass server_killed_session_released "$line (closed at the next process's hello)"
else
  host_fail server_killed_session_released "no protocol-violation close releasing 2097152 bytes and 3 objects in $server_log"
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
passed=$(grep -c '^PASS ' <<<"$report" || true)
failed=$(grep -c '^FAIL ' <<<"$report" || true)
mapfile -t defined < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$here/checks.txt")
declare -A reported=()
while read -r name; do reported[$name]=1; done < <(sed -nE 's/^(PASS|FAIL) ([A-Za-z0-9_]+).*/\2/p' <<<"$report")
declare -A is_defined=()
defined_reported=0
for name in "${defined[@]}"; do
  is_defined[$name]=1
  if [ -n "${reported[$name]:-}" ]; then
    defined_reported=$((defined_reported + 1))
  else
    echo "FAIL $name: never reported"
    failed=$((failed + 1))
  fi
done
for name in "${!reported[@]}"; do
  if [ -z "${is_defined[$name]:-}" ]; then
    echo "FAIL $name: reported, but not a check of tests/cuda-serial/checks.txt"
    failed=$((failed + 1))
  fi
done
echo "cuda-serial: ${#defined[@]} checks defined, $defined_reported of them reported"
if ! grep -q ' GUEST: done' "$log"; then
  echo "FAIL guest_finished: the guest did not finish (qemu exit $qemu_rc, 124 = timeout)"
  sed 's/^[^ ]* //' "$log" | grep -m1 -A45 -E 'BUG: soft lockup|Kernel panic' | sed 's/^/  | /' || true
  tail -n 20 "$log" | sed 's/^[^ ]* /  | /'
  failed=$((failed + 1))
fi
at() { awk -v p="$1" 'index($0, p) { print $1; exit }' "$log"; }
init_at=$(at ' GUEST: init started')
first_run=$(at ' GUEST: run ')
done_at=$(at ' GUEST: done')
boot_s=$([ -n "$init_at" ] && echo "$(elapsed "$boot_start" "$init_at")s" || echo n/a)
run_s=$([ -n "$first_run" ] && [ -n "$done_at" ] && echo "$(elapsed "$first_run" "$done_at")s" || echo n/a)
echo "cuda-serial: kernel $kver; build ${build_s} (cargo, strip, cc), boot to init $boot_s," \
  "guest programs $run_s, QEMU run $(elapsed "$boot_start" "$boot_end")s," \
  "suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
