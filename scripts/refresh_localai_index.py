"""Refresh harness/config/localai_index.yaml from LocalAI's backend/index.yaml.

The pinned copy keeps LocalAI's meta backends (the entries that define a backend; the
per-hardware variants, written ``!!merge <<: *anchor``, only merge into them) and the use
cases their tags say, as ``known_usecases`` names. The diff against the committed copy is
printed; ``--check`` only compares (exit 1 on a difference).

The source is a LocalAI checkout (its HEAD is recorded), or a copy of the one file taken
without a checkout, with the commit it was taken at given by hand (``--commit``):

    python scripts/refresh_localai_index.py ~/src/LocalAI            # rewrite, print the diff
    python scripts/refresh_localai_index.py ~/src/LocalAI --check    # compare only
    python scripts/refresh_localai_index.py index.yaml --commit SHA --note "how it was taken"
    nox -s refresh_localai_index -- ~/src/LocalAI
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "harness" / "config" / "localai_index.yaml"
#: index.yaml tags -> LocalAI known_usecases names (tags that name no use case are left out).
TAG_USECASES: dict[str, tuple[str, ...]] = {
    "text-to-text": ("chat", "completion"),
    "text-to-speech": ("tts",), "tts": ("tts",), "text-to-audio": ("tts",),
    "speech-to-text": ("transcript",), "audio-transcription": ("transcript",), "audio-to-text": ("transcript",),
    "speech-recognition": ("transcript",), "asr": ("transcript",),
    "image-generation": ("image",), "text-to-image": ("image",),
    "video-generation": ("video",), "text-to-video": ("video",),
    "object-detection": ("detection",),
    "voice-activity-detection": ("vad",), "vad": ("vad",),
    "music-generation": ("sound_generation",), "sound-generation": ("sound_generation",),
    "diarization": ("diarization",),
    "embeddings": ("embeddings",), "reranker": ("rerank",),
    # Tags of the newer entries (mudler/LocalAI 0c8bba1f) that name one of LocalAI's use cases.
    "transcription": ("transcript",),
    "image-to-video": ("video",), "audio-to-video": ("video",),
    "audio-classification": ("sound_classification",),
    "audio-transform": ("audio_transform",),
    "face-recognition": ("face_recognition",), "face-verification": ("face_recognition",),
    "voice-recognition": ("speaker_recognition",), "speaker-verification": ("speaker_recognition",),
    "depth-estimation": ("depth",),
    "token-classification": ("token_classify",),
    "image-to-3d": ("3d",), "3d-generation": ("3d",),
    "3d-animation": ("3d_animation",), "text-to-motion": ("3d_animation",),
}
HEADER = """\
# LocalAI's backend index (backend/index.yaml) as data: the meta backends (the entries that
# define a backend; the per-hardware variants merge into them) and the use cases their tags
# say. Written by scripts/refresh_localai_index.py from LocalAI's index.yaml; do not edit by hand.
"""


def meta_backends(text: str) -> dict[str, list[str]]:
    """Backend name -> use cases, for every entry that is not a ``!!merge`` variant."""
    entries: list[dict[str, Any]] = []
    # The variants are the items whose text starts with a merge key; PyYAML merges them away, so
    # read which items are merges from the text (each item starts with "- " at column 0).
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("- ")]
    lines = text.splitlines()
    merged = {i for i in starts if lines[i].lstrip("- ").startswith(("!!merge", "<<"))}
    data = yaml.safe_load(text) or []
    for pos, item in zip(starts, data, strict=False):
        if isinstance(item, dict) and pos not in merged and isinstance(item.get("name"), str):
            entries.append(item)
    out: dict[str, list[str]] = {}
    for e in entries:
        cases: set[str] = set()
        for tag in e.get("tags") or ():
            cases.update(TAG_USECASES.get(str(tag).strip().lower(), ()))
        out[e["name"]] = sorted(cases)
    return dict(sorted(out.items()))


def render(backends: dict[str, list[str]], repository: str, commit: str, note: str = "") -> str:
    lines = [HEADER, "source:", f"  repository: {repository}", "  path: backend/index.yaml",
             f"  commit: {commit}"]
    if note:
        lines.append(f"  note: {json.dumps(note)}")
    lines.append("backends:")
    lines += [f"  {name}: [{', '.join(cases)}]" for name, cases in backends.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="a LocalAI git checkout, or a copy of its backend/index.yaml")
    p.add_argument("--commit", help="the LocalAI commit a copied index.yaml was taken at (required for a file)")
    p.add_argument("--repository", default="mudler/LocalAI", help="recorded as the source repository")
    p.add_argument("--note", default="", help="recorded with the source: how the copy was taken")
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when the copy is stale")
    args = p.parse_args(argv)
    if args.source.is_dir():
        index = args.source / "backend" / "index.yaml"
        commit = args.commit or subprocess.run(["git", "-C", str(args.source), "rev-parse", "HEAD"],
                                               capture_output=True, text=True, check=True).stdout.strip()
    elif args.commit:
        index, commit = args.source, args.commit
    else:
        p.error(f"{args.source} is a file: say which LocalAI commit it was taken at with --commit")
    new = render(meta_backends(index.read_text(encoding="utf-8")), args.repository, commit, args.note)
    old = OUT.read_text(encoding="utf-8") if OUT.is_file() else ""
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), str(OUT), f"{index}@{commit[:12]}",
                                     lineterm=""))
    print("\n".join(diff) if diff else "localai_index.yaml is up to date")
    if args.check:
        return 1 if diff else 0
    OUT.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
