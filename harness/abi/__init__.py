"""ABI checks: snapshot public headers with libclang, diff surfaces, check before building."""

from __future__ import annotations
