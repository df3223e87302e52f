"""What a binding wheel may hold, checked before it is installed or unpacked (README "Trust model").

A binding's ``CMakeLists.txt`` is code of its recipe, and CMake's ``install()`` decides what the wheel
carries: ``install(FILES x.pth DESTINATION .)`` puts a ``.pth`` at the top of site-packages, which
every later start of that Python runs (``-P`` does not stop it); ``${SKBUILD_SCRIPTS_DIR}`` puts a
command on ``$PATH``; a top-level ``yaml.py`` shadows a library. pip installs whatever the wheel's
RECORD lists, so the harness reads the wheel first, as pip's own installer reads it
(`the binary distribution format`_: the RECORD, the ``.dist-info`` and ``.data`` directories), and
refuses one that holds anything but its own package and ``.dist-info``:

- no ``.pth``, no ``sitecustomize``/``usercustomize`` (they run at interpreter start-up);
- no command: no ``console_scripts``/``gui_scripts`` entry point, no ``.data/`` (scripts, headers,
  data or a second purelib/platlib land outside the package); entry points only in the
  ``harness.bindings`` group, naming the package;
- every member listed in RECORD with its sha256 and size, every RECORD line a member; no absolute
  path, no ``..``, no duplicate or symlink member; bounded sizes.

The archive is opened with the standard library's :mod:`zipfile`; the RECORD and the entry points
are parsed by :mod:`importlib.metadata` (``Distribution.at`` over a :class:`zipfile.Path`), the wheel's
file name by :mod:`packaging.utils`.

.. _the binary distribution format: https://packaging.python.org/en/latest/specifications/binary-distribution-format/
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from harness.core.errors import BindingError

#: The entry-point group a binding registers in (``harness.runtime.discovery`` reads it).
ENTRY_POINT_GROUP = "harness.bindings"
#: The most all members of a wheel may hold, uncompressed (a cuda row's libraries are ~1 GB).
WHEEL_LIMIT = 8 << 30
#: The most one ``.dist-info`` file (RECORD, METADATA, entry_points.txt) may hold.
METADATA_LIMIT = 16 << 20
#: Names that run when an interpreter starts, wherever they sit.
STARTUP_MODULES = ("sitecustomize", "usercustomize")
#: RECORD's own entries carry no hash (the spec: RECORD, and its signatures).
UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")


def _refuse(wheel: Path, found: str, package: str) -> BindingError:
    return BindingError(
        f"{wheel.name}: {found}. A binding wheel holds only its package {package}/ and its .dist-info "
        "(nothing that runs when Python starts, no command, no file outside the package, every file in "
        "its RECORD); not installed. Remove what puts it there (an install() of binding/CMakeLists.txt), "
        "then run harness build-binding again")


def _member_problem(name: str, package: str, dist_info: str) -> str:
    """Why the member ``name`` may not be in a binding wheel, or ""."""
    if "\\" in name or "\0" in name or name.startswith("/"):
        return f"member {name!r} is not a relative POSIX path"
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"member {name!r} has an empty, '.' or '..' component"
    top = parts[0]
    if top.endswith(".data"):
        return (f"member {name} is in the wheel's .data directory (scripts, headers or data installed "
                "outside the package, e.g. a console script)")
    if any(p.endswith(".pth") for p in parts):
        return f"member {name} is a .pth file (site-packages runs it at every start of Python)"
    if any(p.split(".", 1)[0] in STARTUP_MODULES for p in parts):
        return f"member {name} is a {parts[-1].split('.', 1)[0]} module (it runs at every start of Python)"
    if top not in (package, dist_info):
        return f"member {name} is outside the package {package}/ (a top-level module or directory of site-packages)"
    return ""


def _dist_info(wheel: Path, names: list[str], dist: str, package: str) -> str:
    """The one ``<name>-<version>.dist-info`` directory, named for ``dist``."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, _version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as e:
        raise _refuse(wheel, f"not a wheel's file name ({e})", package) from None
    if name != canonicalize_name(dist):
        raise _refuse(wheel, f"the distribution is {name}, expected {canonicalize_name(dist)}", package)
    tops = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(tops) != 1 or canonicalize_name(tops[0].removesuffix(".dist-info").rpartition("-")[0]) != name:
        raise _refuse(wheel, f".dist-info directories {tops or 'none'}, expected one of {name}", package)
    return tops[0]


def _check_entry_points(wheel: Path, meta: importlib.metadata.Distribution, package: str) -> None:
    for ep in meta.entry_points:
        if ep.group in ("console_scripts", "gui_scripts"):
            raise _refuse(wheel, f"entry point {ep.name} in {ep.group} (a command installed on PATH)", package)
        if ep.group != ENTRY_POINT_GROUP or ep.value != package:
            raise _refuse(wheel, f"entry point {ep.group}: {ep.name} = {ep.value} (a binding registers only "
                                 f"{ENTRY_POINT_GROUP}: <engine>-<variant> = {package})", package)


def _digest(zf: zipfile.ZipFile, info: zipfile.ZipInfo, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with zf.open(info) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def _check_record(wheel: Path, zf: zipfile.ZipFile, files: dict[str, zipfile.ZipInfo], dist_info: str,
                  package: str) -> None:
    """Every member in RECORD with a matching sha256 (or stronger) and size; every RECORD line a member."""
    meta = importlib.metadata.PathDistribution(zipfile.Path(zf, f"{dist_info}/"))
    record = f"{dist_info}/RECORD"
    if record not in files:
        raise _refuse(wheel, f"no {record}", package)
    listed = {}
    for entry in meta.files or ():
        listed[str(PurePosixPath(entry))] = entry
    unlisted = sorted(set(files) - set(listed))
    if unlisted:
        raise _refuse(wheel, f"member {unlisted[0]} is not in its RECORD", package)
    missing = sorted(set(listed) - set(files))
    if missing:
        raise _refuse(wheel, f"RECORD lists {missing[0]}, which the wheel does not hold", package)
    unhashed = {f"{dist_info}/{n}" for n in UNHASHED}
    for name, info in sorted(files.items()):
        if name in unhashed:
            continue
        entry = listed[name]
        if entry.hash is None or entry.hash.mode not in ("sha256", "sha384", "sha512"):
            raise _refuse(wheel, f"RECORD gives {name} no sha256 hash", package)
        if entry.size is not None and entry.size != info.file_size:
            raise _refuse(wheel, f"RECORD gives {name} {entry.size} bytes, the wheel holds {info.file_size}", package)
        if _digest(zf, info, entry.hash.mode) != entry.hash.value:
            raise _refuse(wheel, f"{name} does not match its RECORD hash", package)
    _check_entry_points(wheel, meta, package)


def check_wheel(wheel: Path, *, dist: str, package: str) -> None:
    """Refuse (:class:`BindingError`) a binding wheel that holds anything but ``package/`` and the
    ``.dist-info`` of ``dist``, or whose RECORD does not account for every member (module docstring)."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise _refuse(wheel, f"not a zip archive ({e})", package) from None
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        dist_info = _dist_info(wheel, names, dist, package)
        seen: set[str] = set()
        total = 0
        files: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            if name in seen:
                raise _refuse(wheel, f"member {name} appears twice", package)
            seen.add(name)
            problem = _member_problem(name, package, dist_info)
            if not problem and stat.S_ISLNK(info.external_attr >> 16):
                problem = f"member {name} is a symbolic link"
            if not problem and name.startswith(f"{dist_info}/") and info.file_size > METADATA_LIMIT:
                problem = f"member {name} is {info.file_size} bytes, over the {METADATA_LIMIT}-byte limit"
            if problem:
                raise _refuse(wheel, problem, package)
            total += info.file_size
            if total > WHEEL_LIMIT:
                raise _refuse(wheel, f"its members hold over {WHEEL_LIMIT} bytes", package)
            if not info.is_dir():
                files[name] = info
        try:
            _check_record(wheel, zf, files, dist_info, package)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, csv.Error) as e:
            raise _refuse(wheel, f"its RECORD, entry points or a member cannot be read ({e})", package) from None
