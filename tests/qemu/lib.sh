# Shared by the real-kernel suites (tests/vfio-edu/run.sh, tests/cuda-serial/run.sh); sourced,
# never run. Debian's kernel and busybox unpacked from cached .debs, an initramfs with modules in
# modules.dep order, the QEMU/TCG boot into a timestamped serial log, and the counting of
# PASS/FAIL lines against a suite's checks.txt.
#
# The caller sets `set -euo pipefail` and, before sourcing, `suite` (its name, for messages).

qemu_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Setup failures are check failures: report, print the summary, fail.
setup_failed() {
  echo "FAIL setup: $*"
  echo "0 passed, 1 failed"
  exit 1
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# log_time LOG TEXT: the timestamp of LOG's first line containing TEXT (empty if none).
log_time() { awk -v p="$2" 'index($0, p) { print $1; exit }' "$1"; }

# Through apt-install.sh: it prints its plan and never removes an installed package.
need_qemu() {
  if ! command -v qemu-system-x86_64 >/dev/null; then
    echo "$suite: qemu-system-x86_64 missing"
    bash "$qemu_lib/../apt-install.sh" qemu-system-x86 ||
      setup_failed "cannot install qemu-system-x86 (needs root and Debian's package archive; see above)"
  fi
}

# unpack_kernel_busybox DEBCACHE: the kernel (VFIO_EDU_KERNEL_PKG, default what
# linux-image-amd64 depends on) and busybox-static, only unpacked, never installed; the .debs
# are cached in DEBCACHE/debs, unpacked next to them. Sets kernel_root, busybox, kver, kimage,
# moddir.
unpack_kernel_busybox() {
  local debcache=$1 kernel_pkg kernel_deb busybox_deb busybox_root
  mkdir -p "$debcache/debs"
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
  unpack() { # unpack DEB -> directory it was unpacked into
    local dir="$debcache/root-$(basename "$1" .deb)"
    [ -f "$dir/.unpacked" ] || { rm -rf "$dir" && dpkg-deb -x "$1" "$dir" && touch "$dir/.unpacked"; } || return 1
    echo "$dir"
  }
  kernel_pkg=${VFIO_EDU_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')}
  [ -n "$kernel_pkg" ] || { apt-get update -q >&2 && kernel_pkg=$(apt-cache depends linux-image-amd64 |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }'); } || true
  [ -n "$kernel_pkg" ] || setup_failed "cannot resolve linux-image-amd64 to a kernel package"
  kernel_deb=$(download "$kernel_pkg") || setup_failed "cannot download $kernel_pkg"
  busybox_deb=$(download busybox-static) || setup_failed "cannot download busybox-static"
  kernel_root=$(unpack "$kernel_deb") || setup_failed "cannot unpack $kernel_deb"
  busybox_root=$(unpack "$busybox_deb") || setup_failed "cannot unpack $busybox_deb"
  busybox=$busybox_root/bin/busybox
  kver=$(ls "$kernel_root/lib/modules" | head -n1)
  kimage=$kernel_root/boot/vmlinuz-$kver
  moddir=$kernel_root/lib/modules/$kver
  [ -x "$busybox" ] && [ -f "$kimage" ] || setup_failed "kernel or busybox missing after unpacking"
  # The .deb ships no modules.dep (depmod runs at install time).
  [ -f "$moddir/modules.dep" ] || "$busybox" depmod -b "$kernel_root" "$kver" ||
    setup_failed "depmod failed for $kver"
}

# new_initrd INITRD INIT DIRS...: an empty INITRD with busybox, INIT as /init, the shared init
# fragment (init-common.sh) as /lib/init-common.sh, and the directories DIRS.
new_initrd() {
  local initrd=$1 init=$2
  shift 2
  rm -rf "$initrd"
  mkdir -p "$initrd"/{bin,dev,proc,sys,run,lib/modules}
  for d in "$@"; do mkdir -p "$initrd/$d"; done
  cp "$busybox" "$initrd/bin/busybox"
  cp "$init" "$initrd/init"
  chmod +x "$initrd/init"
  cp "$qemu_lib/init-common.sh" "$initrd/lib/init-common.sh"
}

# Modules with their dependencies first, in modules.dep order: queue_module NAME adds NAME (and
# what it needs) to load_order, unless built in or already there.
declare -gA queued=()
load_order=()
module_path() { # module name -> path relative to $moddir, empty if built in / absent
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
# install_modules INITRD [PRELOAD]: copies the queued modules (decompressed) into INITRD; the
# first PRELOAD of them (default all) go into /lib/modules/load-order, which init-common.sh loads.
install_modules() {
  local initrd=$1 preload=${2:-${#load_order[@]}} guest_moddir=$1/lib/modules/$kver i rel
  : >"$initrd/lib/modules/load-order"
  for i in "${!load_order[@]}"; do
    rel=${load_order[$i]}
    mkdir -p "$guest_moddir/$(dirname "$rel")"
    cp "$moddir/$rel" "$guest_moddir/$rel"
    case $rel in
      *.xz) "$busybox" unxz "$guest_moddir/$rel" && rel=${rel%.xz} ;;
      *.zst) zstd -q -d --rm "$guest_moddir/$rel" && rel=${rel%.zst} ;;
    esac
    [ "$i" -lt "$preload" ] && echo "$kver/$rel" >>"$initrd/lib/modules/load-order"
  done
  return 0
}
# pack_initrd INITRD OUT: the gzipped cpio of INITRD.
pack_initrd() {
  (cd "$1" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$2" ||
    setup_failed "building the initramfs failed"
}

# boot LOG TIMEOUT INITRAMFS APPEND QEMU-ARGS...: boots $kimage under QEMU/TCG (q35, serial
# console), each serial line into LOG prefixed by the time it arrived. Sets qemu_rc, boot_start,
# boot_end. The guest has 512 MiB; with boot_shared_mem=1 that memory is a shared memfd
# (`-object memory-backend-memfd,share=on`), which a vhost-user device process maps
# (tests/cuda-vsock).
boot() {
  local log=$1 timeout_s=$2 initramfs=$3 append=$4 memargs=(-m 512)
  shift 4
  [ "${boot_shared_mem:-0}" = 1 ] &&
    memargs+=(-object memory-backend-memfd,id=mem,size=512M,share=on -machine memory-backend=mem)
  echo "$suite: booting $kver under QEMU/TCG (timeout ${timeout_s}s)"
  boot_start=$EPOCHREALTIME
  set +e
  timeout "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -machine q35 "${memargs[@]}" -smp 2 \
    -nodefaults -display none -no-reboot -serial stdio "$@" \
    -kernel "$kimage" -initrd "$initramfs" \
    -append "console=ttyS0 $append panic=-1 softlockup_panic=1 loglevel=3" </dev/null 2>&1 |
    while IFS= read -r line; do # timestamped as the lines arrive (no buffering filter in between)
      printf '%s %s\n' "$EPOCHREALTIME" "${line%$'\r'}"
    done >"$log"
  qemu_rc=${PIPESTATUS[0]}
  set -e
  boot_end=$EPOCHREALTIME
}

# count_checks REPORT CHECKS: counts REPORT's `PASS name` / `FAIL name: ...` lines into passed and
# failed. Every check CHECKS defines must have been reported, and only those: a guest that stops
# early, or a check that silently disappears, fails the run. Sets passed, failed, defined,
# defined_reported.
count_checks() {
  local report=$1 checks=$2 name
  passed=$(grep -c '^PASS ' <<<"$report" || true)
  failed=$(grep -c '^FAIL ' <<<"$report" || true)
  mapfile -t defined < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$checks")
  local -A reported=() is_defined=()
  while read -r name; do reported[$name]=1; done < <(sed -nE 's/^(PASS|FAIL) ([A-Za-z0-9_]+).*/\2/p' <<<"$report")
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
      echo "FAIL $name: reported, but not a check of tests/$suite/checks.txt"
      failed=$((failed + 1))
    fi
  done
  echo "$suite: ${#defined[@]} checks defined, $defined_reported of them reported"
}

# guest_finished LOG: fails (prints FAIL guest_finished, with the kernel's stall or panic if
# any, and returns 1) unless the guest's /init printed `GUEST: done`.
guest_finished() {
  grep -q ' GUEST: done' "$1" && return 0
  echo "FAIL guest_finished: the guest did not finish (qemu exit $qemu_rc, 124 = timeout)"
  # A kernel stall panics the guest (softlockup_panic=1): show where it was stuck.
  sed 's/^[^ ]* //' "$1" | grep -m1 -A45 -E 'BUG: soft lockup|Kernel panic' | sed 's/^/  | /' || true
  return 1
}

# ---- the CUDA-forwarding suites (tests/cuda-serial, tests/cuda-vsock) ----

# build_cuda_guest CACHE: the host's `vmgpu` and, for the guest, vmgpu's libcuda.so.1 and
# libcudart.so.13 (stripped, in CACHE/shim), cuda-serial-guest (tests/cuda-serial/guest.c, built
# with -lcuda against the shim) and runtime_api (cuda-guest/libcudart/tests/cu/runtime_api.cu,
# built by nvcc 13), all in CACHE. The host programs are exactly the build `cargo test
# --workspace` makes (target/debug/vmgpu for the CLI tests, target/debug/deps/libvmgpu_libcuda.so
# for the shim's): in tests/run-all.sh, after cargo test, nothing is compiled (a narrower `cargo
# build -p` unifies features differently and would rebuild the shim).
# Sets vmgpu, shimdir, build_s.
build_cuda_guest() {
  local cache=$1 build_start=$EPOCHREALTIME shim include nvcc cudart f
  command -v cc >/dev/null || setup_failed "no C compiler (cc)"
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
  cc -std=c11 -D_DEFAULT_SOURCE -O2 -Wall -Wextra -Werror -I"$include" "$root/tests/cuda-serial/guest.c" \
    -L"$shimdir" -lcuda -o "$cache/cuda-serial-guest" || setup_failed "compiling guest.c failed"
  # A runtime-API program built by NVIDIA's nvcc 13 (-cudart shared), run in the guest on
  # vmgpu's libcudart.so.13 (tests/run-all.sh installs nvcc from PyPI).
  nvcc=${VMGPU_NVCC:-$root/target/nvcc13/py/nvidia/cu13/bin/nvcc}
  [ -x "$nvcc" ] || setup_failed "no nvcc 13 at $nvcc (tests/run-all.sh installs it from PyPI; or set VMGPU_NVCC)"
  # The newest library with that soname (a stale one of an older build may be there too).
  cudart=""
  for f in $(ls -t "$root"/target/debug/deps/lib*cudart*.so 2>/dev/null); do
    readelf -d "$f" 2>/dev/null | grep -q 'SONAME.*\[libcudart\.so\.13\]' && { cudart=$f; break; }
  done
  [ -n "$cudart" ] || setup_failed "cargo test --no-run made no library with the soname libcudart.so.13 in target/debug/deps"
  strip --strip-debug -o "$shimdir/libcudart.so.13" "$cudart" || setup_failed "cannot strip $cudart"
  "$nvcc" -cudart shared -L"$(dirname "$(dirname "$nvcc")")/lib" -gencode arch=compute_80,code=compute_80 \
    "$root/cuda-guest/libcudart/tests/cu/runtime_api.cu" -o "$cache/runtime_api" ||
    setup_failed "nvcc could not build runtime_api.cu"
  build_s=$(elapsed "$build_start" "$EPOCHREALTIME")s
}

# install_cuda_guest INITRD CACHE QUOTA: puts what build_cuda_guest made into INITRD (the programs
# in /bin, the libraries in /usr/lib/vmgpu, two PTX files in /ptx, QUOTA in /etc/vmgpu-quota),
# with the C library and what the shim needs, at the paths the loader resolved on this host (the
# guest runs the same binaries), and the loader itself. new_initrd must have made etc, ptx and
# usr/lib/vmgpu.
install_cuda_guest() {
  local initrd=$1 cache=$2 quota=$3 libs l
  cp "$cache/cuda-serial-guest" "$cache/runtime_api" "$initrd/bin/"
  cp "$shimdir/libcuda.so.1" "$shimdir/libcudart.so.13" "$initrd/usr/lib/vmgpu/"
  cp "$root/fixtures/ptx/vector_add.nvrtc.ptx" "$root/fixtures/ptx/oob_write.nvrtc.ptx" "$initrd/ptx/"
  echo "$quota" >"$initrd/etc/vmgpu-quota"
  libs=$(LD_LIBRARY_PATH=$shimdir ldd "$cache/cuda-serial-guest" "$shimdir/libcuda.so.1" \
    "$cache/runtime_api" "$shimdir/libcudart.so.13" |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u | grep -v "^$shimdir/" || true)
  [ -n "$libs" ] || setup_failed "ldd found no libraries"
  for l in $libs; do
    mkdir -p "$initrd$(dirname "$l")"
    cp -L "$l" "$initrd$l"
  done
  [ -e "$initrd/lib64/ld-linux-x86-64.so.2" ] || setup_failed "the dynamic loader is not among: $libs"
}

# start_cuda_server SOCK LOG ARGS...: `vmgpu cuda serve --socket SOCK --backend sim ARGS...` in
# the background (RUST_LOG=info, its output in LOG), waiting until it listens. Appends its pid to
# server_pids (stop_servers sends them SIGTERM); sets server_pid.
server_pids=()
start_cuda_server() {
  local sock=$1 log=$2
  shift 2
  rm -f "$sock"
  RUST_LOG=info "$vmgpu" cuda serve --socket "$sock" --backend sim "$@" >"$log" 2>&1 &
  server_pid=$!
  server_pids+=("$server_pid")
  for _ in $(seq 100); do
    [ -S "$sock" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -S "$sock" ] || setup_failed "vmgpu cuda serve did not listen on $sock: $(tr '\n' ' ' <"$log")"
}
stop_servers() {
  local p
  for p in "${server_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
}
