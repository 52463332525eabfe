#!/usr/bin/env bash
# Installs the Debian 12 packages torchneuron needs, only those missing. Idempotent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build
  libtorch-dev python3-torch python3-torchvision libopenblas0-pthread
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libtbb-dev libxxhash-dev librocksdb-dev
  libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev
  python3-pytest python3-matplotlib libjemalloc2 clang-format-19
  libsodium-dev libhiredis-dev redis-server
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "[deps] installing: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "[deps] missing packages and not root: run 'sudo make deps' or install them yourself." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
