"""Installs the data the harness reads (engine descriptors, matrix, ABI surfaces, patches).

pyproject.toml holds the project; this file only lists the data trees as ``data_files``
under ``<prefix>/share/harness/``, walked at build time, so a new engine's folders ship
without an edit here. A checkout uses them in place (harness.core.paths.project_root).
"""

from __future__ import annotations

import os

from setuptools import setup

DATA_TREES = ("engines", "matrix", "abi", "patches")


def data_files() -> list[tuple[str, list[str]]]:
    out = []
    for top in DATA_TREES:
        for directory, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            files = sorted(os.path.join(directory, f) for f in filenames)
            if files:
                out.append((os.path.join("share", "harness", directory), files))
    return out


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import data_files()
    setup(data_files=data_files())
