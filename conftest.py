"""The checkout's root conftest: a plain ``pytest engines/<name>/e2e`` gets what ``harness e2e``
gives each spec file (``-p harness.qualify.specs``: ``--variant``, ``variant``, ``artifact``)."""

pytest_plugins = ["harness.qualify.specs"]
