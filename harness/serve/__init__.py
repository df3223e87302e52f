"""``harness serve``: validated model configs over an OpenAI-compatible HTTP API.

``protocol`` turns request bodies into engine calls (and refusals into OpenAI-shaped errors),
``app`` is the Starlette application (admission, streaming, metrics), ``cli`` the command.
"""
