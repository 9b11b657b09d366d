# The start shared by the real-kernel suites' /init (tests/vfio-edu/init.sh,
# tests/cuda-serial/init.sh); sourced by them as /lib/init-common.sh (see new_initrd in lib.sh),
# after `/bin/busybox --install -s /bin`. Mounts /proc, /sys and /dev, defines pass/fail (the
# `PASS name` / `FAIL name: reason` lines run.sh counts) and finish, and loads the modules of
# /lib/modules/load-order.
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
