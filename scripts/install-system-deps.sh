#!/usr/bin/env bash
# Debian packages the harness needs. Idempotent: installs only what is missing.
#   bash scripts/install-system-deps.sh            # build + video essentials, redis-server for the tests
#   bash scripts/install-system-deps.sh --vulkan   # plus the Vulkan toolchain (glslc, headers, lavapipe)
#   bash scripts/install-system-deps.sh --cross-aarch64
#                                                  # plus the aarch64 cross toolchain and qemu-user
#                                                  # (the cpu-aarch64 row, run under emulation)
# Flags combine: --vulkan --cross-aarch64.
set -euo pipefail

# redis-server: the unit tests start one on 127.0.0.1 as ccache's remote storage (a shared compiler cache)
# valgrind: the simulation instrument (cachegrind) that decides code-path gates on noisy hosts
# python3-venv: bootstrap.sh keeps nox in a venv (Debian's python3 refuses pip installs, PEP 668)
# bubblewrap: builds of a recipe run in its sandbox (README: Trust model); needs unprivileged user namespaces
pkgs=(git ccache ffmpeg binutils g++ patchelf redis-server valgrind python3-venv bubblewrap)
for flag in "$@"; do
  case "$flag" in
    --vulkan) pkgs+=(glslc libvulkan-dev spirv-headers mesa-vulkan-drivers vulkan-tools) ;;
    # binutils-aarch64-linux-gnu gives aarch64-linux-gnu-readelf/objdump for the ABI and ISA checks.
    # clang-19: the cpu-aarch64 row's compiler (GCC 12 lacks -march=armv9.2-a+sme; see matrix/variants.yaml).
    --cross-aarch64) pkgs+=(g++-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
                            qemu-user-static clang-19) ;;
    *) echo "install-system-deps.sh: unknown flag $flag (expected --vulkan, --cross-aarch64)" >&2; exit 2 ;;
  esac
done

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
