"""Model configs: typed model, generated schema, validation, effective parameters, selection."""

from __future__ import annotations

#: Where a config's relative model paths resolve when --models-dir is not given (light: the
#: CLI's parsers name it in their help without importing the config machinery).
MODELS_DIR_ENV = "HARNESS_MODELS_DIR"
