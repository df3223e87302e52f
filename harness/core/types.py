"""Frozen dataclasses that stages pass to each other (never loose dicts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    """One external tool found (or not) on the host."""

    name: str
    path: str | None = None
    version: str | None = None
    detail: str = ""

    @property
    def found(self) -> bool:
        return self.path is not None


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """A GPU seen by the host (CUDA via nvidia-smi, Vulkan via vulkaninfo)."""

    api: str
    name: str
    compute_capability: str | None = None
    device_type: str = ""


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    """What the host probe found: the input of every requirement check."""

    os: str
    arch: str
    cpu_model: str
    microarch: str
    simd: tuple[str, ...]
    cores: int
    memory_bytes: int
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    gpus: tuple[GpuInfo, ...] = ()
    cuda_version: str | None = None
    vulkan_headers: str | None = None
    macos_version: str | None = None
    ffmpeg_aac: bool | None = None

    def tool(self, name: str) -> ToolInfo:
        return self.tools.get(name, ToolInfo(name=name))

    def has_gpu(self, api: str) -> bool:
        return any(g.api == api for g in self.gpus)


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """Where a pinned engine source comes from (`source:` in engine.yaml)."""

    kind: str
    package: str = ""
    version: str = ""
    filename: str = ""
    sha256: str = ""
    subdir: str = ""
    url: str = ""
    commit: str = ""
    filter: str = ""
    """git: a partial-clone filter (``blob:none``): blobs are fetched only for the files checked out."""
    sparse: tuple[str, ...] = ()
    """git: check out only these paths (files or directories) of the commit."""
    path: str = ""
    """local-archive: the archive file, absolute (the descriptor parser resolves a relative path or
    ``file://`` URL against the project root the descriptor sits in)."""

    @property
    def pin(self) -> str:
        return self.version or self.commit[:12]


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """An engine descriptor (`engines/<name>/engine.yaml`), validated."""

    name: str
    root: Path
    source: SourceSpec
    upstream: dict[str, Any]
    cmake: dict[str, Any]
    targets: tuple[str, ...]
    artifacts: dict[str, tuple[str, ...]]
    abi: dict[str, Any]
    pinned_on: str = ""
    variants: tuple[str, ...] = ()
    intents: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    """``cmake.intents``: intent key -> value -> the CMake defines that spell it for this engine."""
    smoke: dict[str, Any] = field(default_factory=dict)
    """``smoke:``: a command run in a fresh artifact (``argv``, ``when`` intent, ``cpu_level`` regex)."""
    cross: dict[str, Any] = field(default_factory=dict)
    """``cross:``: what a cross-built row adds (``targets``, ``bin``: the programs run under emulation)."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Set when the recipe comes from a commit of the history (harness.build.recipes), not the working tree.
    recipe_commit: str = ""

    @property
    def pin(self) -> str:
        return self.source.pin

    @property
    def patches_dir(self) -> Path:
        """``engines/<name>/patches/`` (or, in a recipe from a commit before the one-folder layout,
        ``patches/<name>/`` beside ``engines/``)."""
        return self._own_or_legacy("patches")

    @property
    def surface_path(self) -> Path:
        """The committed ABI surface of this recipe (``engines/<name>/abi/surface.json``)."""
        return self._own_or_legacy("abi") / "surface.json"

    def _own_or_legacy(self, folder: str) -> Path:
        own = self.root / folder
        legacy = self.root.parent.parent / folder / self.name
        return legacy if self.recipe_commit and not own.exists() and legacy.exists() else own


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One row of the variant matrix."""

    name: str
    platform: str
    """What the row computes on (cpu, cuda, vulkan, metal, mlx): the variant plugin that owns it."""
    description: str = ""
    os: tuple[str, ...] = ()
    arch: tuple[str, ...] = ()
    tools: dict[str, str] = field(default_factory=dict)
    intent: dict[str, str] = field(default_factory=dict)
    """What the build is for (``cpu_levels: runtime``, ``gpu: cuda``); each engine's descriptor spells
    it as CMake defines (``cmake.intents``)."""
    cuda_archs: tuple[str, ...] = ()
    ci: bool = False
    default: bool = False
    engines: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    target: str = ""
    """GNU triple of a cross-built row (``aarch64-linux-gnu``); empty for a build for the host itself."""


@dataclass(frozen=True, kw_only=True)
class Buildability:
    """Whether a variant can be built (and run) on this host, with reasons."""

    variant: str
    buildable: bool
    runnable: bool
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SourceTree:
    """A verified, extracted, read-only pinned source in the cache."""

    engine: str
    pin: str
    path: Path
    digest: str
    fetched: bool


@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    """What happened to one patch of the series."""

    patch: Path
    status: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class PatchedTree:
    """A working copy of the source with the patch series applied."""

    engine: str
    pin: str
    path: Path
    series_hash: str
    patches: tuple[PatchOutcome, ...]
    applied: bool


@dataclass(frozen=True, kw_only=True)
class MatchResult:
    """An engine's answer to "can you serve this model here?"."""

    engine: str
    ok: bool
    reason: str = ""
    variant: str | None = None


@dataclass(frozen=True, kw_only=True)
class CpuLevel:
    """One CPU level of a portable build (``libggml-cpu-<name>.so``), as the pinned source defines it."""

    name: str
    library: str
    """file name under the artifact's ``lib/``"""
    arch: str
    options: tuple[str, ...]
    """the build options that define the level (e.g. ``SSE42 AVX F16C FMA AVX2 BMI2``)"""
    checked: tuple[str, ...]
    """ISA features the loader checks before it picks this level (iced-x86 CpuidFeature names)"""
    unchecked_options: tuple[str, ...] = ()
    """options that enable instructions but have no loader check of their own"""
    source: str = ""
    """where the definition was read (file:line)"""
