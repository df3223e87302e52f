"""Every command line the README shows, executed or checked, so that the README cannot go stale.

Commands are taken from the README's code blocks (indented and fenced). In the CLI tour a
command sits at the block's indent; deeper lines are its description, except lines just one
step deeper that start with ``-``: those are more of its flags (``harness bench``'s gates).
Inline ``harness ...`` spans in the prose and the descriptions are checked too.

Each command is one of:

1. run for real (:data:`RUN`), cheap ones only, from a temporary directory with a temporary
   ``$HARNESS_CACHE``: exit 0, and ``--json`` output is JSON;
2. checked against its parser (every other ``harness`` command): the subcommand exists, every
   flag the README shows is one of its options, and engine and variant names are real. The
   parser is the one ``harness SUBCOMMAND --help`` prints (one process asks them all);
3. not run (:data:`NOT_RUN`), each with the reason; what can still be checked is (``nox``
   session names against ``noxfile.py``, a bootstrap argument is a nox session, paths exist).

A README command naming an unknown subcommand, flag, engine, variant, session or path fails,
and so does an entry of RUN or NOT_RUN the README no longer shows.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"

#: The first word of a command line (after ``VAR=value`` assignments); ``python`` also matches ``python3``.
COMMAND_WORDS = ("harness", "bash", "nox", "pip", "pytest", "pre-commit")

#: README command -> the command lines this test runs for it ({root}: the checkout, {tmp}: a temporary
#: directory). Optional flags left out here are still checked against the parser.
RUN: dict[str, tuple[str, ...]] = {
    "harness host [--measure] [--json]": ("harness host", "harness host --json"),  # --measure: seconds of GEMM
    "harness plugins [--json]": ("harness plugins", "harness plugins --json"),
    "harness engines [--json]": ("harness engines", "harness engines --json"),
    "harness matrix [--variant PAT] [--json]": ("harness matrix", "harness matrix --variant 'cpu*' --json"),
    "harness matrix --ci github [--engine E] [--variant PAT]": (
        "harness matrix --ci github", "harness matrix --ci github --engine llamacpp --variant cpu"),
    "harness artifacts [--json]": ("harness artifacts", "harness artifacts --json"),
    "harness models fetch | list | env": ("harness models list", "harness models env"),  # fetch: downloads
    "harness validate PATH... [--strict] [--models-dir DIR] [--json | --format github] [--template | --no-template]": (
        "harness validate {root}/examples/models/", "harness validate {root}/examples/models/ --json",
        "harness validate {root}/examples/models/ --format github"),
    "harness config show FILE [--json] [--template | --no-template]": ("harness config show {root}/examples/models/smollm2-chat.yaml --json",),
    "harness select FILE [--json] [--template | --no-template]": ("harness select {root}/examples/models/smollm2-chat.yaml --json",),
    "harness config schema [--path]": ("harness config schema", "harness config schema --path"),
    "python -m harness_plugins.sdcpp.tiny_wan /tmp/tiny-wan": (
        "python -m harness_plugins.sdcpp.tiny_wan {tmp}/tiny-wan",),
}

_NOX = "a nox session: a fresh venv and the session's work; its name is checked against noxfile.py"
#: README command -> why it is not run here.
NOT_RUN: dict[str, str] = {
    "bash scripts/bootstrap.sh qualify": "the main job: system packages, then nox -s qualify (about 15 min)",
    "bash scripts/bootstrap.sh tests": "system packages, then the whole test suite through nox (this test is in it)",
    "nox -s lint": _NOX,
    "nox -s tests": _NOX + " (the whole suite)",
    "nox -s qualify": _NOX + " (the main job, about 15 min)",
    "nox -s \"build(variant='cuda')\"": _NOX + " (a CUDA compile, well over 10 minutes)",
    "nox -s update_pins -- llamacpp pypi:xllamacpp==2026.10.11549 --dry-run":
        _NOX + " (harness pin in a fresh venv; its flags are checked against harness pin's parser)",
    "nox -s generate_schema": _NOX + " (rewrites the committed schema)",
    "nox -s generate_settings": _NOX + " (rewrites the README's table; tests/unit/test_settings.py checks it is current)",
    "nox -s bench": _NOX + " (micro-benchmarks)",
    "nox -s cross-aarch64": _NOX + " (cross build + QEMU runs, minutes)",
    "nox -s vulkan": _NOX + " (vulkan build + binding, minutes)",
    "nox -s engine -- vllmcpp": _NOX + " (the vllm.cpp cold build, tens of minutes on 2 cores)",
    "nox -s bench-error-rates": _NOX + " (40 benchmark comparisons, about 45 minutes on a quiet host)",
    "nox -s serve-load": _NOX + " (256 clients, 1,000 disconnects and a 10-minute soak against a real server)",
    "HARNESS_VIDEO_TINY=/tmp/tiny-wan pytest engines/sdcpp/e2e/test_video_render.py":
        "an e2e spec: needs the stable-diffusion.cpp cpu build and binding (minutes); the file is checked",
}

#: nox sessions whose posargs go to a command with a parser: the README's flags after ``--`` are checked there.
NOX_POSARGS: dict[str, dict[str, Any]] = {
    "update_pins": {"script": None, "argv": ["pin"]},
    "qualify": {"script": None, "argv": ["qualify"]},
}


@dataclass(frozen=True)
class Command:
    """A command line the README shows, from line ``line`` (``inline``: a `span` in running text)."""

    text: str
    line: int
    inline: bool = False

    @property
    def tokens(self) -> list[str]:
        """Words of the command, ``VAR=value`` assignments in front dropped (ValueError: bad quoting)."""
        words = shlex.split(self.text, comments=True)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):
            words.pop(0)
        return words


def _is_command(text: str) -> bool:
    words = re.sub(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+", "", text).split()
    return bool(words) and (words[0] in COMMAND_WORDS or words[0].startswith(("python", "v/bin/")))


def _inline(text: str, line: int) -> Iterator[Command]:
    for span in re.findall(r"`([^`]+)`", text):
        if span.split()[0] in ("harness", "nox") and len(span.split()) > 1:
            yield Command(span, line, inline=True)


def extract_commands(text: str) -> list[Command]:
    """The command lines of a README: code blocks (``&&`` splits a line), and inline spans."""
    found: list[Command] = []
    fence: str | None = None
    base: int | None = None  # the indent of the current indented block's command column
    last: int | None = None  # index in ``found`` of the block command that flag lines extend
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is not None or stripped.startswith(("```", "~~~")):
            if fence is None:
                fence = stripped[:3]
            elif stripped.startswith(fence):
                fence = None
            else:
                command = stripped.removeprefix("$ ").partition("  ")[0]
                if _is_command(command):
                    found.extend(Command(part.strip(), no) for part in command.split("&&"))
            continue
        indent = len(line) - len(line.lstrip(" "))
        if not stripped or indent < 4:
            if stripped:
                base, last = None, None
            found.extend(_inline(line, no))
            continue
        base = indent if base is None else base
        command, _, description = stripped.partition("  ")
        if indent == base and _is_command(command):
            found.extend(Command(part.strip(), no) for part in command.split("&&"))
            last = len(found) - 1
        elif indent <= base + 4 and command.startswith("-") and last is not None:
            # more flags of the command above (harness bench's gates), not a description
            found[last] = Command(f"{found[last].text} {command}", found[last].line)
        else:
            description = stripped
            if indent == base:
                last = None
        found.extend(_inline(description, no))
    return found


def glued_to_paragraph(text: str) -> list[int]:
    """Lines that open an indented block right under a paragraph line: Markdown renders them as
    more of the paragraph, not as code."""
    lines = text.splitlines()
    fenced = False
    glued = []
    for no, (prev, line) in enumerate(zip(["", *lines], lines, strict=False), 1):
        if line.strip().startswith(("```", "~~~")):
            fenced = not fenced
        if (not fenced and line.startswith("    ") and line.strip() and prev.strip()
                and not prev.startswith("    ")):
            glued.append(no)
    return glued


# --- what the parsers say ---------------------------------------------------------------------

#: Run in one child: each request's ``--help`` is answered by recording the parser that would print it.
_PROBE = r"""
import argparse, contextlib, io, json, runpy, sys

seen = []
argparse.ArgumentParser.print_help = lambda self, file=None: seen.append(self)


def describe(p):
    options, positionals, subcommands = {}, [], []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            subcommands.extend(a.choices)
        elif a.option_strings:
            options.update({o: {"dest": a.dest, "takes_value": a.nargs != 0} for o in a.option_strings})
        else:
            positionals.append(a.dest)
    return {"prog": p.prog, "options": options, "positionals": positionals, "subcommands": subcommands}


answers = []
for req in json.load(sys.stdin):
    seen.clear()
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            if req["script"]:
                sys.argv = [req["script"], *req["argv"], "--help"]
                runpy.run_path(req["script"], run_name="__main__")
            else:
                from harness.cli import main
                code = main([*req["argv"], "--help"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    answers.append({"code": code, "error": err.getvalue().strip(), "parser": describe(seen[-1]) if seen else None})
json.dump(answers, sys.stdout)
"""


def probe_parsers(requests: list[tuple[str | None, tuple[str, ...]]], cwd: Path) -> dict[Any, dict[str, Any]]:
    """(script or None for harness, argv) -> the parser ``argv --help`` reaches, as ``code``/``error``/``parser``."""
    unique = list(dict.fromkeys(requests))
    payload = json.dumps([{"script": str(ROOT / s) if s else None, "argv": list(a)} for s, a in unique])
    r = subprocess.run([sys.executable, "-c", _PROBE], input=payload, capture_output=True, text=True,
                       cwd=cwd, env=_env(cwd), check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    return dict(zip(unique, json.loads(r.stdout), strict=True))


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "HARNESS_CACHE": str(tmp / "cache"), "HARNESS_NO_PROGRESS": "1"}


@dataclass(frozen=True)
class Known:
    """The names a README command may use as values: engines, variant rows, nox sessions."""

    engines: frozenset[str]
    variants: frozenset[str]
    sessions: frozenset[str]


def nox_sessions(noxfile: Path) -> frozenset[str]:
    """The sessions ``nox --list`` shows for ``noxfile``, read from its decorators (nox need not be installed)."""
    names: set[str] = set()
    for fn in ast.parse(noxfile.read_text()).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        session, params = None, []
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)):
                continue
            if dec.func.attr == "session":
                session = next((ast.literal_eval(k.value) for k in dec.keywords if k.arg == "name"), fn.name)
            elif dec.func.attr == "parametrize":
                arg, values = (ast.literal_eval(a) for a in dec.args[:2])
                params += [f"{arg}={v!r}" for v in values]
        if session is not None:
            names.add(session)
            names.update(f"{session}({p})" for p in params)
    return frozenset(names)


def known_names(tmp: Path) -> Known:
    def listed(cmd: str, key: str) -> frozenset[str]:
        r = subprocess.run([sys.executable, "-m", "harness", *cmd.split(), "--json"], capture_output=True, text=True,
                           cwd=tmp, env=_env(tmp), check=True, timeout=60)
        return frozenset(row[key] for row in json.loads(r.stdout))

    return Known(engines=listed("engines", "engine"), variants=listed("matrix", "name"),
                 sessions=nox_sessions(ROOT / "noxfile.py"))


# --- the checks --------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[^>]+>|[A-Z][A-Z0-9_-]*(?:\.\.\.|\.json)?|\S*\.\.\.")


@dataclass
class _Words:
    """A command's words after its program: subcommand-or-positional words, options with their values."""

    words: list[str] = field(default_factory=list)
    options: list[tuple[str, str | None]] = field(default_factory=list)


def _split(tokens: list[str], takes_value: dict[str, bool]) -> _Words:
    """Words and options of ``tokens``; ``[`` ``]`` groups and ``A | B`` alternatives are read as all shown,
    and what follows a bare ``--`` belongs to another tool."""
    out = _Words()
    clean = [t.strip("[]") for t in tokens]
    clean = [t for t in clean if t and t != "|"]
    i = 0
    while i < len(clean):
        tok = clean[i]
        if tok == "--":
            break
        if tok.startswith("-") and len(tok) > 1:
            name, eq, value = tok.partition("=")
            if not eq and takes_value.get(name, False) and i + 1 < len(clean) and not clean[i + 1].startswith("-"):
                i += 1
                value = clean[i]
            out.options.append((name, value or None))
        else:
            out.words.append(tok)
        i += 1
    return out


def _alternatives(tokens: list[str]) -> list[list[str]]:
    """``models fetch | list | env`` -> three commands (alternatives among the leading words only)."""
    lead = 0
    while lead < len(tokens) and (tokens[lead] == "|" or not tokens[lead].startswith(("-", "["))):
        lead += 1
    head, rest = tokens[:lead], tokens[lead:]
    if "|" not in head:
        return [tokens]
    first = head.index("|")
    options = [head[first - 1]] + [w for w in head[first:] if w != "|"]
    return [[*head[:first - 1], alt, *rest] for alt in options]


def _program_tokens(cmd: Command) -> list[str] | None:
    """The tokens after ``harness`` when ``cmd`` runs harness, else None."""
    tokens = cmd.tokens
    if tokens and tokens[0] == "harness":
        return tokens[1:]
    if tokens[:3] == ["python", "-m", "harness"]:
        return tokens[3:]
    return None


def _leading_words(tokens: list[str]) -> list[str]:
    words = []
    for t in tokens:
        if t.startswith(("-", "[")) or t == "|" or _PLACEHOLDER.fullmatch(t):
            break
        words.append(t)
    return words


def _harness_requests(cmd: Command) -> list[tuple[str | None, tuple[str, ...]]]:
    tokens = _program_tokens(cmd)
    if tokens is None:
        return []
    out: list[tuple[str | None, tuple[str, ...]]] = []
    for form in _alternatives(tokens):
        words = _leading_words(form)
        out += [(None, tuple(words[:n])) for n in range(1, len(words) + 1)]
    return out


def _requests(cmd: Command) -> list[tuple[str | None, tuple[str, ...]]]:
    """The ``--help`` probes that checking ``cmd`` needs."""
    tokens = cmd.tokens
    if tokens[:2] == ["nox", "-s"] and "--" in tokens and len(tokens) > 2:
        target = NOX_POSARGS.get(tokens[2].strip("\"'"))
        if target:
            return [(target["script"], tuple(target["argv"]))]
    return _harness_requests(cmd)


def _check_values(where: str, dest: str, value: str | None, known: Known) -> list[str]:
    if value is None or _PLACEHOLDER.fullmatch(value):
        return []
    problems = []
    for v in value.split(","):
        if dest == "engine" and v not in known.engines:
            problems.append(f"{where}: unknown engine {v!r} (engines: {', '.join(sorted(known.engines))})")
        if dest in ("variant", "variants") and not fnmatch.filter(known.variants, v):
            problems.append(f"{where}: variant {v!r} matches no matrix row ({', '.join(sorted(known.variants))})")
    return problems


def _check_against(where: str, parser: dict[str, Any], tokens: list[str], known: Known) -> list[str]:
    """Options of ``tokens`` (and engine/variant values) against one parser's description."""
    opts: dict[str, dict[str, Any]] = parser["options"]
    split = _split(tokens, {o: d["takes_value"] for o, d in opts.items()})
    problems = []
    for name, value in split.options:
        if name not in opts:
            problems.append(f"{where}: {parser['prog']} has no option {name} "
                            f"(it has: {', '.join(sorted(o for o in opts if o.startswith('--')))})")
        else:
            problems += _check_values(where, opts[name]["dest"], value, known)
    for dest, value in zip(parser["positionals"], split.words, strict=False):
        problems += _check_values(where, dest, value, known)
    return problems


def _subcommand_path(form: list[str], probes: dict[Any, dict[str, Any]]) -> tuple[list[str], str | None]:
    """The subcommand words that start ``form`` (``abi check``), or the problem with them."""
    path: list[str] = []
    subs: list[str] = probes[(None, ())]["parser"]["subcommands"]
    for word in _leading_words(form):
        if not subs:
            break  # a positional of `harness <path>`
        answer = probes[(None, (*path, word))]
        if answer["code"] != 0 or answer["parser"] is None:
            error = answer["error"].splitlines()[-1] if answer["error"] else f"exit {answer['code']}"
            why = "" if "invalid choice" in error else f": {error}"
            return path, f"`harness {' '.join([*path, word])}` is not a command (known: {', '.join(subs)}){why}"
        path.append(word)
        subs = answer["parser"]["subcommands"]
    if not path:  # `harness --version`: options of harness itself
        return path, None if form and form[0].startswith("-") else "names no harness subcommand"
    if subs:
        return path, f"`harness {' '.join(path)}` needs a subcommand ({', '.join(subs)})"
    return path, None


def _check_harness(cmd: Command, where: str, probes: dict[Any, dict[str, Any]], known: Known) -> list[str]:
    tokens = _program_tokens(cmd)
    assert tokens is not None
    problems = []
    for form in _alternatives(tokens):
        path, problem = _subcommand_path(form, probes)
        if problem:
            problems.append(f"{where}: {problem}")
        else:
            problems += _check_against(where, probes[(None, tuple(path))]["parser"], form[len(path):], known)
    return problems


def _check_nox(cmd: Command, where: str, probes: dict[Any, dict[str, Any]], known: Known) -> list[str]:
    tokens = cmd.tokens
    if len(tokens) < 3 or tokens[1] != "-s":
        return [f"{where}: expected `nox -s SESSION`"]
    session = tokens[2]
    if session not in known.sessions:
        return [f"{where}: noxfile.py has no session {session!r} (it has: {', '.join(sorted(known.sessions))})"]
    target = NOX_POSARGS.get(session)
    if target is None or "--" not in tokens:
        return []
    answer = probes[(target["script"], tuple(target["argv"]))]
    if answer["parser"] is None:
        return [f"{where}: the session's command printed no help: {answer['error'] or answer['code']}"]
    return _check_against(where, answer["parser"], tokens[tokens.index("--") + 1:], known)


def _check_paths(cmd: Command, where: str) -> list[str]:
    """Repository paths a command names (``scripts/...``, ``tests/e2e/...``) must exist."""
    problems = []
    for tok in (t.strip("[]") for t in cmd.tokens):
        parts = tok.split("/")
        if (len(parts) > 1 and parts[0] and (ROOT / parts[0]).is_dir() and "<" not in tok
                and not any(_PLACEHOLDER.fullmatch(p) for p in parts) and not (ROOT / tok).exists()):
            problems.append(f"{where}: {tok} does not exist in the checkout")
    return problems


def check_commands(commands: list[Command], known: Known, cwd: Path) -> list[str]:
    """Everything wrong with ``commands``: unknown subcommands, options, names, sessions and paths."""
    problems: list[str] = []
    parsed: list[Command] = []
    for cmd in commands:
        try:
            cmd.tokens  # noqa: B018 - quoting is checked here, once
        except ValueError as e:
            problems.append(f"README line {cmd.line}: `{cmd.text}`: {e}")
            continue
        parsed.append(cmd)
    probes = probe_parsers([(None, ()), *(r for c in parsed for r in _requests(c))], cwd)
    assert probes[(None, ())]["parser"], f"`harness --help` printed no argparse parser: {probes[(None, ())]}"
    for cmd in parsed:
        where = f"README line {cmd.line}: `{cmd.text}`"
        tokens = cmd.tokens
        if _program_tokens(cmd) is not None:
            problems += _check_harness(cmd, where, probes, known)
        elif tokens[0] == "nox":
            problems += _check_nox(cmd, where, probes, known)
        elif tokens[:2] == ["bash", "scripts/bootstrap.sh"]:
            # bootstrap.sh hands its arguments to `nox -s`
            problems += [f"{where}: bootstrap.sh runs `nox -s {a}`, and noxfile.py has no such session"
                         for a in tokens[2:] if a not in known.sessions]
        problems += _check_paths(cmd, where)
    return problems


def nox_mentions(text: str) -> list[tuple[int, str]]:
    """Every ``nox -s NAME`` anywhere in ``text`` (descriptions and prose too), with its line."""
    return [(no, m.strip("\"'")) for no, line in enumerate(text.splitlines(), 1)
            for m in re.findall(r"\bnox -s (\"[^\"]+\"|'[^']+'|[\w.\-]+)", line)]


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("readme")


@pytest.fixture(scope="module")
def known(workdir: Path) -> Known:
    return known_names(workdir)


@pytest.fixture(scope="module")
def readme_commands() -> list[Command]:
    return extract_commands(README.read_text())


def test_readme_commands_exist(readme_commands: list[Command], known: Known, workdir: Path) -> None:
    assert len([c for c in readme_commands if not c.inline]) > 40, "the extraction lost the CLI tour"
    problems = check_commands(readme_commands, known, workdir)
    problems += [f"README line {no}: `nox -s {name}`: noxfile.py has no such session"
                 for no, name in nox_mentions(README.read_text()) if name not in known.sessions]
    problems += [f"README line {no}: a command block needs a blank line above it, else it renders as text"
                 for no in glued_to_paragraph(README.read_text())]
    assert not problems, "\n".join(problems)


def test_every_readme_command_is_run_checked_or_listed(readme_commands: list[Command]) -> None:
    shown = {c.text for c in readme_commands if not c.inline}
    unlisted = sorted(t for t in shown - RUN.keys() - NOT_RUN.keys() if not t.startswith("harness "))
    assert not unlisted, f"README commands neither run nor listed in NOT_RUN with a reason: {unlisted}"
    stale = sorted((RUN.keys() | NOT_RUN.keys()) - shown)
    assert not stale, f"RUN/NOT_RUN entries the README no longer shows (update or delete them): {stale}"


@pytest.mark.parametrize("readme_command", sorted(RUN))
def test_cheap_readme_commands_run(readme_command: str, workdir: Path) -> None:
    for line in RUN[readme_command]:
        argv = shlex.split(line.format(root=ROOT, tmp=workdir))
        argv = [sys.executable, "-m", "harness", *argv[1:]] if argv[0] == "harness" else [sys.executable, *argv[1:]]
        r = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, env=_env(workdir), check=False,
                           timeout=120)
        assert r.returncode == 0, f"{line} (README: {readme_command}) exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        if "--json" in argv:
            json.loads(r.stdout)


SNIPPET = """\
Prose naming `harness engines --jsn`, `harness abi snapshot <name>`, `harness --version` and `harness --verbose`.

    harness enginez [--json]              engine descriptors
    harness abi chek llamacpp             the ABI
    harness matrix [--varient PAT]
                                          --not-a-flag is description, `harness matrix --json` is fine
        --bogus N                         one more flag of the command above
    harness build nosuchengine --variant nosuchrow && harness build llamacpp --variant 'cpu*'
    harness models fetch | list | lost
    harness abi
    nox -s no_such_session
    nox -s update_pins -- llamacpp pypi:xllamacpp==2026.10.11549 --bild N
    bash scripts/bootstrap.sh qualify nightly
    pytest tests/e2e/no_such_spec.py

```console
$ harness host --jsonn
```
"""


def test_a_block_glued_to_a_paragraph_is_found() -> None:
    assert glued_to_paragraph("Text.\n    harness host\n\n    harness matrix\n") == [2]


def test_extraction_reads_the_tour_structure() -> None:
    texts = [(c.text, c.inline) for c in extract_commands(SNIPPET)]
    assert texts == [
        ("harness engines --jsn", True), ("harness abi snapshot <name>", True), ("harness --version", True),
        ("harness --verbose", True),
        ("harness enginez [--json]", False), ("harness abi chek llamacpp", False),
        ("harness matrix [--varient PAT] --bogus N", False), ("harness matrix --json", True),
        ("harness build nosuchengine --variant nosuchrow", False), ("harness build llamacpp --variant 'cpu*'", False),
        ("harness models fetch | list | lost", False), ("harness abi", False),
        ("nox -s no_such_session", False), ("nox -s update_pins -- llamacpp pypi:xllamacpp==2026.10.11549 --bild N", False),
        ("bash scripts/bootstrap.sh qualify nightly", False), ("pytest tests/e2e/no_such_spec.py", False),
        ("harness host --jsonn", False)]


def test_stale_readme_commands_fail(known: Known, workdir: Path) -> None:
    problems = check_commands(extract_commands(SNIPPET), known, workdir)
    text = "\n".join(problems)
    expected = [
        "`harness engines --jsn`: harness engines has no option --jsn",
        "`harness --verbose`: harness has no option --verbose",
        "`harness enginez` is not a command (known: ",
        "`harness abi chek` is not a command (known: ",
        "harness matrix has no option --varient",
        "harness matrix has no option --bogus",
        "unknown engine 'nosuchengine'",
        "variant 'nosuchrow' matches no matrix row",
        "`harness models lost` is not a command",
        "`harness abi` needs a subcommand",
        "noxfile.py has no session 'no_such_session'",
        "harness pin has no option --bild",
        "noxfile.py has no such session",  # bootstrap.sh ... nightly
        "tests/e2e/no_such_spec.py does not exist",
        "harness host has no option --jsonn",
    ]
    missing = [e for e in expected if e not in text]
    assert not missing, f"not reported: {missing}\nreported:\n{text}"
    assert len(problems) == len(expected), text  # and nothing else: `harness matrix --json`, descriptions, cpu*
