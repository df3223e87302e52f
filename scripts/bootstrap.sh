#!/usr/bin/env bash
# One entry point that works on a fresh machine: system packages, nox in a venv of its own, then a nox session.
#   bash scripts/bootstrap.sh tests      # the test suite (what CI runs)
#   bash scripts/bootstrap.sh qualify    # the main job: qualify the default engine pin on this host
# nox lives in a venv this script makes (default ~/.cache/harness/bootstrap-venv; BOOTSTRAP_VENV=DIR
# to move it), never in the system interpreter: Debian's and Ubuntu's python3 are externally
# managed (PEP 668) and refuse pip there. The venv is made from `python3` (PYTHON=... to pick
# another); nox's sessions then run on that interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
# --cross-aarch64: the test command then also runs every ARM CPU level of the cpu-aarch64 row on the
# tiny model under qemu-user (skipped, with the reason, where the toolchain is missing).
bash scripts/install-system-deps.sh --cross-aarch64

python=${PYTHON:-python3}
venv=${BOOTSTRAP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/harness/bootstrap-venv}
want=$("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')
# made again when its interpreter changed (another python3, an upgraded one) or nox is missing
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.made-from" 2>/dev/null)" != "$want" ]] \
    || ! "$venv/bin/python" -c 'import nox' 2>/dev/null; then
  echo "bootstrap: nox venv at $venv (from $want)"
  "$python" -m venv --clear "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "nox>=2024.4"
  echo "$want" >"$venv/.made-from"
fi
exec "$venv/bin/python" -m nox --no-error-on-missing-interpreters -s "$@"
