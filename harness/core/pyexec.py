"""The one way the harness starts a Python child: its own interpreter with ``-P``.

``python -m mod`` and ``python -c code`` put the current directory first on ``sys.path``, so a
``harness/`` folder or a ``yaml.py`` in the directory a user runs from would be imported in place
of the installed one (seen: a worker died with ``cannot import name '__version__' from 'harness'
(unknown location)`` when run from the parent of a checkout). ``-P`` (Python 3.11) leaves it out.
"""

from __future__ import annotations

import sys


def python_argv(*args: str) -> list[str]:
    """``[sys.executable, "-P", *args]``: a child Python that imports nothing from the current directory."""
    return [sys.executable, "-P", *args]
