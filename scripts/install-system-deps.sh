#!/usr/bin/env bash
# Debian packages the harness needs. Idempotent: installs only what is missing.
#   bash scripts/install-system-deps.sh            # build + video essentials, redis-server for the tests
#   bash scripts/install-system-deps.sh --vulkan   # plus the Vulkan toolchain (glslc, headers, lavapipe)
set -euo pipefail

# redis-server: the unit tests start one on 127.0.0.1 as ccache's remote storage (a shared compiler cache)
pkgs=(git ccache ffmpeg binutils g++ patchelf redis-server)
if [[ "${1:-}" == "--vulkan" ]]; then
  pkgs+=(glslc libvulkan-dev spirv-headers mesa-vulkan-drivers vulkan-tools)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "system deps: all present (${pkgs[*]})"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "system deps missing: ${missing[*]} (no apt-get here: install them with your package manager)" >&2
  exit 1
fi
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
echo "system deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
