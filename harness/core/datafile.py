"""YAML data files the project ships or reads (descriptors, matrix rows, vocabularies).

One loader for all of them: libyaml's C parser where PyYAML has it (about 10x faster than the
pure-Python one, which made start-up slow), the safe subset always. Model configs have their
own loader with positions (harness.config.loader).
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """Parse ``text`` with the safe loader (no Python tags)."""
    return yaml.load(text, Loader=_Loader)
