"""docs/reference/ is generated from the code (docs/reference/generate.py, `make reference`): these tests fail when
a page is stale, and show that a changed key or a new command would make it so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


@pytest.fixture(scope="module")
def generate():
    spec = importlib.util.spec_from_file_location("reference_generate", REFERENCE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_reference_pages_are_up_to_date(generate):
    assert generate.stale() == [], "docs/reference/ is stale: run `make reference` and commit the pages"


def test_every_command_and_every_train_key_has_its_line(generate):
    from bloomdata.cli import COMMANDS as DATA
    from bloomtrain.cli import COMMANDS as TRAIN

    pages = generate.pages()
    for program, commands in (("bloomdata", DATA), ("bloomtrain", TRAIN)):
        for command in commands:
            assert f"commands/{program}-{command}.md" in pages
    train = pages["config/TrainConfig.md"]
    for key in ("model.hidden_size", "optim.lr", "checkpoint.save_interval", "schedule.global_batch_size"):
        assert f"| `{key}` |" in train
    assert not any(str(ROOT) in text for text in pages.values()), "a page names this checkout's path"


def test_a_changed_description_makes_its_page_stale(generate, monkeypatch, tmp_path):
    from bloomtrain.config import OptimConfig

    for path, text in generate.pages().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert generate.stale(tmp_path) == []
    monkeypatch.setattr(OptimConfig.model_fields["lr"], "description", "a new description")
    stale = generate.stale(tmp_path)
    assert "config/TrainConfig.md" in stale
    (tmp_path / "config" / "Gone.md").write_text("# a page for a model that no longer exists\n")
    assert "config/Gone.md" in generate.stale(tmp_path)
