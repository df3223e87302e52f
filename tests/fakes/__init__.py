"""Stand-ins for built artifacts, so unit tests reach the code paths that need one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

BACKEND_CORE = Path(__file__).parent / "backend_core.py"


def install_backend(root: Path, variant: str, identity: dict[str, object]) -> Path:
    """A fake backend package ``harness_fake_<variant>`` under ``root`` (put ``root`` on
    ``$HARNESS_BACKEND_PATH``): :mod:`tests.fakes.backend_core` as its ``_core``."""
    pkg = root / f"harness_fake_{variant}"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(BACKEND_CORE, pkg / "_core.py")
    (pkg / "identity.json").write_text(json.dumps({**identity, "variant": variant}))
    return pkg
