"""Built-in harness plugins (installed as the ``harness_plugins`` package).

The core registers the generic ones by name (harness/plugin.py); the engine packages are
listed here, so the core's list names no engine.
"""

#: Engine plugin packages (and their companion modules), registered after the generic plugins.
ENGINE_PLUGINS: tuple[tuple[str, str], ...] = (
    ("engine-llamacpp", "harness_plugins.llamacpp"),
    ("bench-llamacpp", "harness_plugins.llamacpp.bench_hooks"),
    ("engine-sdcpp", "harness_plugins.sdcpp"),
)
