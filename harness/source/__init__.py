"""Source: an engine's pinned source, fetched, verified, cached and patched.

- :mod:`.cache`: the content-addressed source cache (download, verify, extract safely, once)
- :mod:`.manifest`: what a cached tree held, and a cheap check that it still does
- :mod:`.patches`: the patch series on a fresh copy of the tree
- :mod:`.index` and :mod:`.mirrors`: where pinned files come from (package indexes, the Debian mirror)
"""

from __future__ import annotations

import importlib

#: What ``harness/source.py`` held (now ``harness.source.cache``): still found here for one release.
_MOVED_NAMES = frozenset({
    "STAMP", "MANIFEST_VERSION", "KEEP_BAD", "KEEP_BAD_S", "MAX_FILE_NAME", "Progress", "notice", "temp_prefix", "temp_dir", "remove", "sweep_stale", "write_json", "read_json", "seal_path", "write_seal", "unsealed", "check_file_name", "archive_path", "legacy_archive_path", "sha256_archive", "download", "prune_bad", "partial_path", "verify", "safe_extract", "Checking", "checking", "current_checking", "ensure_tree", "discard", "extract_once", "make_read_only", "tree_subdir", "refuse_byte_code", "python_env", "single_top_dir",
})


def __getattr__(name: str) -> object:
    if name in _MOVED_NAMES:
        from harness import _moved

        _moved.warn(f"harness.source.{name}", f"harness.source.cache.{name}")
        return getattr(importlib.import_module("harness.source.cache"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
