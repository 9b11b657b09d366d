#!/bin/busybox sh
# /init of the VFIO suite's guest (see run.sh): loads the VFIO and KVM modules, binds QEMU's two
# edu devices (one IOMMU group) to vfio-pci with `vmgpu bind` on the first, runs vfio-edu-guest,
# gives both back with `vmgpu unbind`.
# Checks print `PASS name` / `FAIL name: reason`; run.sh counts them.
/bin/busybox --install -s /bin
# Mounts, pass/fail/finish, the modules of load-order: tests/qemu/init-common.sh.
. /lib/init-common.sh
mkdir -p /run/vmgpu
if [ -c /dev/kvm ]; then
  pass kvm_available "/dev/kvm (nested SVM under TCG)"
else
  fail kvm_available "no /dev/kvm after loading kvm-amd"
fi
if dmesg | grep -q "DMAR: IOMMU enabled"; then
  pass iommu_enabled "$(ls /sys/kernel/iommu_groups | wc -l) groups"
else
  fail iommu_enabled "no 'DMAR: IOMMU enabled' in dmesg"
fi

# Two edu functions behind one PCIe-to-PCI bridge: one IOMMU group (with the bridge).
EDUS=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor"):$(cat "$d/device")" = "0x1234:0x11e8" ] && EDUS="$EDUS ${d##*/}"
done
set -- $EDUS
if [ $# -ne 2 ]; then
  fail edu_present "want 2 devices 1234:11e8 on the PCI bus, found $#:$EDUS"
  finish
fi
BDF=$1
MATE=$2
group_of() { basename "$(readlink "/sys/bus/pci/devices/$1/iommu_group")"; }
GROUP=$(group_of "$BDF")
pass edu_present "$BDF and $MATE"
MEMBERS=$(ls "/sys/kernel/iommu_groups/$GROUP/devices" | tr '\n' ' ')
if [ "$(group_of "$MATE")" = "$GROUP" ] && echo " $MEMBERS" | grep -q " $BDF .*$MATE "; then
  pass edu_pair_one_group "IOMMU group $GROUP: $MEMBERS"
else
  fail edu_pair_one_group "$BDF in group $GROUP, $MATE in group $(group_of "$MATE"); group $GROUP: $MEMBERS"
fi

driver() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }
override() { cat "/sys/bus/pci/devices/$1/driver_override"; }

vfio_pci_loaded() { [ -d /sys/bus/pci/drivers/vfio-pci ]; }
if vfio_pci_loaded; then
  fail vfio_pci_not_preloaded "vfio-pci is loaded before vmgpu bind: the test of loading it is void"
else
  pass vfio_pci_not_preloaded "no /sys/bus/pci/drivers/vfio-pci before vmgpu bind"
fi

# (1) bind to vfio-pci: vmgpu loads the module itself, and binds the group mate along
if out=$(/bin/vmgpu bind "$BDF" --json 2>&1) && [ "$(driver "$BDF")" = vfio-pci ] &&
  [ "$(driver "$MATE")" = vfio-pci ] && vfio_pci_loaded &&
  echo "$out" | grep -q '"loaded_vfio_pci": true'; then
  pass vmgpu_bind "$BDF and $MATE now on $(driver "$MATE"), vfio-pci loaded by vmgpu"
else
  fail vmgpu_bind "exit/drivers '$(driver "$BDF")' '$(driver "$MATE")': $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
fi
# The plan names both functions (the mate as an unclassified "other" endpoint), and so does
# the record of what they had.
flat=$(echo "$out" | tr -d ' \n')
if echo "$flat" | grep -q "{\"address\":\"$BDF\",\"role\":\"target\",\"driver\":null,\"rebind\":true}" &&
  echo "$flat" | grep -q "{\"address\":\"$MATE\",\"role\":\"other\",\"driver\":null,\"rebind\":true}" &&
  echo "$flat" | grep -q "{\"address\":\"$MATE\",\"driver\":null,\"driver_override\":null}"; then
  pass vmgpu_bind_plan "plan: $BDF target, $MATE other; both recorded"
else
  fail vmgpu_bind_plan "$(echo "$flat" | cut -c1-400)"
fi

# (2)-(8) the devices through vm_passthrough::vfio
/bin/vfio-edu-guest "$BDF" "$GROUP" "$MATE"
echo "GUEST: vfio-edu-guest exit $?"
dmesg | grep -iE "vfio|DMAR.*(fault|DMA Write|DMA Read)" | tail -n 8 | sed 's/^/GUEST-DMESG: /'

# (9) back to the original drivers (edu has none in this guest: both end up unbound), through
# the mate's address: unbind finds the record of the bind it was part of
if out=$(/bin/vmgpu unbind "$MATE" --json 2>&1) && [ -z "$(driver "$BDF")" ] && [ -z "$(driver "$MATE")" ] &&
  ! vfio_pci_loaded && [ "$(override "$BDF")" = "(null)" ] && [ "$(override "$MATE")" = "(null)" ]; then
  pass vmgpu_unbind "$BDF and $MATE: no driver and no override, as before; vfio-pci unloaded again"
else
  fail vmgpu_unbind "exit/drivers '$(driver "$BDF")' '$(driver "$MATE")', overrides '$(override "$BDF")' '$(override "$MATE")': $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
fi
finish
