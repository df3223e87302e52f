"""The sandbox and its edge: where a recipe's code runs, and the one way the host reads what it left.

:mod:`.bwrap` makes the bubblewrap sandbox a build, a binding's wheel or a check of an untrusted
recipe runs in: binds are exactly the paths named (never a parent), the environment an allowlist
(no secret goes in), no network. :mod:`.confined` is the accessor through which the host reads a
tree a sandbox could write (no link followed, regular files only, bounded) and writes its own files
for a build outside every such tree. build, binding and abi stand on this room; it stands on
``core`` and ``engine`` (trust) only.
"""
