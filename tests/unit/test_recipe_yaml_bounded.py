"""Recipe YAML goes through a bounded loader (issue 58, class 7).

An alias bomb, a number with 100,000 digits and a key given twice are each refused by
:func:`harness.core.datafile.load_yaml` with a :class:`ConfigError` naming ``file:line``; through the
installed ``harness`` on an untrusted engine folder that is exit 3, at once, no traceback. Every data
file the project ships still loads to what PyYAML's own safe loader gives. Model configs have their own
loader (duplicate keys and alias expansion were already bounded there): an integer beyond 64 bits is
read as yaml.v3 reads it, never a traceback.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.config.loader import load_text
from harness.core import paths
from harness.core.datafile import load_yaml
from harness.core.errors import ConfigError

from . import hostile_engine

needs_git = pytest.mark.skipif(not shutil.which("git"), reason="the tiny engine's source is a git repository")

#: nine levels of nine: 9**9 (387 million) strings once every alias is expanded, in 10 short lines
BOMB = "lol:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  {b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))
BIG = "1" * 100_000


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    """The 1-based line of the ``nth`` line that starts with ``needle``."""
    lines = [i for i, line in enumerate(text.splitlines(), 1) if line.startswith(needle)]
    return lines[nth - 1]


# --- the loader --------------------------------------------------------------------------------

def test_alias_bomb_refused_at_the_first_alias() -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml(BOMB, where="bomb.yaml")
    assert str(e.value).startswith(f"bomb.yaml:{_line_of(BOMB, '  b:')}: alias *a: ")
    assert "write the value out" in str(e.value)


def test_recursive_alias_refused() -> None:
    with pytest.raises(ConfigError, match=r"^r\.yaml:1: alias \*a: "):
        load_yaml("a: &a [*a]\n", where="r.yaml")


def test_merge_key_refused() -> None:
    text = "base: {a: 1}\nx:\n  <<: {a: 2}\n  b: 3\n"
    with pytest.raises(ConfigError, match=r"^m\.yaml:3: merge key '<<': "):
        load_yaml(text, where="m.yaml")


def test_duplicate_key_names_both_lines() -> None:
    text = "name: tiny\ncmake:\n  base: {A: 1}\n  intents: {}\nname: other\n"
    with pytest.raises(ConfigError) as e:
        load_yaml(text, where="engines/tiny/engine.yaml")
    assert str(e.value).startswith("engines/tiny/engine.yaml:5: duplicate key 'name' (first on line 1)")


def test_duplicate_key_in_a_flow_mapping() -> None:
    with pytest.raises(ConfigError, match=r"^f\.yaml:2: duplicate key 'A' \(first on line 2\)"):
        load_yaml("x: 1\nbase: {A: 1, B: 2, A: 3}\n", where="f.yaml")


@pytest.mark.parametrize("number", [BIG, "-" + BIG, "0x" + "f" * 100_000, "0b" + "1" * 500,
                                    "1" + ":30" * 40_000, "1_" * 5000 + "1", "18446744073709551616"])
def test_huge_integer_refused(number: str) -> None:
    with pytest.raises(ConfigError, match=r"^n\.yaml:2: integer .* is out of range"):
        load_yaml(f"ok: 1\nsize: {number}\n", where="n.yaml")


def test_huge_integer_key_refused() -> None:
    with pytest.raises(ConfigError, match=r"^n\.yaml:2: integer 1111"):  # a plain key is at most 1024 characters
        load_yaml(f"a: 1\n? {BIG}\n: x\n", where="n.yaml")


@pytest.mark.parametrize("number", ["1.0e+999", "-1.5e+400", "1" + "0" * 400 + ".0", "1.0" + "0" * 200])
def test_absurd_float_refused(number: str) -> None:
    with pytest.raises(ConfigError, match=r"^n\.yaml:1: float .* is out of range"):
        load_yaml(f"x: {number}\n", where="n.yaml")


def test_numbers_in_range_load() -> None:
    text = ("a: 18446744073709551615\nb: -9223372036854775808\nc: 0x_ff\nd: 0o17\ne: 017\nf: 190:20:30\n"
            "g: 1_000\nh: 1.5e+300\ni: -.inf\nj: .NaN\nk: 'quoted 1.0e+999'\nl: " + "9" * 64 + "x\n")
    data = load_yaml(text, where="ok.yaml")
    assert data == yaml.load(text, Loader=yaml.SafeLoader) | {"j": data["j"]}
    assert data["a"] == 2**64 - 1 and data["f"] == 685230 and data["j"] != data["j"]


@pytest.mark.parametrize(("text", "says"), [("x: !!int twelve\n", "!!int"), ("x: !!float ''\n", "!!float"),
                                            ("x: !!bool maybe\n", "!!bool"), ("x: !!timestamp soon\n", "!!timestamp")])
def test_explicit_tag_on_a_wrong_value_is_a_config_error(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^t\.yaml:1: ") as e:
        load_yaml(text, where="t.yaml")
    assert says in str(e.value)


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"^s\.yaml:3: not valid YAML: "):
        load_yaml("a: 1\nb: [2\nc: 3\n", where="s.yaml")


def test_shipped_data_loads_as_pyyaml_loads_it() -> None:
    """No file the project ships uses an alias, a merge key, a duplicate key or an absurd number."""
    root = paths.project_root()
    files = [*root.glob("engines/*/*.yaml"), *root.glob("matrix/*.yaml"), *root.glob("harness/*/*.yaml")]
    assert len(files) >= 8
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert load_yaml(text, where=f) == yaml.load(text, Loader=yaml.SafeLoader), f


def test_an_anchor_without_an_alias_is_harmless() -> None:
    assert load_yaml("a: &x 1\nb: 2\n", where="a.yaml") == {"a": 1, "b": 2}


# --- through the installed harness, on an untrusted engine folder ------------------------------

@needs_git
@pytest.mark.parametrize("argv", [("engines",), ("fetch", "tiny")])
def test_alias_bomb_in_engine_yaml_is_exit_3(tmp_path: Path, argv: tuple[str, ...]) -> None:
    recipe = hostile_engine.make(tmp_path)
    descriptor = recipe.folder / "engine.yaml"
    text = descriptor.read_text() + "x-" + BOMB
    descriptor.write_text(text)
    # before the bounded loader: a hang growing past a gigabyte, ended here by the timeout
    run = recipe.harness(*argv, timeout=60)
    assert run.returncode == 3, run.output
    assert f"{descriptor}:{_line_of(text, '  b:')}: alias *a:" in run.output
    assert "Traceback" not in run.output
    assert not (recipe.cache / "sources").exists() or not any((recipe.cache / "sources").iterdir())


@needs_git
def test_huge_integer_in_engine_yaml_is_exit_3(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    descriptor = recipe.folder / "engine.yaml"
    text = descriptor.read_text() + f"pinned_on: {BIG}\n"
    descriptor.write_text(text)
    run = recipe.harness("engines")
    assert run.returncode == 3, run.output
    assert f"{descriptor}:{_line_of(text, 'pinned_on:')}: integer 11111" in run.output
    assert "Traceback" not in run.output


@needs_git
def test_duplicate_key_in_engine_yaml_is_exit_3(tmp_path: Path) -> None:
    recipe = hostile_engine.make(tmp_path)
    descriptor = recipe.folder / "engine.yaml"
    text = descriptor.read_text() + "targets: [tiny]\n"  # the same value: before, `harness engines` said nothing
    descriptor.write_text(text)
    run = recipe.harness("engines")
    assert run.returncode == 3, run.output
    first, second = _line_of(text, "targets:"), _line_of(text, "targets:", 2)
    assert f"{descriptor}:{second}: duplicate key 'targets' (first on line {first})" in run.output


# --- model configs (harness.config.loader): an integer beyond 64 bits as yaml.v3 reads it ------

@pytest.mark.parametrize(("number", "expected"), [
    ("0x" + "f" * 100_000, "0x" + "f" * 100_000),  # no float pattern: the string as written
    (BIG, BIG),  # ParseFloat overflows: the string
    # short enough to hold: kept an integer, so the validator names the int field it does not fit (LAI013)
    ("18446744073709551616", 18446744073709551616),
    ("18446744073709551615", 2**64 - 1),  # ParseUint takes it
])
def test_model_config_integer_beyond_64_bits(number: str, expected: object) -> None:
    docs, problems = load_text(f"name: m\nx: {number}\n", "m.yaml")
    assert problems == [] and docs[0].data["x"] == expected and type(docs[0].data["x"]) is type(expected)


def test_model_config_huge_hex_integer_is_a_diagnostic_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "m.yaml"
    config.write_text(f"name: m\nbackend: llama-cpp\nparameters:\n  model: x.gguf\ncontext_size: 0x{'f' * 100_000}\n")
    r = subprocess.run([*hostile_engine.harness_exe(), "validate", str(config)], cwd=tmp_path, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    assert r.returncode == 3, r.stdout[-2000:]
    assert f"{config}:5:15: LAI013 error: context_size: expected an integer, found string '0xfff" in r.stdout
    assert "Traceback" not in r.stdout and len(r.stdout) < 2000
