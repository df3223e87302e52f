"""harness: build, check and benchmark native inference engines."""

from __future__ import annotations

from harness import _moved

__version__ = "0.1.0"

# the import paths of modules that moved into packages keep working, with a warning, for one release
_moved.install()
