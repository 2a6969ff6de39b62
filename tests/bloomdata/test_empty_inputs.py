"""No silent empty output (issue 52): a build, clean or tokenizer run whose inputs yield no document exits 2 with one
line naming the file(s), the top reject reason and what to check; --allow-empty says an empty output is expected."""

from __future__ import annotations

import json

import pytest

from bloomdata.cli import main


@pytest.fixture
def rejected(tmp_path):
    """A jsonl whose every row lacks the text field (one is not even JSON): 3 missing_text, 1 malformed_json."""
    path = tmp_path / "in" / "wrong-field.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"body": f"doc {i}"}) + "\n" for i in range(3)) + "not json\n")
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_build_of_all_rejected_rows_exits_2_in_one_line(tmp_path, rejected, small_tokenizer_dir, capsys):
    args = ["build", "--input", str(rejected), "--tokenizer", str(small_tokenizer_dir), "--out", str(tmp_path / "o"),
            "--workers", "0", "--no-progress"]
    assert main(args) == 2
    err = _one_line(capsys)
    assert err.startswith(f"bloomdata build: error: no documents in {rejected}: all 4 rows were rejected, most as "
                          "missing_text (3: no 'text' field); check --text-field")
    assert err.endswith("set --allow-empty if an empty output is expected")
    assert not list((tmp_path / "o").glob("*.bin")) and not (tmp_path / "o" / "build_summary.json").exists()
    assert main([*args, "--allow-empty"]) == 0
    assert json.loads((tmp_path / "o" / "build_summary.json").read_text())["documents"] == 0
    assert main([*args[:-1], "--text-field", "body", "--no-progress"]) == 0  # the fix the line names


def test_build_of_empty_files_says_they_hold_no_rows(tmp_path, small_tokenizer_dir, capsys):
    for name in ("a.jsonl", "b.json"):
        (tmp_path / name).write_text("[]" if name.endswith(".json") else "")
    assert main(["build", "--input", str(tmp_path / "a.jsonl"), "--input", str(tmp_path / "b.json"), "--tokenizer",
                 str(small_tokenizer_dir), "--out", str(tmp_path / "o"), "--workers", "0", "--no-progress"]) == 2
    assert _one_line(capsys).endswith(f"no documents in {tmp_path / 'a.jsonl'}, {tmp_path / 'b.json'}: the files "
                                      "hold no rows; set --allow-empty if an empty output is expected")


def test_clean_of_all_rejected_rows_exits_2_in_one_line(tmp_path, rejected, capsys):
    args = ["clean", "--input", f"en={rejected}", "--out", str(tmp_path / "o"), "--workers", "0", "--no-progress"]
    assert main(args) == 2
    err = _one_line(capsys)
    assert err.startswith(f"bloomdata clean: error: no documents in {rejected}: all 4 rows were rejected, most as "
                          "missing_text (3); check --text-field") and "--allow-empty" in err
    assert main([*args, "--allow-empty"]) == 0


def test_tokenizer_of_all_rejected_rows_exits_2_in_one_line(tmp_path, rejected, capsys):
    for trainer in ("memory", "counts"):
        assert main(["train-tokenizer", "--input", str(rejected), "--out", str(tmp_path / trainer), "--vocab-size",
                     "300", "--trainer", trainer, "--workers", "0", "--no-progress"]) == 2
        err = _one_line(capsys)
        assert err.startswith(f"bloomdata train-tokenizer: error: no documents in {rejected}: all 4 rows were "
                              "rejected, most as missing_text (3: no 'text' field); check --text-field"), err
