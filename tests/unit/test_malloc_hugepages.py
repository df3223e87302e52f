"""glibc malloc hugepages for engine processes (harness.core.hugepages): how the environment is
composed, when the harness leaves it alone, and how the report states it."""

from __future__ import annotations

import pytest

from harness.bench.system import SystemState, malloc_line, summary_lines
from harness.core import hugepages
from harness.core.errors import UsageError
from harness.core.hugepages import SWITCH_ENV, TUNABLES_ENV, engine_env, malloc_hugepages

GLIBC = ("glibc", "2.36")
LINUX = {"system": "Linux", "libc": GLIBC}


def test_the_tunable_is_added_alone_or_after_the_users_own() -> None:
    assert engine_env({"PATH": "/bin"}, **LINUX) == {"PATH": "/bin", TUNABLES_ENV: "glibc.malloc.hugetlb=1"}
    base = {TUNABLES_ENV: "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072"}
    env = engine_env(base, **LINUX)
    assert env[TUNABLES_ENV] == "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072:glibc.malloc.hugetlb=1"
    assert base == {TUNABLES_ENV: "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072"}  # not changed
    state = malloc_hugepages(base, **LINUX)
    assert state.on and state.tunables == env[TUNABLES_ENV] and "default" in state.source
    # an engine process that starts another hands the same value on, once
    assert engine_env(env, **LINUX) == env
    # an empty GLIBC_TUNABLES is as good as none
    assert engine_env({TUNABLES_ENV: ""}, **LINUX)[TUNABLES_ENV] == "glibc.malloc.hugetlb=1"


@pytest.mark.parametrize(("tunables", "on"), [
    ("glibc.malloc.hugetlb=0", False),
    ("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0", False),
    ("glibc.malloc.hugetlb=2", True),  # hugetlbfs pages: the user's choice, kept
    ("glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=0", False),  # glibc reads the last one
])
def test_the_users_own_hugetlb_wins(tunables: str, on: bool) -> None:
    assert engine_env({TUNABLES_ENV: tunables}, **LINUX)[TUNABLES_ENV] == tunables
    state = malloc_hugepages({TUNABLES_ENV: tunables}, **LINUX)
    assert state.on is on and state.tunables == tunables
    assert state.source == f"GLIBC_TUNABLES already sets glibc.malloc.hugetlb={tunables.rsplit('=', 1)[1]}"
    # even when the harness's switch would turn its own on
    assert engine_env({TUNABLES_ENV: tunables}, enabled=True, **LINUX)[TUNABLES_ENV] == tunables


def test_the_switch_turns_it_off_and_is_handed_on() -> None:
    for value in ("0", "false", "off", "no", " OFF "):
        env = engine_env({SWITCH_ENV: value}, **LINUX)
        assert TUNABLES_ENV not in env
        assert malloc_hugepages({SWITCH_ENV: value}, **LINUX).source == "turned off by $HARNESS_MALLOC_HUGETLB=0"
    for value in ("1", "yes", "on", ""):
        assert engine_env({SWITCH_ENV: value}, **LINUX)[TUNABLES_ENV] == "glibc.malloc.hugetlb=1"
    # a command's --no-malloc-hugetlb: written into the environment, so what the engine process starts agrees
    off = engine_env({TUNABLES_ENV: "glibc.malloc.arena_max=2"}, enabled=False, **LINUX)
    assert off == {TUNABLES_ENV: "glibc.malloc.arena_max=2", SWITCH_ENV: "0"}
    assert malloc_hugepages(off, **LINUX).on is False
    assert malloc_hugepages({}, enabled=False, **LINUX).source == "turned off by --no-malloc-hugetlb"
    # the option overrides the variable either way
    on = engine_env({SWITCH_ENV: "0"}, enabled=True, **LINUX)
    assert on[TUNABLES_ENV] == "glibc.malloc.hugetlb=1" and on[SWITCH_ENV] == "1"
    with pytest.raises(UsageError, match=r"HARNESS_MALLOC_HUGETLB='maybe': expected 0 .* or 1"):
        engine_env({SWITCH_ENV: "maybe"}, **LINUX)


@pytest.mark.parametrize(("system", "libc", "why"), [
    ("Darwin", ("", ""), "not applicable on Darwin (no glibc)"),
    ("Windows", ("", ""), "not applicable on Windows (no glibc)"),
    ("Linux", ("", ""), "not applicable: the C library is not glibc"),  # musl
    ("Linux", ("glibc", "2.31"), "not applicable: glibc 2.31 has no glibc.malloc.hugetlb (glibc 2.35 or later)"),
])
def test_nothing_is_added_without_a_glibc_that_has_the_tunable(system: str, libc: tuple[str, str], why: str) -> None:
    base = {"PATH": "/bin", TUNABLES_ENV: "glibc.malloc.arena_max=2"}
    assert engine_env(base, system=system, libc=libc) == base
    state = malloc_hugepages(base, system=system, libc=libc)
    assert not state.on and state.source == why and state.tunables == "glibc.malloc.arena_max=2"
    assert engine_env({}, system=system, libc=libc) == {}


def test_glibc_version() -> None:
    assert hugepages.glibc_version(("glibc", "2.35")) == (2, 35)
    assert hugepages.glibc_version(("glibc", "2.39.1")) == (2, 39)
    assert hugepages.glibc_version(("", "")) is None
    assert hugepages.glibc_version(("glibc", "weird")) is None


def test_this_process_reads_its_own_environment() -> None:
    assert not hugepages.this_process({}).on
    assert hugepages.this_process({TUNABLES_ENV: "glibc.malloc.hugetlb=1"}).on
    assert not hugepages.this_process({TUNABLES_ENV: "glibc.malloc.hugetlb=0"}).on


def _state(**kw: object) -> SystemState:
    return SystemState(kernel="6.1", os="linux", logical_cpus=2, physical_cores=2, affinity=(0, 1), **kw)  # type: ignore[arg-type]


def test_the_report_line_says_on_or_off_why_and_what_the_thp_mode_makes_of_it() -> None:
    on = malloc_hugepages({}, **LINUX)
    state = _state(thp="madvise", malloc_hugetlb=on.on, malloc_hugetlb_source=on.source, glibc_tunables=on.tunables)
    assert malloc_line(state) == (
        "glibc malloc hugepages for the arms' processes: on (GLIBC_TUNABLES=glibc.malloc.hugetlb=1; the "
        "harness's default for engine processes); in effect under THP madvise: malloc madvises its blocks of "
        "2 MiB and more")
    assert f"- {malloc_line(state)}" in summary_lines(state)
    assert SystemState.from_dict(state.as_dict()) == state
    assert malloc_line(_state(thp="never", malloc_hugetlb=True, glibc_tunables="glibc.malloc.hugetlb=1")).endswith(
        "no effect under THP never")
    assert "no change under THP always" in malloc_line(
        _state(thp="always", malloc_hugetlb=True, glibc_tunables="glibc.malloc.hugetlb=1"))
    off = malloc_hugepages({}, enabled=False, **LINUX)
    assert malloc_line(_state(thp="madvise", malloc_hugetlb=off.on, malloc_hugetlb_source=off.source)) == (
        "glibc malloc hugepages for the arms' processes: off (turned off by --no-malloc-hugetlb)")
    # hugetlbfs pages (the user's =2) are not THP: no THP verdict is made up
    assert malloc_line(_state(thp="madvise", malloc_hugetlb=True, glibc_tunables="glibc.malloc.hugetlb=2",
                              malloc_hugetlb_source="GLIBC_TUNABLES already sets glibc.malloc.hugetlb=2")).endswith(
        "already sets glibc.malloc.hugetlb=2)")
    # a report from before it was recorded says nothing about it
    old = _state(thp="madvise")
    assert malloc_line(old) == "" and not any("malloc" in line for line in summary_lines(old))
    assert SystemState.from_dict({k: v for k, v in state.as_dict().items() if "malloc" not in k
                                  and k != "glibc_tunables"}).malloc_hugetlb is None
