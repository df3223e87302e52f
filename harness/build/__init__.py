"""Build: a patched tree and a matrix row become a relocatable, stamped artifact.

- :mod:`.pipeline`: the one entry point (fetch -> patch -> ABI check -> build) and the rows an engine builds
- :mod:`.matrix`: the variant rows of ``matrix/*.yaml`` and what an engine supports
- :mod:`.cmake`: configure and build one row with CMake (:mod:`.cmake_fileapi` finds what it built)
- :mod:`.ccache`: the compiler cache; :mod:`.artifacts`: installed artifacts; :mod:`.recipes`: a pin's recipe from git history
"""

from __future__ import annotations

import importlib

#: What ``harness/build.py`` held (now ``harness.build.cmake``): still found here for one release.
_MOVED_NAMES = frozenset({
    "BUILD_STAMP", "MANIFEST", "MANIFEST_VERSION", "BuildResult", "jobs", "toolchain_id", "effective_defines", "build_key", "row_targets", "row_bins", "stamp_key", "build_dir_for", "artifact_dir", "init_cache_text", "file_hashes", "smoke_cpu_level", "read_manifest", "build", "ccache_summary", "header_hash",
})


def __getattr__(name: str) -> object:
    if name in _MOVED_NAMES:
        from harness import _moved

        _moved.warn(f"harness.build.{name}", f"harness.build.cmake.{name}")
        return getattr(importlib.import_module("harness.build.cmake"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
