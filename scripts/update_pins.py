"""Move an engine's pypi-sdist pin: look the version up on the index, compare, then write.

    python scripts/update_pins.py llamacpp 0.3.37 [--build N --commit SHA]

The index is the one pip is configured with (PIP_INDEX_URL, pip.conf; see harness/source/index.py).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

from harness.core.errors import HarnessError
from harness.source.index import find_sdist

ROOT = Path(__file__).resolve().parent.parent


def index_entry(package: str, version: str) -> tuple[str, str]:
    """``(filename, sha256)`` of the sdist of ``package==version`` on the configured indexes."""
    try:
        found = find_sdist(package, version)
    except HarnessError as e:
        sys.exit(f"{package} {version}: {e}")
    return found.filename, str(found.sha256)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("engine")
    ap.add_argument("version")
    ap.add_argument("--build", type=int, help="upstream build number this version vendors")
    ap.add_argument("--commit", help="upstream commit this version vendors")
    args = ap.parse_args()
    path = ROOT / "engines" / args.engine / "engine.yaml"
    text = path.read_text()
    package = re.search(r"^\s+package:\s*(\S+)", text, re.M)
    if not package:
        sys.exit(f"{path}: no source.package")
    filename, sha = index_entry(package.group(1), args.version)
    new = re.sub(r'(^\s+version:\s*)"?[^"\n]+"?', rf'\g<1>"{args.version}"', text, count=1, flags=re.M)
    new = re.sub(r"(^\s+filename:\s*)\S+", rf"\g<1>{filename}", new, count=1, flags=re.M)
    new = re.sub(r"(^\s+sha256:\s*)[0-9a-f]{64}", rf"\g<1>{sha}", new, count=1, flags=re.M)
    if args.build:
        new = re.sub(r"(^\s+build:\s*)\d+", rf"\g<1>{args.build}", new, count=1, flags=re.M)
    if args.commit:
        new = re.sub(r"(^\s+commit:\s*)[0-9a-f]+", rf"\g<1>{args.commit}", new, count=1, flags=re.M)
    if new == text:
        print(f"{args.engine}: already pinned to {args.version} ({sha}); nothing to write")
        return 0
    new = re.sub(r'(^pinned_on:\s*)"[^"]*"', rf'\g<1>"{datetime.date.today().isoformat()}"', new, count=1, flags=re.M)
    path.write_text(new)
    print(f"{args.engine}: pinned to {args.version} ({filename}, sha256 {sha})")
    if not (args.build and args.commit):
        print("remember: set upstream.build and upstream.commit to what this version vendors")
    print("next: harness patch --check", args.engine, "&& harness abi check", args.engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
