#!/bin/busybox sh
# /init of the VFIO suite's guest (see run.sh): loads the VFIO modules, binds QEMU's edu device
# to vfio-pci with `vmgpu bind`, runs vfio-edu-guest, gives the device back with `vmgpu unbind`.
# Checks print `PASS name` / `FAIL name: reason`; run.sh counts them.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "GUEST: init started, uptime $(cut -d' ' -f1 /proc/uptime)s, kernel $(uname -r)"

pass() { echo "PASS $1${2:+ ($2)}"; }
fail() { echo "FAIL $1: $2"; }
finish() {
  echo "GUEST: done, uptime $(cut -d' ' -f1 /proc/uptime)s"
  poweroff -f
}

for m in $(cat /lib/modules/load-order); do
  insmod "/lib/modules/$m" || echo "GUEST: insmod $m failed"
done
mkdir -p /run/vmgpu
if dmesg | grep -q "DMAR: IOMMU enabled"; then
  pass iommu_enabled "$(ls /sys/kernel/iommu_groups | wc -l) groups"
else
  fail iommu_enabled "no 'DMAR: IOMMU enabled' in dmesg"
fi

BDF=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor"):$(cat "$d/device")" = "0x1234:0x11e8" ] && BDF=${d##*/}
done
if [ -z "$BDF" ]; then
  fail edu_present "no 1234:11e8 device on the PCI bus"
  finish
fi
GROUP=$(basename "$(readlink "/sys/bus/pci/devices/$BDF/iommu_group")")
pass edu_present "$BDF, IOMMU group $GROUP"

driver() { basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null; }

vfio_pci_loaded() { [ -d /sys/bus/pci/drivers/vfio-pci ]; }
if vfio_pci_loaded; then
  fail vfio_pci_not_preloaded "vfio-pci is loaded before vmgpu bind: the test of loading it is void"
fi

# (1) bind to vfio-pci: vmgpu loads the module itself
if out=$(/bin/vmgpu bind "$BDF" --json 2>&1) && [ "$(driver)" = vfio-pci ] && vfio_pci_loaded &&
  echo "$out" | grep -q '"loaded_vfio_pci": true'; then
  pass vmgpu_bind "driver now $(driver), vfio-pci loaded by vmgpu"
else
  fail vmgpu_bind "exit/driver '$(driver)': $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
fi

# (2)-(6) the device through vm_passthrough::vfio
/bin/vfio-edu-guest "$BDF" "$GROUP"
echo "GUEST: vfio-edu-guest exit $?"
dmesg | grep -iE "vfio|DMAR.*(fault|DMA Write|DMA Read)" | tail -n 8 | sed 's/^/GUEST-DMESG: /'

# (7) back to the original driver (edu has none in this guest: it ends up unbound)
if out=$(/bin/vmgpu unbind "$BDF" --json 2>&1) && [ -z "$(driver)" ] && ! vfio_pci_loaded &&
  [ "$(cat "/sys/bus/pci/devices/$BDF/driver_override")" = "(null)" ]; then
  pass vmgpu_unbind "no driver and no override, as before; vfio-pci unloaded again"
else
  fail vmgpu_unbind "exit/driver '$(driver)': $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
fi
finish
