#!/usr/bin/env bash
# Installs Debian packages the test suites need, and never removes or downgrades a package that
# is already installed.
#
#   bash tests/apt-install.sh PACKAGE...
#
# Prints its plan (every package apt will install, with version and suite) before it installs.
# Every apt run is `--no-remove`: where apt could only proceed by removing something, it stops
# with a message instead. One such case is handled: an installed package that came from the
# release's backports suite while apt here does not list that suite (e.g. qemu-utils 10.0 from
# bookworm-backports, which bookworm's qemu-system-x86 7.2 would remove). Then the packages are
# taken from that same suite, through a private apt state under target/apt (the system's
# sources, plus that suite), so /etc/apt is left as it was.
#
# Environment: VMGPU_APT_DRY_RUN=1 prints the plan and installs nothing.
set -euo pipefail
[ $# -gt 0 ] || exit 0
root=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive
apt_opts=()
target_release=()

# The simulation of the install; its output is apt's plan.
simulate() { apt-get "${apt_opts[@]}" "${target_release[@]}" -s -q install --no-install-recommends --no-remove "$@" 2>&1; }
# "Inst pkg [old] (version suite [arch])" lines -> "  pkg version (suite)", plus upgrades shown.
show_plan() {
  sed -nE 's/^Inst ([^ ]+) \[([^]]+)\] \(([^ ]+) ([^[]+) \[.*/  \1 \2 -> \3 (\4) (upgrade)/p;
           s/^Inst ([^ ]+) \(([^ ]+) ([^[]+) \[.*/  \1 \2 (\3)/p' <<<"$1" | sed 's/ )/)/'
}
fail() {
  echo "apt-install: $1" >&2
  [ -z "${2:-}" ] || sed 's/^/  | /' <<<"$2" >&2
  exit 1
}

# Lists older than the packages wanted (or none at all, on a fresh machine): refresh once.
if ! apt-cache show "$@" >/dev/null 2>&1; then
  apt-get update -q >&2 || fail "apt-get update failed"
fi
plan=$(simulate "$@") || {
  # Which installed packages would apt remove, and do they come from a backports suite?
  removed=$(sed -n '/^The following packages will be REMOVED:/,/^[^ ]/ { /^ /p }' <<<"$plan" | xargs -n1 2>/dev/null || true)
  [ -n "$removed" ] || fail "apt cannot install $* without changing installed packages:" "$plan"
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  suite=""
  for p in $removed; do
    v=$(dpkg-query -W -f '${Version}' "$p" 2>/dev/null || true)
    case $v in *~bpo[0-9]*) suite=$codename-backports ;; *)
      fail "installing $* would remove $p $v, which is not from a backports suite; install a matching version by hand" "$plan" ;;
    esac
  done
  [ -n "$codename" ] || fail "no VERSION_CODENAME in /etc/os-release" "$plan"
  # The archive the release's own suite comes from, as the system's sources name it.
  uri=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 2>/dev/null | awk -v r="$codename" '$1 == r { print $2; exit }')
  [ -n "$uri" ] || fail "apt lists no $codename suite to derive $suite from" "$plan"
  echo "apt-install: $(echo $removed) came from $suite, which apt here does not list; taking $* from $suite too" \
    "(private apt state in target/apt; /etc/apt unchanged)"
  state=$root/target/apt
  mkdir -p "$state/sources.list.d" "$state/lists/partial"
  rm -f "$state/sources.list.d/"*
  cp /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources "$state/sources.list.d/" 2>/dev/null || true
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$uri" "$suite" >"$state/sources.list.d/$suite.sources"
  apt_opts=(-o "Dir::Etc::SourceParts=$state/sources.list.d" -o "Dir::State::Lists=$state/lists"
    -o "Dir::Cache::pkgcache=$state/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$state/srcpkgcache.bin")
  target_release=(-t "$suite")
  apt-get "${apt_opts[@]}" update -q >&2 || fail "apt-get update with $suite failed"
  plan=$(simulate "$@") || fail "apt cannot install $* from $suite without removing installed packages:" "$plan"
}
echo "apt-install: will install (nothing is removed):"
show_plan "$plan"
[ "${VMGPU_APT_DRY_RUN:-0}" = 1 ] && { echo "apt-install: dry run, nothing installed"; exit 0; }
apt-get "${apt_opts[@]}" "${target_release[@]}" install -y -q --no-install-recommends --no-remove "$@" >&2 ||
  fail "apt-get install $* failed"
