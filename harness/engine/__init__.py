"""How engines and plugins plug in.

- :mod:`.descriptor`: an engine's data (``engines/<name>/engine.yaml``) as an ``EngineSpec``
- :mod:`.interface`: what an engine provides, as the one object it registers (``EngineImpl``)
- :mod:`.registry`: the registered engines, looked up by name
- :mod:`.plugin` and :mod:`.hookspec`: the plugin manager and the hooks many plugins contribute to
"""
