#!/usr/bin/env bash
# Makes `import torchneuron` work for /usr/bin/python3 from any directory by dropping a .pth
# file that points at the package assembled in the build tree. Idempotent.
set -euo pipefail
package_dir=$(cd "$1" && pwd)
site_dir=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
pth="$site_dir/torchneuron.pth"
if [[ -w "$site_dir" ]] || { [[ ! -e "$site_dir" ]] && mkdir -p "$site_dir" 2>/dev/null; }; then
  [[ -f "$pth" && "$(cat "$pth")" == "$package_dir" ]] || echo "$package_dir" > "$pth"
else
  echo "[setup] cannot write $site_dir; use: export PYTHONPATH=$package_dir" >&2
fi

# The cache CLI: torchneuron-cache on PATH for root (else `python3 -m torchneuron.cache`).
cli=/usr/local/bin/torchneuron-cache
if [[ -w /usr/local/bin ]]; then
  wanted=$'#!/bin/sh\nexec /usr/bin/python3 -m torchneuron.cache "$@"'
  [[ -f "$cli" && "$(cat "$cli")" == "$wanted" ]] || { printf '%s\n' "$wanted" > "$cli"; chmod 755 "$cli"; }
fi
