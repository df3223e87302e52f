"""What the values of a recipe may be: each rule once, checked when the recipe loads.

A recipe (descriptor, fixtures list) is untrusted input (README "Trust model"): a value that
becomes a path, a CMake cache entry, a shell word or a program to run is confined here, before
any stage uses it, and a value outside its rule is a :class:`ConfigError` naming ``file:field``.

- A CMake define *name* is an identifier: it is written into the ``-C`` init-cache script, where
  a ``)`` and a newline would be CMake code.
- The compiler, its launchers, the toolchain file, project includes and the other variables
  that choose which program or script CMake runs are the harness's to set (the variant plugins
  and the host probe), never a descriptor's or a matrix row's: :func:`reserved_define`.
- Artifact globs and program names are relative paths that never climb (no ``..``, not absolute);
  where the collected files land is checked again when they are placed (``harness.build.cmake``).
- A fixture's ``filename``/``dest`` is a bare file name; its name is a plain one (letters, digits, ``-``,
  ``_``: it names the fixture's stamp and lock files in the cache); an ``env:`` role is an identifier (it
  is printed after ``export``).
- A git ``source.url`` is a URL git fetches over its network protocols (``https``, ``http``, ``ssh``,
  ``git``) or a local repository (``file://``, a path): never an option (``--upload-pack=...``) nor a
  ``<transport>::`` remote helper (``ext::sh -c ...`` runs a command). A local one is read for trusted
  recipes only (``harness.build.pipeline.check_source_path``).
- The ``abi:`` paths (``headers``, ``constant_headers``, ``include_dirs``, ``used_from``) are relative and
  never climb: libclang reads what they name, on the host for a trusted recipe.
- A regular expression (``provenance.build_from_version``, ``smoke.cpu_level``, ``abi.used_pattern``)
  compiles at load and runs with a time limit (:func:`recipe_regex`): a pattern that backtracks
  without end (``(a|aa)+$``) is a :class:`ConfigError`, not a command that never returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError

if TYPE_CHECKING:
    import regex as _regex

#: A CMake variable name as a descriptor may write one (what ``set(NAME ...)`` takes unquoted).
DEFINE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
#: An environment variable name (``export NAME=...``).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
#: A name the harness makes file names of (a fixture's ``.stamps/<name>.json``, ``model-<name>.lock``).
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

#: Variables that pick a program, a script or a toolchain CMake runs: the harness's own choice.
_RESERVED = re.compile(
    r"^CMAKE_(?:"
    r"\w+_COMPILER(?:_LAUNCHER|_TARGET|_EXTERNAL_TOOLCHAIN|_AR|_RANLIB)?"  # CMAKE_C_COMPILER, ..._LAUNCHER
    r"|\w+_LINKER_LAUNCHER|LINKER|\w+_LINKER|AR|RANLIB|NM|OBJCOPY|OBJDUMP|STRIP|ADDR2LINE|READELF|DLLTOOL|MT"
    r"|TOOLCHAIN_FILE|MAKE_PROGRAM|CROSSCOMPILING_EMULATOR|SYSROOT(?:_COMPILE|_LINK)?"
    r"|PROJECT_INCLUDE(?:_BEFORE)?|PROJECT_\w+_INCLUDE(?:_BEFORE)?|PROJECT_TOP_LEVEL_INCLUDES"
    r"|USER_MAKE_RULES_OVERRIDE(?:_\w+)?|MODULE_PATH"
    r"|\w+_CLANG_TIDY|\w+_CPPCHECK|\w+_CPPLINT|\w+_INCLUDE_WHAT_YOU_USE|LINK_WHAT_YOU_USE_CHECK"
    r"|\w+_(?:LINK_EXECUTABLE|CREATE_SHARED_LIBRARY|CREATE_SHARED_MODULE|CREATE_STATIC_LIBRARY|COMPILE_OBJECT)"
    r"|EXPORT_COMPILE_COMMANDS_FILE|GENERATOR(?:_\w+)?"
    r")$")


def reserved_define(name: str) -> bool:
    """Whether ``name`` chooses a program, script or toolchain CMake runs (the compiler, a launcher,
    the toolchain file, a project include, a rule override, a static-analysis hook)."""
    return bool(_RESERVED.match(name))


def check_define_name(name: str, *, where: str) -> str:
    """``name`` when it is a CMake identifier; ConfigError naming ``where`` otherwise."""
    if not DEFINE_NAME.match(name):
        msg = (f"{where}: {name[:80]!r} is not a CMake variable name: a define name is letters, digits and "
               "'_' (not starting with a digit); it is written into CMake's init-cache script, where anything "
               "else would be CMake code. Rename the define")
        raise ConfigError(msg)
    return name


def check_recipe_defines(defines: Mapping[str, Any], *, where: str) -> None:
    """The defines a descriptor writes: identifiers, none of them reserved for the harness."""
    for name in defines:
        check_define_name(str(name), where=where)
        if reserved_define(str(name)):
            msg = (f"{where}.{name}: a descriptor does not choose the compiler, its launchers, the toolchain "
                   "file or project includes: the variant plugins and the host probe do (ccache is the "
                   "launcher when installed; a cross row's toolchain file comes from its plugin). Remove "
                   f"{name} from the descriptor; for one build of your own, pass --define {name}=VALUE")
            raise ConfigError(msg)


def relative_parts(value: str) -> tuple[str, ...] | None:
    """The ``/``-separated parts of a relative path that never climbs; None for an absolute path,
    one with a ``..`` part, a backslash, a NUL or a control character, or an empty one."""
    if not value or value.startswith("/") or "\\" in value or re.search(r"[\x00-\x1f\x7f]", value):
        return None
    parts = tuple(p for p in PurePosixPath(value).parts if p != ".")
    if any(p == ".." for p in parts):
        return None
    return parts


def check_relative(value: str, *, where: str, what: str, inside: str = "the tree") -> str:
    """``value`` when it is a relative path (or glob) that stays below where it is taken from."""
    if relative_parts(value) is None:
        msg = (f"{where}: {value[:120]!r} is not allowed: {what} is a relative path inside {inside} "
               "(no '..', not absolute, no '\\' or control characters)")
        raise ConfigError(msg)
    return value


def check_bare_name(value: str, *, where: str, what: str) -> str:
    """``value`` when it is one file name: no ``/``, not ``.`` or ``..``, no control characters."""
    parts = relative_parts(value)
    if parts is None or len(parts) != 1 or value in (".", ".."):
        msg = (f"{where}: {value[:120]!r} is not allowed: {what} is a bare file name (no '/', not '.' or "
               "'..', no control characters)")
        raise ConfigError(msg)
    return value


def check_plain_name(value: str, *, where: str, what: str) -> str:
    """``value`` when it is a plain name: letters, digits, ``-`` and ``_``, not starting with ``-`` or
    ``_``, at most 64 characters. Stricter than :func:`check_bare_name`: the name is a part of file names
    the harness makes, and of the names a user types."""
    if not PLAIN_NAME.fullmatch(value):
        msg = (f"{where}: {value[:120]!r} is not allowed: {what} is letters, digits, '-' and '_' (starting with "
               "a letter or digit, at most 64 characters): it becomes part of file names in the cache")
        raise ConfigError(msg)
    return value


def check_env_name(name: str, *, where: str) -> str:
    """``name`` when it can follow ``export`` in a shell: an identifier."""
    if not ENV_NAME.match(name):
        msg = (f"{where}: {name[:80]!r} is not an environment variable name (letters, digits, '_'; not "
               "starting with a digit): it is printed after `export` and read by a shell")
        raise ConfigError(msg)
    return name


#: The protocols a git source may be fetched over (git's own GIT_ALLOW_PROTOCOL list, set for every fetch).
GIT_PROTOCOLS: tuple[str, ...] = ("https", "http", "ssh", "git", "file")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:")


def git_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with git held to :data:`GIT_PROTOCOLS` (no remote helper, whatever the user's config
    says) and never prompting: the environment of every git call on a recipe's URL."""
    return {**base, "GIT_ALLOW_PROTOCOL": ":".join(GIT_PROTOCOLS), "GIT_TERMINAL_PROMPT": "0"}


def run_git(*args: str, cwd: Path | None = None) -> str:
    """``git ARGS`` in :func:`git_env`'s environment: its stdout, stripped; :class:`SubprocessError` on failure."""
    import os
    import subprocess

    from harness.core.errors import SubprocessError

    argv = ["git", *args]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, env=git_env(os.environ))
    if r.returncode:
        raise SubprocessError(argv, r.returncode, r.stdout + r.stderr)
    return r.stdout.strip()


def git_url_is_local(url: str) -> bool:
    """Whether a git URL names a repository on this host (``file://``, a path) rather than a server."""
    m = _URL_SCHEME.match(url)
    if m:
        return m.group(1).lower() == "file"
    return not _SCP_LIKE.match(url)


#: The upload-pack a local repository is served by: git's local transport ignores a partial-clone filter
#: ("filtering not recognized by server") unless the serving side allows one, and then sends every blob,
#: which a mirror without its large blobs cannot ("possible repository corruption").
LOCAL_UPLOAD_PACK = "git -c uploadpack.allowFilter=true upload-pack"


def upload_pack_args(url: str) -> list[str]:
    """``--upload-pack=...`` for a repository on this host (a path or ``file://``), else nothing."""
    return [f"--upload-pack={LOCAL_UPLOAD_PACK}"] if git_url_is_local(url) else []


def check_git_url(url: str, *, where: str) -> str:
    """``url`` when git fetches it as a repository: no option, no remote helper, a protocol of
    :data:`GIT_PROTOCOLS` (a scp-like ``user@host:path`` is ssh)."""
    why = None
    if not url or url.startswith("-"):
        why = "it would be read as an option of git (e.g. --upload-pack=COMMAND runs COMMAND)"
    elif "::" in url.split("/", 1)[0] or any(ord(c) < 32 for c in url):
        why = "a '<transport>::' address runs a git remote helper (ext::sh -c ... runs a command)"
    else:
        m = _URL_SCHEME.match(url)
        if m and m.group(1).lower() not in GIT_PROTOCOLS:
            why = f"git fetches over {', '.join(GIT_PROTOCOLS)} only, not {m.group(1)}://"
    if why:
        raise ConfigError(f"{where}: {url[:120]!r} is not a git repository URL: {why}")
    return url


#: Seconds a recipe's regular expression may take over one input.
REGEX_TIMEOUT_S = 2.0


class RecipeRegex:
    """A recipe's regular expression, compiled, every use under :data:`REGEX_TIMEOUT_S`."""

    def __init__(self, pattern: str, *, where: str) -> None:
        import regex

        self.where, self.text = where, pattern
        try:
            self._re: _regex.Pattern[str] = regex.compile(pattern)
        except regex.error as e:
            raise ConfigError(f"{where}: {pattern[:120]!r} is not a regular expression ({e})") from None

    def _run(self, how: str, text: str) -> Any:
        try:
            return getattr(self._re, how)(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            msg = (f"{self.where}: the regular expression {self.text[:120]!r} ran over {REGEX_TIMEOUT_S:.0f} s on "
                   f"{len(text)} characters (it backtracks without end, e.g. a repeated group that can match "
                   "the same text two ways); write it so each character is matched one way")
            raise ConfigError(msg) from None

    def search(self, text: str) -> Any:
        return self._run("search", text)

    def fullmatch(self, text: str) -> Any:
        return self._run("fullmatch", text)

    def findall(self, text: str) -> list[Any]:
        return list(self._run("findall", text))


def recipe_regex(pattern: str, *, where: str) -> RecipeRegex:
    """``pattern`` (a recipe's value) compiled for use with a time limit; a ConfigError naming ``where``
    when it does not compile."""
    return RecipeRegex(pattern, where=where)


def check_abi_paths(path: Path, abi: Mapping[str, Any]) -> None:
    """The ``abi:`` paths: headers and include dirs relative to the engine tree, ``used_from`` relative to
    the recipe's project; none absolute or climbing (libclang reads what they name)."""
    for key in ("headers", "constant_headers", "include_dirs"):
        for i, value in enumerate(abi.get(key) or ()):
            check_relative(str(value), where=f"{path}:abi.{key}[{i}]", what=f"an abi.{key} entry (read by libclang)",
                           inside="the engine's source tree")
    if abi.get("used_from"):
        check_relative(str(abi["used_from"]), where=f"{path}:abi.used_from", inside="the recipe's project",
                       what="abi.used_from (the binding sources whose identifiers are read)")


def check_descriptor(path: Path, data: Mapping[str, Any]) -> None:
    """Every value of a schema-valid descriptor that becomes a define, a path or a program."""
    source = dict(data.get("source") or {})
    if source.get("kind") == "git" and source.get("url") is not None:
        check_git_url(str(source["url"]), where=f"{path}:source.url")
    cmake = dict(data.get("cmake") or {})
    check_recipe_defines(dict(cmake.get("base") or {}), where=f"{path}:cmake.base")
    for key, values in dict(cmake.get("intents") or {}).items():
        for value, defines in dict(values or {}).items():
            check_recipe_defines(dict(defines or {}), where=f"{path}:cmake.intents.{key}.{value}")
    artifacts = dict(data.get("artifacts") or {})
    for i, pattern in enumerate(artifacts.get("lib", ())):
        check_bare_name(str(pattern), where=f"{path}:artifacts.lib[{i}]",
                        what="a library pattern (a glob of file names in the build's library directories)")
    bins = [("artifacts.bin", b) for b in artifacts.get("bin", ())]
    bins += [("cross.bin", b) for b in dict(data.get("cross") or {}).get("bin", ())]
    # a bisect probe builds and collects these programs, with these defines, as a matrix row's
    bisect = dict(data.get("bisect") or {})
    for kind, programs in dict(bisect.get("programs") or {}).items():
        bins += [(f"bisect.programs.{kind}", b) for b in programs or ()]
    for level, defines in dict(bisect.get("levels") or {}).items():
        check_recipe_defines(dict(defines or {}), where=f"{path}:bisect.levels.{level}")
    for field, name in bins:
        check_bare_name(str(name), where=f"{path}:{field}", what="a program name (collected into bin/)")
    for i, entry in enumerate(artifacts.get("include", ())):
        where = f"{path}:artifacts.include[{i}]"
        base, _, pattern = str(entry).rpartition(":")
        if base:
            check_relative(base, where=where, what="the DIR of a DIR:GLOB header entry")
        check_relative(pattern, where=where, what="a header glob (DIR:GLOB, relative to DIR or the tree)")
    smoke = dict(data.get("smoke") or {})
    if smoke.get("argv"):
        check_relative(str(smoke["argv"][0]), where=f"{path}:smoke.argv[0]", inside="the artifact",
                       what="the program a smoke check runs (e.g. bin/tool)")
    if smoke.get("cpu_level"):
        recipe_regex(str(smoke["cpu_level"]), where=f"{path}:smoke.cpu_level")
    check_abi_paths(path, dict(data.get("abi") or {}))
    if dict(data.get("abi") or {}).get("used_pattern"):
        recipe_regex(str(data["abi"]["used_pattern"]), where=f"{path}:abi.used_pattern")
    for package, pattern in dict(dict(data.get("provenance") or {}).get("build_from_version") or {}).items():
        recipe_regex(str(pattern), where=f"{path}:provenance.build_from_version.{package}")
    build_tags = dict(dict(data.get("provenance") or {}).get("build_tags") or {})
    if build_tags.get("pattern"):
        recipe_regex(str(build_tags["pattern"]), where=f"{path}:provenance.build_tags.pattern")
