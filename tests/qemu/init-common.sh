# The start shared by the real-kernel suites' /init (tests/vfio-edu/init.sh,
# tests/cuda-serial/init.sh, tests/cuda-vsock/init.sh); sourced by them as /lib/init-common.sh
# (see new_initrd in lib.sh), after `/bin/busybox --install -s /bin`. Mounts /proc, /sys and
# /dev, defines pass/fail (the `PASS name` / `FAIL name: reason` lines run.sh counts), finish,
# find_vport and run, and loads the modules of /lib/modules/load-order.
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

# find_vport NAME: the virtio-serial port named NAME, as PORT (vportNpM), with its /dev node; fails
# if there is none after 5 s. The port's name is in sysfs; without udev there is no
# /dev/virtio-ports/NAME link, and the node itself may be missing: it is made from the dev file's
# major:minor.
find_vport() {
  PORT=""
  for i in 1 2 3 4 5 6 7 8 9 10; do
    for p in /sys/class/virtio-ports/*; do
      [ -f "$p/name" ] && [ "$(cat "$p/name")" = "$1" ] && PORT=${p##*/}
    done
    [ -n "$PORT" ] && break
    sleep 0.5
  done
  [ -n "$PORT" ] || return 1
  if [ ! -c "/dev/$PORT" ]; then
    IFS=: read -r MAJ MIN <"/sys/class/virtio-ports/$PORT/dev"
    mknod "/dev/$PORT" c "$MAJ" "$MIN"
    echo "GUEST: made /dev/$PORT ($MAJ:$MIN)"
  fi
}

# run MODE ARGS...: one process of the program $G (one session with the host), framed by
# `GUEST: run ...` and `GUEST: MODE exit N` lines; returns its exit status.
run() {
  echo "GUEST: run $*"
  $G "$@"
  rc=$?
  echo "GUEST: $1 exit $rc, uptime $(cut -d' ' -f1 /proc/uptime)s"
  return $rc
}

for m in $(cat /lib/modules/load-order); do
  insmod "/lib/modules/$m" || echo "GUEST: insmod $m failed"
done
