"""The test tiers (tests/tiers.py): what counts as starting a process, the check that stops the collection on an
unmarked one, and the two make targets that select the tiers."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.tiers import MARKER, item_launches, launch_reason, unmarked_launchers

ROOT = Path(__file__).resolve().parents[1]


# Helpers the tests below read (never call). Named through ``_helper`` so that the tests' own code does not name
# them: otherwise the check would rightly find these tests starting processes.
def _spawns():
    return subprocess.run(["true"], check=True)


def _through_a_helper():
    return _spawns()


def _imports_a_harness_in_its_body():
    from tests.harness.gloo_harness import run_distributed

    return run_distributed


def _pure(n: int) -> int:
    return sum(range(n))


class _Launcher:
    def start(self):
        return _through_a_helper()


def _helper(name: str):
    return globals()[f"_{name}"]


def _item(name: str, obj, marked: bool = False, fixtures: tuple[str, ...] = ()) -> SimpleNamespace:
    mark = SimpleNamespace(name=MARKER) if marked else None
    return SimpleNamespace(name=name, obj=obj, fixturenames=fixtures, location=("tests/x.py", 9, name),
                           get_closest_marker=lambda m: mark if m == MARKER else None)


def test_a_launcher_is_found_through_helpers_classes_and_imports_in_a_body():
    assert launch_reason(_helper("spawns")) == "_spawns -> subprocess"
    assert launch_reason(_helper("through_a_helper")) == "_through_a_helper -> _spawns -> subprocess"
    assert launch_reason(_helper("Launcher")) == "_Launcher.start -> _through_a_helper -> _spawns -> subprocess"
    assert "multiprocessing" in launch_reason(_helper("imports_a_harness_in_its_body"))
    assert launch_reason(_helper("pure")) is None


def test_unmarked_launching_tests_are_named_with_their_file_line_and_fix():
    items = [_item("test_spawns", _helper("through_a_helper")), _item("test_marked", _helper("spawns"), marked=True),
             _item("test_pure", _helper("pure")), _item("test_server", _helper("pure"), fixtures=("prefect_harness",))]
    lines = unmarked_launchers(items)
    assert len(lines) == 2, lines
    assert lines[0].startswith("tests/x.py:10: test_spawns starts a process (_through_a_helper -> _spawns")
    assert lines[0].endswith("add @pytest.mark.integration (or the module's pytestmark)")
    assert "fixture prefect_harness: the Prefect API server" in lines[1]
    assert item_launches(items[2]) is None


def test_the_collection_stops_on_an_unmarked_launcher(request):
    """tests/conftest.py runs the check before ``-m`` deselects, on every run: make test, make test-fast, any file."""
    from tests import conftest

    items = [_item("test_spawns", _helper("spawns"))]
    with pytest.raises(pytest.UsageError, match="test_spawns starts a process"):
        conftest.pytest_collection_modifyitems(request.config, items)


def test_the_make_targets_select_the_tiers_and_the_marker_is_strict():
    make = (ROOT / "Makefile").read_text()
    recipe = lambda target: make.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]  # noqa: E731
    assert '-m "not gpu"' in recipe("test") and "engines" in recipe("test")
    assert '-m "not integration and not gpu"' in recipe("test-fast")
    assert "engines" not in recipe("test-fast") and "lint" not in recipe("test-fast")
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in pytest_ini["addopts"]
    assert any(m.startswith(f"{MARKER}:") for m in pytest_ini["markers"])
