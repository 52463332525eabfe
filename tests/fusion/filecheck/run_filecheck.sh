#!/bin/sh
# Runs one FileCheck test: the file's "// RUN-ARGS:" line holds the kernel tool's arguments;
# with a "// RUN-MLIR-OPT" line the tool's MLIR goes through mlir-opt-19 with the engine's own
# lowering pipeline first (so the pipeline is checked as mlir-opt runs it).
# usage: run_filecheck.sh <neuron_kernel_mlir> <FileCheck> <mlir-opt> <test.mlir>
set -eu
tool=$1 filecheck=$2 mlir_opt=$3 test=$4
args=$(sed -n 's|^// RUN-ARGS: ||p' "$test")
[ -n "$args" ] || { echo "$test has no // RUN-ARGS: line" >&2; exit 2; }
if grep -q '^// RUN-MLIR-OPT' "$test"; then
  # shellcheck disable=SC2086
  "$tool" $args | "$mlir_opt" --pass-pipeline="$("$tool" pipeline)" | "$filecheck" "$test"
else
  # shellcheck disable=SC2086
  "$tool" $args | "$filecheck" "$test"
fi
