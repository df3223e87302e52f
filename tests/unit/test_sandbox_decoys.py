"""The decoy test (issue 58, every class at once): a hostile recipe, run through every command that reads,
parses or builds it, leaves a decoy ``$HOME``, a decoy venv and a decoy ``/etc`` byte for byte as they were.

The recipe is the tiny engine of :mod:`tests.unit.hostile_engine` (an untrusted ``$HARNESS_ENGINES_PATH``
folder), and the harness runs from a venv at ``$HOME/.venv`` (:func:`tests.unit.test_recipe_binding_wheel.make_setup`),
with a remote cache's password and a cloud key in its environment. The recipe brings:

- a patch whose configure reads the decoy home's secret and ``.ssh/id_rsa``, the decoy ``etc/shadow`` and the
  environment, lists the home, the etc dir and the venv's site-packages into its messages and into a file of
  the build dir, and links ``build.log`` to ``evil.pth`` in the venv's site-packages (its build step prints a
  ``.pth`` payload: before the issue the host appended it there, and the next start of that Python ran it);
- a failing variant of it that leaves links at the old places of the init-cache script, ``.sandbox/passwd`` and
  ``group`` (one dangling), the file-API query, the ccache stats log and the log, built twice (the retry);
- an extra ABI header (in ``abi.headers``), its source's own ``tiny.h`` (a commit of the upstream repository) and
  a binding unit that ``#include`` the decoy ``etc/shadow``, whose first word is a secret (libclang on the host
  printed it in its error). That is the recipe's ABI face, which the ABI commands get; the builds get its build
  face (the clean commit, the usual headers), since before the issue the host's parse failed the ABI check every
  build starts with and no build would have run;
- ``engines/_shared`` linked to the decoy etc dir (the ABI check and build-binding refuse it), then a binding whose
  CMake project reads the same files and installs a ``.pth`` (the wheel is refused), then the same without the
  ``.pth`` (built in the sandbox, unpacked under the cache, never installed).

The same recipe is in the history of a project root (``$HARNESS_ROOT``): one older commit with its build face, the
next with its ABI face, and HEAD the clean tiny engine, trusted: ``build --rev``, ``abi check --rev``, ``abi diff
OLD HEAD`` and ``qualify --old-rev OLD --no-bench`` (HEAD's fetch, patch, ABI check and build; the old pin's ABI
diff) run over it.

Asserted for every command: the decoys (the home with its key and its venv, and the etc dir) are identical,
content and mode, and starting the venv's Python runs no ``.pth``; no secret is in its output, nor a traceback;
the refusals and builds end with their exit status. After all of them: no secret in any file under the cache
(wheels opened), nor in qualify's report; and the hostile code did run (its markers are in the logs), so the
test is not empty.

One scenario for the module (about 30 s; 45 s on two busy cores), whose record the tests read. A command that
changes a decoy has it put back, so that each command is judged on its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.core.errors import BindingError, BuildError, ConfigError

from . import hostile_engine
from .test_recipe_binding_wheel import Setup, builds, make_setup
from .test_recipe_sandbox import cmake_patch
from .test_third_engine import DESCRIPTOR, PATCH, _git, _repo

pytestmark = builds

#: The decoy etc dir's ``shadow`` starts with it: a C identifier before another, so a parse that reads the file
#: names it whole ("unknown type name").
ETC_SECRET = "etc_shadow_secret_58f1"
#: In the harness's environment: a remote cache's password and a cloud key.
ENV_SECRET = "envsecret58-9c2e"
SECRETS = (hostile_engine.SECRET, ETC_SECRET, ENV_SECRET)
SECRET_ENV = {"CCACHE_REMOTE_STORAGE": f"redis://u:{ENV_SECRET}@127.0.0.1:6379",
              "AWS_SECRET_ACCESS_KEY": ENV_SECRET}
HOSTILE_PATCH = "0002-hostile.patch"
#: Markers the hostile CMake code prints: found in the build logs, they show it ran.
CONFIGURE_RAN, BINDING_RAN = "hostile-configure-ran", "hostile-binding-ran"


@dataclass(frozen=True)
class Decoys:
    setup: Setup

    @property
    def home(self) -> Path:
        return self.setup.recipe.home

    @property
    def etc(self) -> Path:
        return self.setup.recipe.outside / "etc"

    @property
    def purelib(self) -> Path:
        return self.setup.purelib

    @property
    def marker(self) -> Path:
        return self.setup.marker

    def fill(self) -> None:
        """The decoy home's key and shell profile, the decoy etc dir; modes as on a host."""
        (self.home / ".ssh").chmod(0o700)
        (self.home / ".ssh" / "id_rsa").chmod(0o600)
        (self.home / ".bashrc").write_text("export PS1='$ '\n")
        (self.etc / "ssl").mkdir(parents=True)
        (self.etc / "ssl" / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n")
        (self.etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (self.etc / "shadow").write_text(f"{ETC_SECRET} root:$6$salt$hash:19000:0:99999:7:::\n")
        (self.etc / "shadow").chmod(0o640)
        # what a start of the venv's Python imports is compiled now: a later import writes no __pycache__
        subprocess.run([str(self.setup.venv / "bin" / "python"), "-m", "compileall", "-q", str(self.purelib)],
                       check=True, capture_output=True, timeout=300)

    def state(self) -> dict[str, str]:
        """Every entry under the decoy home (its venv included) and the decoy etc dir, links not followed:
        its kind, mode and content (a link: its target)."""
        out = {}
        for base in (self.home, self.etc):
            for top, dirs, files in os.walk(base):
                for name in ["", *dirs, *files]:
                    p = os.path.join(top, name) if name else top
                    st = os.lstat(p)
                    mode = oct(stat.S_IMODE(st.st_mode))
                    if stat.S_ISLNK(st.st_mode):
                        out[p] = f"link {mode} -> {os.readlink(p)}"
                    elif stat.S_ISREG(st.st_mode):
                        out[p] = f"file {mode} {hashlib.sha256(Path(p).read_bytes()).hexdigest()}"
                    else:
                        out[p] = f"{stat.S_IFMT(st.st_mode):o} {mode}"
        return out

    def starts_clean(self) -> bool:
        """A start of the venv's Python runs no ``.pth`` of the recipe (it would leave the marker)."""
        subprocess.run([str(self.setup.venv / "bin" / "python"), "-c", "pass"], check=True, timeout=60)
        return not self.marker.exists()

    def keep(self, backup: Path) -> None:
        for d in (self.home, self.etc):
            shutil.copytree(d, backup / d.name, symlinks=True)

    def restore(self, backup: Path) -> None:
        """The decoys as :meth:`keep` found them (after a command changed them: the next is judged on its own)."""
        for d in (self.home, self.etc):
            shutil.rmtree(d)
            shutil.copytree(backup / d.name, d, symlinks=True)
        self.marker.unlink(missing_ok=True)


# -- the hostile recipe ------------------------------------------------------------------------------

SNOOP = """\
set(loot "{ran}\\n")
foreach(p "{home}/secret" "{home}/.ssh/id_rsa" "{etc}/shadow" "{outside}/secret")
  if(EXISTS "${{p}}")
    file(READ "${{p}}" s)
    string(APPEND loot "${{p}}: ${{s}}")
  endif()
endforeach()
file(GLOB listing LIST_DIRECTORIES true "{home}/*" "{home}/.*" "{etc}/*" "{purelib}/*")
string(APPEND loot "listing: ${{listing}}\\n")
execute_process(COMMAND env OUTPUT_VARIABLE envdump ERROR_QUIET)
string(APPEND loot "env: ${{envdump}}\\n")
message(STATUS "${{loot}}")
"""

#: The configure of the engine: the snoop, its loot in the build dir (beside the library), build.log into the venv.
ENGINE_HOSTILE = """\
{snoop}file(WRITE "${{CMAKE_BINARY_DIR}}/libtiny.so.loot" "${{loot}}")
file(CREATE_LINK "{purelib}/evil.pth" "${{CMAKE_BINARY_DIR}}/build.log" SYMBOLIC)
add_custom_target(hostile_say COMMAND ${{CMAKE_COMMAND}} -E echo
  "import pathlib$<SEMICOLON> pathlib.Path(r'{marker}').write_text('ran')" VERBATIM)
add_dependencies(tiny hostile_say)
"""

#: A failing build leaving links where the host's files of the next try were (and the log).
FAILING = """\
file(MAKE_DIRECTORY "${{CMAKE_BINARY_DIR}}/.sandbox")
{links}add_custom_target(hostile_fail COMMAND false)
add_dependencies(tiny hostile_fail)
"""

#: The binding's CMake project: the snoop; for the ABI check's compile surface (HEADERS_ONLY) a unit that
#: includes the loot as an #error and the decoy shadow; for the wheel a note, the loot and (PTH) a .pth.
BINDING_CMAKE = """\
cmake_minimum_required(VERSION 3.21)
project(tiny_binding LANGUAGES NONE)
{snoop}if(HEADERS_ONLY)
  enable_language(CXX)
  string(REPLACE "\\n" " " flat "${{loot}}")
  file(WRITE "${{CMAKE_CURRENT_BINARY_DIR}}/loot.h" "#error ${{flat}}\\n")
  add_library(evil OBJECT evil.cpp)
  target_include_directories(evil PRIVATE "${{CMAKE_CURRENT_BINARY_DIR}}")
  return()
endif()
file(WRITE "${{CMAKE_CURRENT_BINARY_DIR}}/loot.txt" "${{loot}}")
install(FILES "${{CMAKE_CURRENT_BINARY_DIR}}/loot.txt" DESTINATION "${{HARNESS_PACKAGE}}")
"""
PTH = """\
file(WRITE "${{CMAKE_CURRENT_BINARY_DIR}}/zz-tiny.pth" "import pathlib; pathlib.Path(r'{marker}').write_text('ran')\\n")
install(FILES "${{CMAKE_CURRENT_BINARY_DIR}}/zz-tiny.pth" DESTINATION .)
"""


#: Included where it is there (on the host, before the issue): where it is not, the header still parses, so the
#: ABI check before each build passes and the builds go on.
SHADOW_INCLUDE = '#if __has_include("{etc}/shadow")\n#include "{etc}/shadow"\n#endif\n'


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines))


@dataclass(frozen=True)
class Hostile:
    """The hostile recipe's texts, naming the decoys by their paths."""

    d: Decoys

    def _fmt(self, text: str, **more: str) -> str:
        d = self.d
        return text.format(home=d.home, etc=d.etc, outside=d.setup.recipe.outside, purelib=d.purelib,
                           marker=d.marker, **more)

    def snoop(self, ran: str) -> str:
        return self._fmt(SNOOP, ran=ran)

    @property
    def evil_header(self) -> str:
        return _new_file("include/evil.h", self._fmt(SHADOW_INCLUDE))

    def patch(self, *, failing: bool = False) -> str:
        """The series' second patch: the engine's configure, and the extra ABI header."""
        if not failing:
            extra = self._fmt(ENGINE_HOSTILE, snoop=self.snoop(CONFIGURE_RAN))
        else:
            d = self.d
            links = {"harness-init-cache.cmake": d.home / ".bashrc", ".sandbox/passwd": d.etc / "passwd",
                     ".sandbox/group": d.etc / "no-such-dir" / "group",
                     ".cmake/api/v1/query/client-harness/codemodel-v2": d.etc / "query",
                     "ccache-stats.log": d.purelib / "stats.pth", "build.log": d.purelib / "evil-retry.pth"}
            made = "".join(f'file(REMOVE "${{CMAKE_BINARY_DIR}}/{name}")\n'
                           f'file(CREATE_LINK "{target}" "${{CMAKE_BINARY_DIR}}/{name}" SYMBOLIC)\n'
                           for name, target in links.items())
            extra = self.snoop(CONFIGURE_RAN) + FAILING.format(links=made)
        return cmake_patch(extra) + self.evil_header

    def binding(self, folder: Path, *, pth: bool) -> None:
        b = folder / "binding"
        b.mkdir(exist_ok=True)
        (b / "CMakeLists.txt").write_text(self._fmt(BINDING_CMAKE, snoop=self.snoop(BINDING_RAN))
                                          + (self._fmt(PTH) if pth else ""))
        (b / "evil.cpp").write_text(self._fmt('#include "loot.h"\n' + SHADOW_INCLUDE))

    def descriptor(self, upstream: Upstream, face: str) -> str:
        """``abi``: the hostile source commit and ``include/evil.h`` among ``abi.headers``; ``build``: the clean
        commit and the usual headers (before the issue the host's parse of the others failed the ABI check every
        build starts with, and no build ran)."""
        if face == "build":
            return DESCRIPTOR.format(url=upstream.url, commit=upstream.clean)
        text = DESCRIPTOR.format(url=upstream.url, commit=upstream.hostile)
        assert "  headers: [include/tiny.h]\n" in text
        return text.replace("  headers: [include/tiny.h]\n", "  headers: [include/tiny.h, include/evil.h]\n")

    def write(self, folder: Path, upstream: Upstream, *, face: str, pth: bool = True) -> None:
        """The hostile recipe into ``folder`` (``engines/tiny``), with its ``face``'s descriptor."""
        (folder / "engine.yaml").write_text(self.descriptor(upstream, face))
        (folder / "patches" / HOSTILE_PATCH).write_text(self.patch())
        self.binding(folder, pth=pth)

    def link_shared(self, folder: Path) -> Path:
        """``engines/_shared`` beside ``folder``, leading to the decoy etc dir."""
        shared = folder.parent / "_shared"
        shared.symlink_to(self.d.etc, target_is_directory=True)
        return shared


@dataclass(frozen=True)
class Upstream:
    """The tiny library's repository, in the downloads cache: a recipe from history is materialized in the cache,
    and an untrusted recipe fetches a repository of this host only from its own project or that cache."""

    url: str
    clean: str
    """The commit the clean recipes pin."""
    hostile: str
    """A commit whose ``tiny.h`` includes the decoy shadow (the old pin's headers, parsed by the ABI diff)."""


def _upstream(d: Decoys) -> Upstream:
    made, one, _ = _repo(d.setup.recipe.scratch / "upstream")
    work = made.parent / "tiny-src"
    _git("checkout", "-q", "-b", "hostile", one, cwd=work)
    header = work / "include" / "tiny.h"
    header.write_text(header.read_text().replace("#include <stdint.h>\n", "#include <stdint.h>\n"
                                                 + SHADOW_INCLUDE.format(etc=d.etc)))
    _git("commit", "-qam", "tiny: hostile header", cwd=work)
    hostile = _git("rev-parse", "HEAD", cwd=work)
    _git("push", "-q", str(made), "hostile", cwd=work)
    bare = d.setup.recipe.cache / "downloads" / "tiny.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    made.rename(bare)
    return Upstream(url=bare.as_uri(), clean=one, hostile=hostile)


# -- the scenario ------------------------------------------------------------------------------------

@dataclass
class Outcome:
    argv: tuple[str, ...]
    returncode: int
    output: str
    changed: list[str]
    """The decoy entries that differ after the command (added, removed or changed)."""
    starts_clean: bool


@dataclass
class Scenario:
    decoys: Decoys
    upstream: Upstream
    surface: str
    """The folder's committed ABI surface, put back where an ABI command may have rewritten it."""
    proj: Path
    reports: Path
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.decoys.setup.recipe.folder


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]
    expect: int | None
    """The exit status the command must end with; None where the command over this recipe may fail or not."""
    phase: str = "folder"
    """``folder``: the untrusted ``$HARNESS_ENGINES_PATH`` folder; ``root``: the project root's history."""
    prepare: Callable[[Scenario], None] | None = None


def _failing_build(s: Scenario) -> None:
    Hostile(s.decoys).write(s.folder, s.upstream, face="build")
    (s.folder / "patches" / HOSTILE_PATCH).write_text(Hostile(s.decoys).patch(failing=True))
    (s.folder / "abi" / "surface.json").write_text(s.surface)


def _hostile_build(s: Scenario) -> None:
    (s.folder / "patches" / HOSTILE_PATCH).write_text(Hostile(s.decoys).patch())


def _link_shared(s: Scenario) -> None:
    Hostile(s.decoys).link_shared(s.folder)


def _unlink_shared(s: Scenario) -> None:
    (s.folder.parent / "_shared").unlink()


def _binding_without_pth(s: Scenario) -> None:
    Hostile(s.decoys).binding(s.folder, pth=False)


#: The project root's older commits: the hostile recipe's two faces.
OLD_BUILD, OLD_ABI = "<old-build>", "<old-abi>"

STEPS = [
    # the folder, its ABI face: the source's tiny.h, the extra ABI header and the binding's unit include the decoy
    # shadow (in the sandbox not there, never read); the binding's #error carries what its configure found
    Step("fetch", ("fetch", "tiny"), 0),
    Step("patch", ("patch", "tiny"), 0),
    Step("abi-snapshot", ("abi", "snapshot", "tiny"), None),
    Step("abi-check", ("abi", "check", "tiny"), None),
    # its build face: a failed build (exit 8) leaving links at the host's old places, then the retry (the build
    # dir holding a link where the file-API query goes is made again; the patch fails the build again)
    Step("build-failing", ("build", "tiny", "--variant", "cpu"), BuildError.exit_code, prepare=_failing_build),
    Step("build-retry", ("build", "tiny", "--variant", "cpu"), BuildError.exit_code),
    # build.log linked into the venv: the build itself succeeds, and the host never writes through the link
    Step("build", ("build", "tiny", "--variant", "cpu"), 0, prepare=_hostile_build),
    # engines/_shared leads to the decoy etc dir: the ABI check reads no binding source through it (an error
    # naming it), build-binding refuses it before anything is built (ConfigError)
    Step("abi-check-shared", ("abi", "check", "tiny"), None, prepare=_link_shared),
    Step("build-binding-shared", ("build-binding", "tiny", "--variant", "cpu"), ConfigError.exit_code),
    # a .pth in the wheel: BindingError, nothing installed or unpacked
    Step("build-binding-pth", ("build-binding", "tiny", "--variant", "cpu"), BindingError.exit_code,
         prepare=_unlink_shared),
    # the same project without the .pth: built in the sandbox, unpacked under the cache, never installed
    Step("build-binding", ("build-binding", "tiny", "--variant", "cpu", "--force"), 0, prepare=_binding_without_pth),
    # the project root's history (recipes from it are untrusted; HEAD, the clean recipe, is trusted)
    Step("build-rev", ("build", "tiny", "--variant", "cpu", "--rev", OLD_BUILD), 0, phase="root"),
    Step("abi-check-rev", ("abi", "check", "tiny", "--rev", OLD_ABI), None, phase="root"),
    Step("abi-diff", ("abi", "diff", OLD_ABI, "HEAD", "--engine", "tiny"), None, phase="root"),
    # HEAD's fetch, patch, ABI check and build pass, the old pin's ABI diff parses the hostile source; HEAD has no
    # binding, so the binding stage fails and what needs it is skipped: exit 1, never a crash
    Step("qualify-old-rev", ("qualify", "tiny", "--old-rev", OLD_ABI, "--no-bench", "--variant", "cpu",
                             "--arch", "none", "--out", "{reports}"), None, phase="root"),
]


def _project_root(s: Scenario) -> dict[str, str]:
    """A project root (``$HARNESS_ROOT``) whose older commits hold the hostile recipe (its build face, then its
    ABI face; ``engines/_shared`` leading to the decoy etc dir) and whose HEAD the clean one. Its commits by name."""
    d, root = s.decoys, s.proj
    shutil.copytree(Path(__file__).resolve().parents[2] / "matrix", root / "matrix")
    folder = root / "engines" / "tiny"
    (folder / "patches").mkdir(parents=True)
    (folder / "patches" / "0001-tiny-clamp-negative-scale.patch").write_text(PATCH)
    (folder / "abi").mkdir()
    (folder / "abi" / "surface.json").write_text(s.surface)
    Hostile(d).link_shared(folder)
    _git("init", "-q", "-b", "main", cwd=root)
    commits = {}
    for name, face in ((OLD_BUILD, "build"), (OLD_ABI, "abi")):
        Hostile(d).write(folder, s.upstream, face=face)
        _git("add", "-A", cwd=root)
        _git("commit", "-qm", f"hostile, {face}", cwd=root)
        commits[name] = _git("rev-parse", "HEAD", cwd=root)
    _git("rm", "-rq", "engines/_shared", f"engines/tiny/patches/{HOSTILE_PATCH}", "engines/tiny/binding", cwd=root)
    (folder / "engine.yaml").write_text(DESCRIPTOR.format(url=s.upstream.url, commit=s.upstream.clean))
    _git("commit", "-qam", "clean", cwd=root)
    return commits


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scratch = tmp_path_factory.mktemp("decoys")
    setup = make_setup(scratch)  # the clean folder built once, the venv at $HOME/.venv
    d = Decoys(setup)
    d.fill()
    s = Scenario(decoys=d, upstream=_upstream(d), surface=(setup.recipe.folder / "abi" / "surface.json").read_text(),
                 proj=scratch / "proj", reports=scratch / "reports")
    Hostile(d).write(s.folder, s.upstream, face="abi")
    commits = _project_root(s)
    d.keep(scratch / "decoys-as-made")
    root_env = {"HARNESS_ROOT": str(s.proj), "HARNESS_ENGINES_PATH": ""}
    for step in STEPS:
        if step.prepare:
            step.prepare(s)
        argv = tuple(commits.get(a, a).replace("{reports}", str(s.reports)) for a in step.argv)
        before = d.state()
        run = setup.harness(*argv, env={**SECRET_ENV, **(root_env if step.phase == "root" else {})})
        after = d.state()
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        s.outcomes[step.name] = Outcome(argv, run.returncode, run.output, changed, d.starts_clean())
        if changed or not s.outcomes[step.name].starts_clean:
            d.restore(scratch / "decoys-as-made")
    return s


# -- the assertions ----------------------------------------------------------------------------------

NAMES = [s.name for s in STEPS]


def _report(o: Outcome) -> str:
    return f"harness {' '.join(o.argv)} (exit {o.returncode}):\n{o.output[-6000:]}"


@pytest.mark.parametrize("name", NAMES)
def test_the_decoys_are_byte_identical(scenario: Scenario, name: str) -> None:
    """The decoy home (its key, its venv's site-packages) and etc dir, content and mode, after the command;
    a start of the venv's Python runs nothing the recipe wrote."""
    o = scenario.outcomes[name]
    assert not o.changed, f"changed: {o.changed}\n{_report(o)}"
    assert o.starts_clean, f"a .pth of the recipe ran at the venv's start\n{_report(o)}"


@pytest.mark.parametrize("name", NAMES)
def test_no_secret_and_no_traceback_in_the_output(scenario: Scenario, name: str) -> None:
    o = scenario.outcomes[name]
    leaked = [s for s in SECRETS if s in o.output]
    assert not leaked, f"{leaked} in the output of {_report(o)}"
    assert "Traceback" not in o.output, _report(o)


@pytest.mark.parametrize("name", [s.name for s in STEPS if s.expect is not None])
def test_each_refusal_and_build_ends_as_it_should(scenario: Scenario, name: str) -> None:
    """What the commands say: a failing build exit 8, the build through a linked log 0, the binding with
    ``_shared`` leading out 3, the wheel with a ``.pth`` 15, the clean wheel 0 (unpacked, not installed)."""
    o = scenario.outcomes[name]
    step = next(s for s in STEPS if s.name == name)
    assert o.returncode == step.expect, _report(o)
    if name == "build-binding-pth":
        assert "zz-tiny.pth is a .pth file" in o.output, _report(o)
    if name == "build-binding-shared":
        assert "_shared" in o.output and "outside" in o.output, _report(o)
    if name == "build-binding":
        assert "not installed into this Python" in o.output, _report(o)


def _texts(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` (links not followed, unreadable ones skipped), and each member of
    every zip (a wheel) among them, as text."""
    out: dict[str, str] = {}
    for top, _, files in os.walk(root):
        for name in files:
            p = os.path.join(top, name)
            try:
                if not stat.S_ISREG(os.lstat(p).st_mode):
                    continue
                data = Path(p).read_bytes()
            except OSError:
                continue
            out[p] = data.decode(errors="replace")
            if zipfile.is_zipfile(p):
                with zipfile.ZipFile(p) as zf:
                    for member in zf.namelist():
                        out[f"{p}!{member}"] = zf.read(member).decode(errors="replace")
    return out


def test_no_secret_under_the_cache_nor_in_the_report(scenario: Scenario) -> None:
    """Build logs, build dirs, artifacts, wheels (opened), unpacked bindings, recipes from history,
    stamps; and qualify's report."""
    cache = scenario.decoys.setup.recipe.cache
    texts = {**_texts(cache), **_texts(scenario.reports)}
    leaks = {p: [s for s in SECRETS if s in t] for p, t in texts.items() if any(s in t for s in SECRETS)}
    assert not leaks, leaks
    traced = [p for p, t in _texts(scenario.reports).items() if "Traceback" in t]
    assert not traced, traced


def test_the_hostile_code_ran(scenario: Scenario) -> None:
    """Not an empty test: the engine's configure and the binding's CMake project ran (their markers are in the
    logs under the cache), the wheel of the last binding was unpacked, qualify wrote its report."""
    cache = scenario.decoys.setup.recipe.cache
    texts = _texts(cache)
    assert any(CONFIGURE_RAN in t for t in texts.values()), "the engine's hostile configure never ran"
    assert any(BINDING_RAN in t for t in texts.values()), "the binding's hostile CMake project never ran"
    assert list((cache / "binding").rglob("site")), "the clean binding wheel was not unpacked"
    assert list(scenario.reports.rglob("qualify.json")), _report(scenario.outcomes["qualify-old-rev"])
