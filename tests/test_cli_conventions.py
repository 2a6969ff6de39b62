"""The habits users bring from other tools: ``--version`` on both CLIs, and ``--print-config`` on every command
that reads a config file, whose YAML loads back through ``--config`` to the same YAML."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.cli import main as bloomdata_main
from bloomdata.config_loader import fields_of
from tests.test_cli_flags import COMMANDS, _parser

ROOT = Path(__file__).resolve().parents[1]

# the fewest flags each command needs to resolve a config (--print-config writes nothing and reads no input)
MINIMAL = {
    "bloomdata build": ["--input", "en=x.jsonl", "--tokenizer", "tok", "--out", "data"],
    "bloomdata train-tokenizer": ["--input", "x.jsonl", "--out", "tok"],
    "bloomdata fertility": ["--input", "x.jsonl", "--tokenizer", "tok"],
    "bloomdata blend": ["--datasets-dir", "data", "--out", "blend"],
    "bloomdata clean": ["--input", "en=x.jsonl", "--out", "clean", "--preset", "roots"],
    "bloomtrain train": ["--config", str(ROOT / "configs/train/tiny-cpu.yaml"), "parallel.tp=2"],
    "bloomtrain generate": ["--model", "m", "--prompt", "Hello"],
    "bloomtrain evaluate": ["--model", "m", "--data", "en=x.jsonl", "--out", "eval"],
    "bloomtrain mixture-search": ["--datasets-dir", "data", "--tokenizer", "tok", "--out", "search"],
}


def _print_config(command: str, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        _parser(command).parse([*argv, "--print-config"])
    assert stop.value.code == 0
    return out.getvalue()


def test_every_command_that_reads_a_config_file_prints_it_and_takes_it_back(tmp_path):
    takes_config = sorted(c for c in COMMANDS if "--config" in _parser(c).hand_declared)
    assert sorted(MINIMAL) == takes_config  # a new command with --config is added above
    for command in takes_config:
        assert "--print-config" in _parser(command).hand_declared, command
        printed = _print_config(command, MINIMAL[command])
        path = tmp_path / f"{command.replace(' ', '-')}.yaml"
        path.write_text(printed)
        assert _print_config(command, ["--config", str(path)]) == printed, command


def test_the_printed_training_config_holds_the_overrides_and_every_default(tmp_path):
    printed = _print_config("bloomtrain train", MINIMAL["bloomtrain train"])
    assert re.search(r"^parallel:\n  tp: 2$", printed, re.M)
    assert re.search(r"^  beta2: 0.95$", printed, re.M) and "preset" not in printed  # every default, resolved


@pytest.mark.integration
def test_version_names_the_release_and_the_git_revision(capsys):
    assert bloomdata_main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"bloomdata \d+\.\d+\.\d+\S* \(git [0-9a-f]{12}(\+dirty)?\)", line), line
    run = subprocess.run([sys.executable, "-m", "bloomtrain.cli", "--version"], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip().replace("bloomtrain", "bloomdata", 1) == line


def test_json_means_print_json_in_every_command():
    with_json = [c for c in COMMANDS if "--json" in _parser(c).hand_declared]
    assert len(with_json) >= 5
    for command in with_json:
        [action] = [a for a in _parser(command).parser._actions if "--json" in a.option_strings]
        assert action.nargs == 0 and action.const is True, command  # a switch, never --json PATH
        assert action.help.startswith("print "), (command, action.help)


def test_help_tells_the_truth():
    for command in COMMANDS:
        parser = _parser(command)
        for action in parser.parser._actions:
            option = next((o for o in parser.options if o.dest == action.dest), None)
            if option is not None and action.help and "(required" in action.help:
                info = _field(parser.model, option.key)
                assert info.is_required(), (command, action.option_strings)  # a field with a default never is
        text = parser.parser.format_help()
        # nothing of this machine (the checkout's own path), nothing outside the repository (a parent directory)
        assert str(ROOT.parent) not in text and not re.search(r"\.\.[/\\]", text), command
        example = re.search(r"\(e\.g\. ([^)]*)\)", " ".join(text.split()))
        if command in MINIMAL and "KEY=VALUE" in text:
            assert example, command
            printed = _print_config(command, [*MINIMAL[command], *example.group(1).split()])  # the example parses
            assert printed != _print_config(command, MINIMAL[command]), command
    train = " ".join(_parser("bloomtrain train").parser.format_help().split())
    assert "--target" not in train and "--args" not in train  # a callback's fields are not flags of their own
    assert "--model.preset {tiny,bloom-560m," in train and "bloom-560m (24 layers x 1024, 16 heads)" in train
    assert "Transformer blocks. (required, unless model.preset sets it)" in train


def _field(model, key):
    for part in key[:-1]:
        model = fields_of(model)[part].annotation
    return fields_of(model)[key[-1]]
