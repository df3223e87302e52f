"""``harness serve``: validated model configs over an OpenAI-compatible HTTP API.

``protocol`` turns request bodies into engine calls (and refusals into OpenAI-shaped errors),
``body`` reads request bodies within bounds, ``responses`` is the Responses API on the chat
path, ``app`` the Starlette application (admission, streaming, metrics), ``connection`` the
per-connection bounds on uvicorn's protocol (slow clients), ``worker`` the engine worker
process and ``remote`` its server side, ``server`` the serving process (models loaded, engines
supervised); the command is :mod:`harness.cli.serve`.
"""
