#!/usr/bin/env bash
# Runs one test command with a private temporary directory of its own (TMPDIR) and an empty
# persistent compile cache inside it (NEURON_CACHE_DIR), and removes both afterwards, however
# the command ends: a test run leaves nothing in /tmp and never reuses kernels of an older build.
# Compiles are waited for (NEURON_INTERIM_LAUNCHES=0) unless the caller set it.
#   tests/run_isolated.sh <command> [args...]
set -uo pipefail
private_tmp=$(mktemp -d "${TMPDIR:-/tmp}/torchneuron-test-XXXXXX") || exit 1
cleanup() {
  chmod -R u+rwX "$private_tmp" 2>/dev/null
  rm -rf "$private_tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
export TMPDIR="$private_tmp"
export NEURON_CACHE_DIR="$private_tmp/cache"
# Tests expect an op's first call to run its kernel: compiles are waited for, unless a test says
# otherwise (tests/device/test_interim_launches.py).
export NEURON_INTERIM_LAUNCHES="${NEURON_INTERIM_LAUNCHES:-0}"
# The adaptive tests exercise recording on small tensors: every call the tracer can defer is
# deferred (NEURON_ADAPTIVE_MIN_BYTES=0), unless a test says otherwise.
export NEURON_ADAPTIVE_MIN_BYTES="${NEURON_ADAPTIVE_MIN_BYTES:-0}"
"$@"
