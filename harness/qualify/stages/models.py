"""The models stage: the fixture models fetched, their environment variables handed on."""

from __future__ import annotations

from harness.qualify.context import Models, QualifyContext
from harness.qualify.result import StageResult


def fetch(ctx: QualifyContext) -> StageResult:
    """Every fixture model in place (those kept for this engine too); hands on
    :class:`~harness.qualify.context.Models`."""
    from harness.models.fixtures import engine_env, env_vars, fetch_all

    fetch_all(None, engine=ctx.engine.name)
    env = {**env_vars(), **engine_env()}
    return StageResult(f"{len(env)} model variables", {"env": env}, product=Models(env=env))
