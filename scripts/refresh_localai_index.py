"""Refresh harness/config/localai_index.yaml from a LocalAI checkout's backend/index.yaml.

The pinned copy keeps LocalAI's meta backends (the entries that define a backend; the
per-hardware variants, written ``!!merge <<: *anchor``, only merge into them) and the use
cases their tags say, as ``known_usecases`` names. The diff against the committed copy is
printed; ``--check`` only compares (exit 1 on a difference).

    python scripts/refresh_localai_index.py ~/src/LocalAI            # rewrite, print the diff
    python scripts/refresh_localai_index.py ~/src/LocalAI --check    # compare only
    nox -s refresh_localai_index -- ~/src/LocalAI
"""

from __future__ import annotations

import argparse
import difflib
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
}
HEADER = """\
# LocalAI's backend index (backend/index.yaml) as data: the meta backends (the entries that
# define a backend; the per-hardware variants merge into them) and the use cases their tags
# say. Written by scripts/refresh_localai_index.py from a LocalAI checkout; do not edit by hand.
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


def render(backends: dict[str, list[str]], repository: str, commit: str) -> str:
    lines = [HEADER, "source:", f"  repository: {repository}", "  path: backend/index.yaml",
             f"  commit: {commit}", "backends:"]
    lines += [f"  {name}: [{', '.join(cases)}]" for name, cases in backends.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkout", type=Path, help="a LocalAI git checkout")
    p.add_argument("--repository", default="mudler/LocalAI", help="recorded as the source repository")
    p.add_argument("--check", action="store_true", help="compare only; exit 1 when the copy is stale")
    args = p.parse_args(argv)
    index = args.checkout / "backend" / "index.yaml"
    commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    new = render(meta_backends(index.read_text(encoding="utf-8")), args.repository, commit)
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
