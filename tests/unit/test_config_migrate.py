"""``harness config migrate`` and configs written for older LocalAI releases.

tests/data/localai-old-docs/<tag>/ holds every model-config YAML block of LocalAI's docs at three older
release tags (v2.0.0, v2.10.0, v2.20.0), one file each, headed ``# source: mudler/LocalAI TAG COMMIT
PATH:LINE``. On them: every error is a refusal LocalAI makes (or a backend failing at load), every file
whose backend LocalAI has since removed gets LocalAI's error, and ``config migrate`` fixes what is
mechanical, keeping the comments.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import harness.cli
from harness.config.localai import vocabulary
from harness.config.migrate import migrate_text
from harness.config.validate import Validator

ROOT = Path(__file__).resolve().parents[2]
OLD_DOCS = ROOT / "tests" / "data" / "localai-old-docs"
FILES = sorted(OLD_DOCS.glob("*/*.yaml"))
SOURCE = re.compile(r"^# source: mudler/LocalAI (v[\d.]+) [0-9a-f]{40} docs/[\w./-]+\.md:\d+\n")
#: The errors this corpus gets, each a refusal LocalAI makes: LAI025 a removed backend (no gallery has it:
#: fails at load), LAI003 a placeholder backend name ('<backend>': Validate() refuses it), LAI013 a value
#: yaml.v3 cannot decode (the docs' '...' placeholder, a duplicate key), LAI008 a config naming no model
#: (the docs' every-field reference, backend and name empty: the backend is handed no model).
REAL_REFUSALS = frozenset({"LAI025", "LAI003", "LAI013", "LAI008"})
VALIDATOR = Validator()


def _tag(path: Path) -> str:
    m = SOURCE.match(path.read_text())
    assert m is not None, path
    return m.group(1)


def _findings(text: str, file: str) -> list[tuple[str, str]]:
    report = Validator().validate_text(text, file)
    out = []
    for item in report:
        for d in getattr(item, "diagnostics", (item,)):
            out.append((d.severity, d.code))
    return out


def _removed_backend(path: Path) -> str | None:
    """The backend the file gives when some LocalAI release had it and the pinned one no longer does
    (from the generated history, independently of the validator's rules; the docs of a release may
    show a name an earlier one already dropped)."""
    data = yaml.safe_load(path.read_text())
    backend = data.get("backend") if isinstance(data, dict) else None
    if not isinstance(backend, str) or not backend:
        return None
    h, v = vocabulary().history, vocabulary()
    once = backend in h.backends or backend in h.aliases
    return backend if once and backend not in v.backends else None


def test_the_corpus_cites_each_files_source_and_tag() -> None:
    assert len(FILES) >= 80
    assert {_tag(p) for p in FILES} == {"v2.0.0", "v2.10.0", "v2.20.0"}
    assert {p.parent.name for p in FILES} == {"v2.0.0", "v2.10.0", "v2.20.0"}


def test_every_error_is_a_refusal_localai_makes() -> None:
    codes = [c for p in FILES for s, c in _findings(p.read_text(), str(p)) if s == "error"]
    assert codes and set(codes) <= REAL_REFUSALS


def test_every_removed_backend_is_flagged() -> None:
    removed = [p for p in FILES if _removed_backend(p)]
    assert len(removed) >= 15
    for p in removed:
        assert ("error", "LAI025") in _findings(p.read_text(), str(p)), p


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_migration_keeps_comments_and_never_adds_a_finding(path: Path) -> None:
    text = path.read_text()
    m = migrate_text(text, str(path))
    comments = [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line and ":" not in line]
    for c in comments:
        assert c in m.after, (path, c)
    before = {f for f in _findings(text, str(path)) if f[0] != "note"}
    after = {f for f in _findings(m.after, str(path)) if f[0] != "note"}
    assert after <= before, (path, after - before)
    assert migrate_text(m.after, str(path)).after == m.after  # a second run changes nothing


def migrated_clean() -> tuple[int, int]:
    """(files with an error or a warning, those that validate clean after the migration)."""
    dirty = clean = 0
    for p in FILES:
        text = p.read_text()
        if any(s != "note" for s, _ in _findings(text, str(p))):
            dirty += 1
            after = migrate_text(text, str(p)).after
            clean += not any(s != "note" for s, _ in _findings(after, str(p)))
    return dirty, clean


def test_migration_fixes_what_is_mechanical() -> None:
    dirty, clean = migrated_clean()
    # what stays is no migration's to fix: a backend LocalAI removed, an unknown key (the docs' 'mode',
    # 'asset_dir'), a fractional integer, the docs' placeholders; the note of #55 counts each
    assert dirty >= 30 and clean >= 0, (dirty, clean)


def test_migration_renames_every_legacy_alias() -> None:
    """Except where the model is the old backend's (LAI027: left for a person, the name kept)."""
    aliased = [p for p in FILES if ("note", "LAI026") in _findings(p.read_text(), str(p))
               and ("warning", "LAI027") not in _findings(p.read_text(), str(p))]
    assert len(aliased) >= 11
    for p in aliased:
        after = migrate_text(p.read_text(), str(p)).after
        assert ("note", "LAI026") not in _findings(after, str(p)), p


# -- each fix -------------------------------------------------------------------------------


OLD = """\
# a config for LocalAI v2
name: gpt-3.5-turbo
backend: sentencetransformers  # the embeddings backend
parameters:
  model: all-MiniLM-L6-v2
  context_size: 512   # moved: LocalAI reads it at the top level
top_p: 0.9
download_files:
  - https://example.com/models/m.bin
"""


def test_each_mechanical_fix() -> None:
    m = migrate_text(OLD, "old.yaml")
    assert m.after == """\
# a config for LocalAI v2
name: gpt-3.5-turbo
backend: transformers          # the embeddings backend
type: SentenceTransformer
parameters:
  model: all-MiniLM-L6-v2
  top_p: 0.9
context_size: 512     # moved: LocalAI reads it at the top level
download_files:
  - filename: m.bin
    uri: https://example.com/models/m.bin
"""
    assert m.left == ()
    assert len(m.changes) == 5
    assert m.diff().startswith("--- old.yaml\n+++ old.yaml (migrated)\n")


def test_what_has_no_mechanical_successor_is_left_with_the_reason() -> None:
    m = migrate_text("name: g\nbackend: gpt4all-j\nparameters:\n  model: ggml.bin\n  threads: 4\nthreads: 8\n")
    assert [(item.line, item.what) for item in m.left] == [(2, "backend 'gpt4all-j'"), (5, "'threads'")]
    assert "8814b31805b8" in m.left[0].why and "no mechanical successor" in m.left[0].why
    assert "already sets it to 8" in m.left[1].why
    sd = migrate_text("name: s\nbackend: stablediffusion\nparameters:\n  model: stablediffusion_assets\n")
    # renamed, the config would hide what LAI027 says: kept, and left for a person
    assert sd.after == sd.before and "one model file" in sd.left[0].why


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "old.yaml"
    f.write_text(OLD)
    assert harness.cli.main(["config", "migrate", str(f)]) == 0
    out = capsys.readouterr()
    assert "-backend: sentencetransformers" in out.out and "5 change(s) would change" in " ".join(out.err.split())
    assert f.read_text() == OLD  # a diff only
    assert harness.cli.main(["config", "migrate", "--write", str(f)]) == 0
    assert "backend: transformers" in f.read_text() and "# the embeddings backend" in f.read_text()
    g = tmp_path / "gone.yaml"
    g.write_text("name: g\nbackend: rwkv\nparameters: {model: rwkv.bin}\n")
    assert harness.cli.main(["config", "migrate", str(g)]) == 1
    assert "left for a person: backend 'rwkv'" in " ".join(capsys.readouterr().err.split())
