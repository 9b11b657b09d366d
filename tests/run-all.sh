#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, checks
# formatting and lints, runs every Rust test, then the real-kernel VFIO suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: lspci is the oracle for the sysfs reader; QEMU and busybox boot
# the guest of the VFIO suite. apt-install.sh prints what it will install before it does,
# and never removes or downgrades an installed package (see there).
missing=()
command -v lspci >/dev/null || missing+=(pciutils)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]}"
  bash tests/apt-install.sh "${missing[@]}"
fi

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p vm-passthrough --features iommufd --all-targets --locked -- -D warnings
# Both suites run even when the first fails, so the summary covers everything.
logs=target/test-logs
mkdir -p "$logs"
status=0
cargo test --workspace --locked 2>&1 | tee "$logs/cargo-test.log" || status=1
bash tests/vfio-edu/run.sh 2>&1 | tee "$logs/vfio-edu.log" || status=1

# One closing line over both: cargo's per-binary results plus the VFIO suite's own line.
read -r passed failed ignored < <(
  { sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' "$logs/cargo-test.log"
    tail -n 1 "$logs/vfio-edu.log" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1 \2 0/p'
  } | awk '{ p += $1; f += $2; i += $3 } END { print p + 0, f + 0, i + 0 }')
# A suite that broke before counting anything still counts as a failure.
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "total: $passed passed, $failed failed, $ignored skipped"
exit "$status"
