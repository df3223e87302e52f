"""Build: a patched tree and a matrix row become a relocatable, stamped artifact.

- :mod:`.pipeline`: the one entry point (fetch -> patch -> ABI check -> build) and the rows an engine builds
- :mod:`.matrix`: the variant rows of ``matrix/*.yaml`` and what an engine supports
- :mod:`.cmake`: configure and build one row with CMake (:mod:`.cmake_fileapi` finds what it built)
- :mod:`.ccache`: the compiler cache; :mod:`.artifacts`: installed artifacts; :mod:`.recipes`: a pin's recipe from git history
"""

from __future__ import annotations
