"""Run-time variant discovery: find installed binding variants, verify them, order them.

Candidates come from the ``harness.bindings`` entry-point group and from
directories on ``HARNESS_BINDING_PATH`` (``os.pathsep``-separated). A candidate is
accepted only when its identity (engine, pin, variant, ABI fingerprint) matches
what this checkout expects; every rejected one is reported with the reason.

A binding is *usable* when the host has a device its code can run on, and *preferred* when
automatic choice should pick it. They differ for a CPU-type Vulkan device (Mesa's lavapipe):
the vulkan variant runs there, so naming it (``--variant vulkan``, ``$HARNESS_VARIANT``) loads
it, but automatic choice keeps the cpu build, which is faster on the same CPU.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import BindingError
from harness.core.host import probe
from harness.core.types import HostInfo

ENTRY_POINT_GROUP = "harness.bindings"
FORCE_ENV = "HARNESS_VARIANT"
PATH_ENV = "HARNESS_BINDING_PATH"


@dataclass(frozen=True, kw_only=True)
class Candidate:
    name: str
    package: str
    location: Path
    identity: dict[str, Any]
    accepted: bool
    reason: str = ""
    priority: int = 99
    forced_only: bool = False
    """Usable here but not chosen automatically (a vulkan build with only a CPU-type device)."""
    note: str = ""
    devices: tuple[int, ...] = ()
    """For a forced-only binding: the indices (in its API's enumeration order) of the devices it runs on."""

    @property
    def variant(self) -> str:
        return str(self.identity.get("variant", "?"))


def _cpu_type(device_type: str) -> bool:
    return "CPU" in device_type.upper()


def platform_priority(host: HostInfo) -> list[str]:
    """Platforms automatic choice picks from, in preference order: GPUs with a present device
    (not a CPU-type Vulkan device) first, then CPU."""
    if host.os == "darwin" and host.arch == "arm64":
        return ["mlx", "metal", "cpu"]
    order = []
    if host.has_gpu("cuda"):
        order.append("cuda")
    if any(g.api == "vulkan" and not _cpu_type(g.device_type) for g in host.gpus):
        order.append("vulkan")
    return [*order, "cpu", "package"]


def forced_only_platforms(host: HostInfo) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Platforms that run here only on a CPU-type device: platform -> (why automatic choice skips it,
    the device indices in the API's enumeration order, which is vulkaninfo's)."""
    out = {}
    vk = [g for g in host.gpus if g.api == "vulkan"]
    if vk and all(_cpu_type(g.device_type) for g in vk) and "vulkan" not in platform_priority(host):
        names = ", ".join(g.name for g in vk)
        out["vulkan"] = (f"only a CPU-type Vulkan device here ({names}): used when forced "
                         "(--variant vulkan); automatic choice prefers the cpu build", tuple(range(len(vk))))
    return out


def _from_entry_points() -> list[tuple[str, str, Path]]:
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        spec = importlib.util.find_spec(ep.value)
        if spec and spec.submodule_search_locations:
            out.append((ep.name, ep.value, Path(next(iter(spec.submodule_search_locations)))))
        else:
            out.append((ep.name, ep.value, Path("<missing>")))
    return out


def _from_path() -> list[tuple[str, str, Path]]:
    out = []
    for d in filter(None, os.environ.get(PATH_ENV, "").split(os.pathsep)):
        for ident in sorted(Path(d).glob("*/identity.json")):
            out.append((ident.parent.name, ident.parent.name, ident.parent))
    return out


def discover(engine: str, pin: str, abi_fingerprint: str | None, host: HostInfo | None = None) -> list[Candidate]:
    """Every candidate for ``engine``, accepted ones first in priority order."""
    host = host or probe()
    prio = platform_priority(host)
    forced_only = forced_only_platforms(host)
    usable = [*prio, *forced_only]
    seen: set[Path] = set()
    out: list[Candidate] = []
    for name, package, loc in _from_path() + _from_entry_points():
        if loc in seen:
            continue
        seen.add(loc)
        ident_file = loc / "identity.json"
        if not ident_file.is_file():
            out.append(Candidate(name=name, package=package, location=loc, identity={}, accepted=False,
                                 reason="no identity.json (not a harness binding, or a broken install)"))
            continue
        ident = json.loads(ident_file.read_text())
        if ident.get("engine") != engine:
            continue
        reason = ""
        if ident.get("pin") != pin:
            reason = f"built for pin {ident.get('pin')}, this checkout pins {pin}: rebuild with harness build-binding"
        elif abi_fingerprint and ident.get("abi_fingerprint") != abi_fingerprint:
            reason = (f"ABI fingerprint {str(ident.get('abi_fingerprint'))[:16]} differs from the committed surface "
                      f"{abi_fingerprint[:16]}: rebuild the artifact and binding")
        elif ident.get("platform") not in usable:
            reason = f"platform {ident.get('platform')} has no usable device here (order: {', '.join(prio)})"
        elif not (loc / "lib").is_dir():
            reason = "lib/ with the engine libraries is missing"
        platform = str(ident.get("platform"))
        p = usable.index(platform) if platform in usable else 99
        out.append(Candidate(name=name, package=package, location=loc, identity=ident, accepted=not reason,
                             reason=reason, priority=p, forced_only=platform in forced_only,
                             note=forced_only[platform][0] if platform in forced_only else "",
                             devices=forced_only[platform][1] if platform in forced_only else ()))
    out.sort(key=lambda c: (not c.accepted, c.priority, c.name))
    return out


def choose(engine: str, pin: str, abi_fingerprint: str | None, variant: str | None = None) -> Candidate:
    """The variant to load: ``variant`` or ``$HARNESS_VARIANT`` if given, else the best accepted one."""
    cands = discover(engine, pin, abi_fingerprint)
    wanted = variant or os.environ.get(FORCE_ENV) or None
    if wanted:
        for c in cands:
            if c.variant == wanted:
                if not c.accepted:
                    msg = f"variant {wanted} of {engine} is installed but rejected: {c.reason}"
                    raise BindingError(msg)
                return c
        found = ", ".join(c.variant for c in cands) or "none"
        msg = (f"no installed {engine} binding for variant {wanted} (installed: {found}); "
               f"run harness build-binding {engine} --variant {wanted}")
        raise BindingError(msg)
    for c in cands:
        if c.accepted and not c.forced_only:
            return c
    detail = "; ".join(f"{c.name}: {c.reason or c.note}" for c in cands) or "none installed"
    msg = f"no usable {engine} binding ({detail}); run harness build-binding {engine} --variant cpu"
    raise BindingError(msg)


def import_core(c: Candidate) -> Any:
    """Import the candidate's ``_core`` module from the candidate's own directory.

    Never by package name alone: a copy of the same package installed elsewhere (site-packages,
    while the candidate came from ``$HARNESS_BINDING_PATH``) would be loaded instead, and what
    ``engine info`` names would not be what runs. One process holds one copy of a package: a
    second location for a package already loaded is refused."""
    loaded = sys.modules.get(c.package)
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", None) or ".").resolve().parent
        if where == c.location.resolve():
            return importlib.import_module(f"{c.package}._core")
        core_file = str(getattr(sys.modules.get(f"{c.package}._core"), "__file__", None) or "")
        if core_file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            msg = (f"binding package {c.package} is already loaded from {where} in this process; a native module "
                   f"cannot be loaded twice, so {c.location} cannot be: use one binding location per process "
                   f"(see $HARNESS_BINDING_PATH)")
            raise BindingError(msg)
        for name in [n for n in sys.modules if n == c.package or n.startswith(c.package + ".")]:
            del sys.modules[name]  # a pure-Python copy (a test double): the candidate's own replaces it
    spec = importlib.util.spec_from_file_location(c.package, c.location / "__init__.py",
                                                  submodule_search_locations=[str(c.location)])
    if spec is None or spec.loader is None:
        raise BindingError(f"{c.location} is not an importable binding package (no __init__.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[c.package] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[c.package]
        raise
    return importlib.import_module(f"{c.package}._core")


def committed_fingerprint(engine: str) -> str | None:
    """The ABI fingerprint of ``engines/<engine>/abi/surface.json`` beside the engine's descriptor (the
    checkout's, or a recipe's on ``$HARNESS_ENGINES_PATH``): what a binding must have been built against."""
    from harness.core.paths import project_root
    from harness.engine.descriptor import descriptor_path

    found = descriptor_path(engine)
    folder = found.parent if found is not None else project_root() / "engines" / engine
    p = folder / "abi" / "surface.json"
    if not p.exists() and not p.is_symlink():
        return None
    from harness.abi.surface import load

    try:
        return str(load(p)["fingerprint"])
    except (KeyError, ValueError):
        return None


def choose_or_none(engine: str, pin: str, abi_fingerprint: str | None) -> Candidate | None:
    try:
        return choose(engine, pin, abi_fingerprint)
    except BindingError:
        return None
