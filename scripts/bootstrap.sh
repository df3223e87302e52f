#!/usr/bin/env bash
# One entry point that works on a fresh machine: system packages, nox, then a nox session.
#   bash scripts/bootstrap.sh tests      # the test suite (what CI runs)
#   bash scripts/bootstrap.sh qualify    # the main job: qualify the default engine pin on this host
set -euo pipefail
cd "$(dirname "$0")/.."
# --cross-aarch64: the test command then also runs every ARM CPU level of the cpu-aarch64 row on the
# tiny model under qemu-user (skipped, with the reason, where the toolchain is missing).
bash scripts/install-system-deps.sh --cross-aarch64
python3 -m pip install --quiet --disable-pip-version-check "nox>=2024.4"
exec python3 -m nox --no-error-on-missing-interpreters -s "$@"
