"""docs/extending.md shows its examples' files as they are: every block whose first line names a file under
docs/examples/ holds exactly that file (the page's `sh` blocks, which use them, run in tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"


def shown_files() -> dict[str, str]:
    """docs/examples/... path -> the text the page shows for it."""
    blocks = re.findall(r"```\w+\n# (docs/examples/[\w./-]+)\n(.*?)```", PAGE.read_text(), flags=re.S)
    return dict(blocks)


def test_the_page_shows_each_example_file_as_it_is():
    shown = shown_files()
    assert {"docs/examples/psv_reader.py", "docs/examples/loss_log.py", "docs/examples/token_count_flow.py",
            "docs/examples/recipe-tiny-wide.yaml", "docs/examples/shouting_step.py"} <= set(shown)
    stale = [path for path, text in shown.items() if (ROOT / path).read_text() != text]
    assert not stale, f"docs/extending.md shows an old version of {stale}: paste the file's text again"


def test_every_example_file_is_on_the_page():
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "examples").glob("*.*")}
    assert files <= set(shown_files()), files - set(shown_files())
