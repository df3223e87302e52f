"""Stand-ins for built artifacts, so unit tests reach the code paths that need one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

BINDING_CORE = Path(__file__).parent / "binding_core.py"


def install_binding(root: Path, variant: str, identity: dict[str, object]) -> Path:
    """A fake binding package ``harness_fake_<variant>`` under ``root`` (put ``root`` on
    ``$HARNESS_BINDING_PATH``): :mod:`tests.fakes.binding_core` as its ``_core``."""
    pkg = root / f"harness_fake_{variant}"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(BINDING_CORE, pkg / "_core.py")
    (pkg / "identity.json").write_text(json.dumps({**identity, "variant": variant}))
    return pkg
