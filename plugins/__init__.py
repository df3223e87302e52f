"""Built-in harness plugins (installed as the ``harness_plugins`` package).

The core registers the generic ones by name (harness/engine/plugin.py); the engine packages are
declared as ``harness`` entry points in pyproject.toml, so no list here or in the core names
an engine.
"""
