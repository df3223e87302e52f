"""``tarfile`` with extraction filters (PEP 706) on every Python the harness runs on.

CPython has them from 3.11.4 (3.12.0), and some distributions backported them into older
patch releases; Debian 12's python3 (3.11.2) has not. There ``backports.tarfile``, a dependency
for ``python_full_version < "3.11.4"``, is the same module from a later CPython. Which one is used is
decided by what the standard library has (``tarfile.data_filter``), not by its version number.

Every module that extracts with ``filter=`` imports ``tarfile`` from here.
"""

from __future__ import annotations

import tarfile as _stdlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tarfile
elif hasattr(_stdlib, "data_filter"):
    tarfile = _stdlib
else:
    from backports import tarfile

__all__ = ["tarfile"]
