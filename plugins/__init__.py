"""Built-in harness plugins (installed as the ``harness_plugins`` package)."""
