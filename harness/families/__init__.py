"""The video family data both :mod:`harness.config` and :mod:`harness.video` stand on.

:mod:`~harness.families.table`: the family table (``families.yaml``: frame and pixel grids,
checkpoints, audio, render defaults) and whether an engine renders a family;
:mod:`~harness.families.limits`: every bound the video path enforces; :mod:`~harness.families.canvas`:
a ``WIDTHxHEIGHT`` canvas. The config schema and rules read them, the video path plans and checks
with them; nothing here imports either (a config's family, resolved with LocalAI's vocabulary, is
:func:`harness.config.video_rules.family_for`).
"""

from __future__ import annotations
