#!/usr/bin/env bash
# The codegen fingerprint (cmake/codegen_fingerprint.cmake) depends on the codegen sources'
# contents only: the same sources in another directory give the same value; one changed byte in
# a lowering, the kernel ABI or the device target gives another; a file outside codegen changes
# nothing.
#   codegen_fingerprint_test.sh <source root>
set -euo pipefail
root=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/neuron-fingerprint-XXXXXX")
trap 'rm -rf "$work"' EXIT

fingerprint() {  # <source root> -> the fingerprint it yields
  cmake -DROOT="$1" -DOUTPUT="$work/out.cpp" -P "$root/cmake/codegen_fingerprint.cmake"
  sed -n 's/.*kCodegenFingerprint\[\] = "\([0-9a-f]*\)";.*/\1/p' "$work/out.cpp"
}
copy_of_sources() {  # <destination>
  mkdir -p "$1/src"
  cp -r "$root/src/fusion" "$root/src/launcher" "$root/src/target" "$root/src/device" "$1/src/"
}

original=$(fingerprint "$root")
[[ ${#original} -eq 32 ]] || { echo "FAIL: fingerprint '$original' is not 32 hex digits"; exit 1; }

copy_of_sources "$work/elsewhere/deeper"
moved=$(fingerprint "$work/elsewhere/deeper")
[[ "$moved" == "$original" ]] || { echo "FAIL: same sources elsewhere: $moved != $original"; exit 1; }

echo "// unrelated" >> "$work/elsewhere/deeper/src/device/device.cpp"
[[ $(fingerprint "$work/elsewhere/deeper") == "$original" ]] ||
  { echo "FAIL: a device source changed the codegen fingerprint"; exit 1; }

for changed in src/fusion/binary_ops.cpp src/launcher/kernel_abi.h src/target/host_cpu_target.cpp; do
  rm -rf "$work/changed" && copy_of_sources "$work/changed"
  echo " " >> "$work/changed/$changed"
  [[ $(fingerprint "$work/changed") != "$original" ]] ||
    { echo "FAIL: a changed $changed kept the fingerprint"; exit 1; }
done
echo "codegen fingerprint: content-only, covers the lowerings, the ABI and the target"
