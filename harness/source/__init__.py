"""Source: an engine's pinned source, fetched, verified, cached and patched.

- :mod:`.cache`: the content-addressed source cache (download, verify, extract safely, once)
- :mod:`.manifest`: what a cached tree held, and a cheap check that it still does
- :mod:`.patches`: the patch series on a fresh copy of the tree
- :mod:`.index` and :mod:`.mirrors`: where pinned files come from (package indexes, the Debian mirror)
"""

from __future__ import annotations
