#!/usr/bin/env bash
# Real-kernel VFIO suite: boots Debian's kernel under QEMU (TCG, q35 + emulated Intel IOMMU +
# two of QEMU's `edu` devices behind one PCIe-to-PCI bridge, hence in one IOMMU group) with an
# initramfs holding busybox, `vmgpu` and `vfio-edu-guest`, which drive both edus through
# vfio-pci in one KVM-registered VFIO container (see init.sh and guest.rs).
#
# Prints the guest's PASS/FAIL lines and, as its last line, `N passed, M failed`.
# Exit status 0 iff every check passed. Never skips: a missing prerequisite is a failure.
#
# Environment: VFIO_EDU_TIMEOUT (s, default 240), VFIO_EDU_CACHE (default target/vfio-edu),
#              VFIO_EDU_KERNEL_PKG (default: what linux-image-amd64 depends on),
#              VFIO_EDU_REPORT_ONLY (a serial log to count, without building or booting).
set -euo pipefail

suite_start=$EPOCHREALTIME
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${VFIO_EDU_CACHE:-$root/target/vfio-edu}
timeout_s=${VFIO_EDU_TIMEOUT:-240}
mkdir -p "$cache/debs"

# Setup failures are check failures: report, print the summary, fail.
setup_failed() {
  echo "FAIL setup: $*"
  echo "0 passed, 1 failed"
  exit 1
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Everything up to the guest's serial log in $log; VFIO_EDU_REPORT_ONLY=LOG skips it and reports
# on an existing log (to check the counting itself, e.g. on a log with checks cut out).
log=${VFIO_EDU_REPORT_ONLY:-$cache/serial.log}
build_s=n/a qemu_rc=n/a kver=n/a boot_start=$EPOCHREALTIME boot_end=$EPOCHREALTIME
prepare_and_boot() {
  # ---- host packages ----
  # Through apt-install.sh: it prints its plan and never removes an installed package.
  if ! command -v qemu-system-x86_64 >/dev/null; then
    echo "vfio-edu: qemu-system-x86_64 missing"
    bash "$root/tests/apt-install.sh" qemu-system-x86 ||
      setup_failed "cannot install qemu-system-x86 (needs root and Debian's package archive; see above)"
  fi
  # The kernel and busybox are only unpacked, never installed; the .debs are cached.
  download() { # download PACKAGE -> path of its cached .deb
    local deb
    deb=$(ls "$cache/debs/$1"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then
      (cd "$cache/debs" && { apt-get download -q "$1" || { apt-get update -q && apt-get download -q "$1"; }; }) >&2 ||
        return 1
      deb=$(ls "$cache/debs/$1"_*.deb | head -n1)
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

  unpack() { # unpack DEB -> directory it was unpacked into
    local dir="$cache/root-$(basename "$1" .deb)"
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
  # The .deb ships no modules.dep (depmod runs at install time).
  [ -f "$moddir/modules.dep" ] || "$busybox" depmod -b "$kernel_root" "$kver" ||
    setup_failed "depmod failed for $kver"

  # ---- guest programs: static so the initramfs needs no libraries ----
  build_start=$EPOCHREALTIME
  target=x86_64-unknown-linux-gnu
  # --target keeps RUSTFLAGS off build scripts; the separate target dir keeps the host build intact.
  (cd "$root" && RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked -q \
    -p vmgpu-tests -p vm-passthrough --bin vfio-edu-guest --bin vmgpu \
    --target "$target" --target-dir target/guest) >&2 || setup_failed "building the guest programs failed"
  bindir=$root/target/guest/$target/release
  build_s=$(elapsed "$build_start" "$EPOCHREALTIME")s

  # ---- initramfs ----
  initrd=$cache/initrd
  rm -rf "$initrd"
  mkdir -p "$initrd"/{bin,dev,proc,sys,run,lib/modules}
  cp "$busybox" "$initrd/bin/busybox"
  cp "$bindir/vfio-edu-guest" "$bindir/vmgpu" "$initrd/bin/"
  cp "$here/init.sh" "$initrd/init"
  chmod +x "$initrd/init"
  # Modules with their dependencies first, in modules.dep order.
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
  # vfio_iommu_type1 (and what it needs) and KVM are loaded by /init (TCG's `-cpu max` is an AMD
  # CPU with SVM, so kvm_amd gives the guest a /dev/kvm for the KVM VFIO device); vfio-pci is left
  # for `vmgpu bind` to load through modprobe, as it would on a host.
  queue_module vfio_iommu_type1
  queue_module kvm_amd
  preload=${#load_order[@]}
  queue_module vfio-pci
  guest_moddir=$initrd/lib/modules/$kver
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
  "$busybox" depmod -b "$initrd" "$kver" || setup_failed "depmod failed for the guest's modules"
  (cd "$initrd" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/initramfs.gz" ||
    setup_failed "building the initramfs failed"

  # ---- boot ----
  echo "vfio-edu: booting $kver under QEMU/TCG (timeout ${timeout_s}s)"
  boot_start=$EPOCHREALTIME
  set +e
  timeout "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -machine q35 -m 512 -smp 2 \
    -nodefaults -display none -no-reboot -serial stdio \
    -device intel-iommu,intremap=on,caching-mode=on \
    -device pcie-pci-bridge,id=br0,bus=pcie.0 -device edu,bus=br0,addr=1 -device edu,bus=br0,addr=2 \
    -kernel "$kimage" -initrd "$cache/initramfs.gz" \
    -append "console=ttyS0 intel_iommu=on iommu=pt panic=-1 softlockup_panic=1 loglevel=3" </dev/null 2>&1 |
    while IFS= read -r line; do # timestamped as the lines arrive (no buffering filter in between)
      printf '%s %s\n' "$EPOCHREALTIME" "${line%$'\r'}"
    done >"$log"
  qemu_rc=${PIPESTATUS[0]}
  set -e
  boot_end=$EPOCHREALTIME
}
[ -n "${VFIO_EDU_REPORT_ONLY:-}" ] || prepare_and_boot

# ---- report ----
# The guest's own lines, in order (kernel messages left out); then the counts.
sed 's/^[^ ]* //' "$log" | grep -E '^(GUEST|PASS |FAIL |  |vfio-edu: )' || true
passed=$(grep -c '^[^ ]* PASS ' "$log" || true)
failed=$(grep -c '^[^ ]* FAIL ' "$log" || true)
# Every check the suite defines (checks.txt) must have been reported, and only those: a guest
# that stops early, or a check that silently disappears, fails the run.
mapfile -t defined < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$here/checks.txt")
declare -A reported=()
while read -r name; do reported[$name]=1; done < <(sed -nE 's/^[^ ]* (PASS|FAIL) ([A-Za-z0-9_]+).*/\2/p' "$log")
declare -A is_defined=()
defined_reported=0
for name in "${defined[@]}"; do
  is_defined[$name]=1
  if [ -n "${reported[$name]:-}" ]; then
    defined_reported=$((defined_reported + 1))
  else
    echo "FAIL $name: never reported by the guest"
    failed=$((failed + 1))
  fi
done
for name in "${!reported[@]}"; do
  if [ -z "${is_defined[$name]:-}" ]; then
    echo "FAIL $name: reported, but not a check of tests/vfio-edu/checks.txt"
    failed=$((failed + 1))
  fi
done
echo "vfio-edu: ${#defined[@]} checks defined, $defined_reported of them reported"
if ! grep -qE ' vfio-edu: [0-9]+ passed, [0-9]+ failed$' "$log"; then
  echo "FAIL guest_reported: vfio-edu-guest never printed its summary (qemu exit $qemu_rc; log $log)"
  tail -n 20 "$log" | sed 's/^[^ ]* /  | /'
  failed=$((failed + 1))
fi
if ! grep -q ' GUEST: done' "$log"; then
  echo "FAIL guest_finished: the guest did not finish (qemu exit $qemu_rc, 124 = timeout)"
  # A kernel stall panics the guest (softlockup_panic=1): show where it was stuck.
  sed 's/^[^ ]* //' "$log" | grep -m1 -A45 -E 'BUG: soft lockup|Kernel panic' | sed 's/^/  | /' || true
  failed=$((failed + 1))
fi
init_at=$(awk '/ GUEST: init started/ { print $1; exit }' "$log")
boot_s=$([ -n "$init_at" ] && [ -z "${VFIO_EDU_REPORT_ONLY:-}" ] && echo "$(elapsed "$boot_start" "$init_at")s" || echo "n/a")
echo "vfio-edu: kernel $kver; guest build ${build_s}, boot to init $boot_s," \
  "QEMU run $(elapsed "$boot_start" "$boot_end")s, suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
