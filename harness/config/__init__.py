"""Model configs: typed model, generated schema, validation, effective parameters, selection."""

from __future__ import annotations
