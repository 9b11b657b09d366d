#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, checks
# formatting and lints, runs every Rust test, then the real-kernel VFIO suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: lspci is the oracle for the sysfs reader; QEMU and busybox boot
# the guest of the VFIO suite.
missing=()
command -v lspci >/dev/null || missing+=(pciutils)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p vm-passthrough --features iommufd --all-targets --locked -- -D warnings
cargo test --workspace --locked

bash tests/vfio-edu/run.sh
