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
suite=vfio-edu
# setup_failed, elapsed, the kernel/busybox/initramfs/boot helpers, count_checks.
. "$root/tests/qemu/lib.sh"
cache=${VFIO_EDU_CACHE:-$root/target/vfio-edu}
timeout_s=${VFIO_EDU_TIMEOUT:-240}
mkdir -p "$cache/debs"

# Everything up to the guest's serial log in $log; VFIO_EDU_REPORT_ONLY=LOG skips it and reports
# on an existing log (to check the counting itself, e.g. on a log with checks cut out).
log=${VFIO_EDU_REPORT_ONLY:-$cache/serial.log}
build_s=n/a qemu_rc=n/a kver=n/a boot_start=$EPOCHREALTIME boot_end=$EPOCHREALTIME
prepare_and_boot() {
  # ---- host packages; the kernel and busybox ----
  need_qemu
  unpack_kernel_busybox "$cache"

  # ---- guest programs: static so the initramfs needs no libraries ----
  build_start=$EPOCHREALTIME
  target=x86_64-unknown-linux-gnu
  # --target keeps RUSTFLAGS off build scripts; the separate target dir keeps the host build intact.
  (cd "$root" && RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked -q \
    -p vmgpu-tests -p vmgpu --bin vfio-edu-guest --bin vmgpu \
    --target "$target" --target-dir target/guest) >&2 || setup_failed "building the guest programs failed"
  bindir=$root/target/guest/$target/release
  build_s=$(elapsed "$build_start" "$EPOCHREALTIME")s

  # ---- initramfs ----
  initrd=$cache/initrd
  new_initrd "$initrd" "$here/init.sh"
  cp "$bindir/vfio-edu-guest" "$bindir/vmgpu" "$initrd/bin/"
  # vfio_iommu_type1 (and what it needs) and KVM are loaded by /init (TCG's `-cpu max` is an AMD
  # CPU with SVM, so kvm_amd gives the guest a /dev/kvm for the KVM VFIO device); vfio-pci is left
  # for `vmgpu bind` to load through modprobe, as it would on a host.
  queue_module vfio_iommu_type1
  queue_module kvm_amd
  preload=${#load_order[@]}
  queue_module vfio-pci
  install_modules "$initrd" "$preload"
  "$busybox" depmod -b "$initrd" "$kver" || setup_failed "depmod failed for the guest's modules"
  pack_initrd "$initrd" "$cache/initramfs.gz"

  # ---- boot ----
  boot "$log" "$timeout_s" "$cache/initramfs.gz" "intel_iommu=on iommu=pt" \
    -device intel-iommu,intremap=on,caching-mode=on \
    -device pcie-pci-bridge,id=br0,bus=pcie.0 -device edu,bus=br0,addr=1 -device edu,bus=br0,addr=2
}
[ -n "${VFIO_EDU_REPORT_ONLY:-}" ] || prepare_and_boot

# ---- report ----
# The guest's own lines, in order (kernel messages left out); then the counts.
sed 's/^[^ ]* //' "$log" | grep -E '^(GUEST|PASS |FAIL |  |vfio-edu: )' || true
count_checks "$(sed 's/^[^ ]* //' "$log")" "$here/checks.txt"
if ! grep -qE ' vfio-edu: [0-9]+ passed, [0-9]+ failed$' "$log"; then
  echo "FAIL guest_reported: vfio-edu-guest never printed its summary (qemu exit $qemu_rc; log $log)"
  tail -n 20 "$log" | sed 's/^[^ ]* /  | /'
  failed=$((failed + 1))
fi
guest_finished "$log" || failed=$((failed + 1))
init_at=$(log_time "$log" ' GUEST: init started')
boot_s=$([ -n "$init_at" ] && [ -z "${VFIO_EDU_REPORT_ONLY:-}" ] && echo "$(elapsed "$boot_start" "$init_at")s" || echo "n/a")
echo "vfio-edu: kernel $kver; guest build ${build_s}, boot to init $boot_s," \
  "QEMU run $(elapsed "$boot_start" "$boot_end")s, suite total $(elapsed "$suite_start" "$EPOCHREALTIME")s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge "${#defined[@]}" ]
