#!/bin/sh
# Regenerates the `unsupported!` list of src/unsupported.rs: every `cuda*` function
# NVIDIA's libcudart.so.13 exports (nvidia-cuda-runtime 13.0.96, the wheel tests/run-all.sh
# installs) that this library does not implement. Usage: gen-unsupported.sh NVIDIA_LIB OUR_LIB
set -eu
nm -D --defined-only "$1" | awk '$2=="T"{print $3}' | sed 's/@.*//' | grep '^cuda' | sort -u > /tmp/nv.$$
nm -D --defined-only "$2" | awk '$2=="T"{print $3}' | sed 's/@.*//' | sort -u > /tmp/ours.$$
comm -23 /tmp/nv.$$ /tmp/ours.$$ | sed 's/^/    /; s/$/,/'
rm -f /tmp/nv.$$ /tmp/ours.$$
