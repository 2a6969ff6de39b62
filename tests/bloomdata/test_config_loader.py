"""bloomdata.config_loader.load_config: the layers' precedence, the preset rule, and one error format for every
kind of bad input (YAML syntax, unreadable file, bad value from a file, a flag, an override or defaults)."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bloomdata.cli.options import ConfigParser, Sources
from bloomdata.config_loader import FlagValues, cli_option, complete, derive, load_config, merge, read_yaml
from bloomdata.errors import BloomstackError


class Optim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = Field(default=1e-3, gt=0, description="peak learning rate")
    betas: tuple[float, float] = (0.9, 0.95)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: str | None = None
    width: int = 8
    depth: int = 2


class Run(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="what the run is called")
    out_dir: str = Field(default="out", description="where it writes", json_schema_extra=cli_option("--out"))
    steps: int = Field(default=10, ge=1, description="optimizer steps")
    mode: Literal["fast", "exact"] = Field(default="fast", description="speed or bit-exactness")
    optim: Optim = Field(default_factory=Optim)
    model: Section = Field(default_factory=Section)

    @model_validator(mode="after")
    def _check(self) -> Run:
        if self.mode == "exact" and self.steps > 100:
            raise ValueError("mode=exact runs at most 100 steps; lower steps or use mode=fast")
        return self


def _yaml(tmp_path, text: str, name: str = "run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_precedence_defaults_file_values_overrides(tmp_path):
    path = _yaml(tmp_path, "name: from-file\nsteps: 20\noptim:\n  lr: 0.5\n")
    defaults = Run(name="demo", steps=5, mode="exact", optim=Optim(lr=0.1, betas=(0.8, 0.9)))
    cfg = load_config(Run, path, defaults=defaults, values={"steps": "30", "optim": {"betas": [0.5, 0.6]}},
                      overrides=["optim.lr=2e-4", "model.width=16"])
    assert cfg.name == "from-file"  # file over defaults
    assert cfg.steps == 30  # values (flags, parameters) over the file; a string converted by pydantic
    assert cfg.mode == "exact"  # given defaults, untouched by the file, over the model's defaults
    assert cfg.optim.lr == 2e-4 and cfg.optim.betas == (0.5, 0.6)  # overrides over everything; merged sections
    assert cfg.model.width == 16 and cfg.model.depth == 2
    assert load_config(Run, values={"name": "x"}).steps == 10  # model defaults at the bottom


def test_a_preset_section_replaces_instead_of_merging():
    base = {"model": {"width": 64, "depth": 9}, "steps": 3}
    assert merge(base, {"model": {"depth": 4}}) == {"model": {"width": 64, "depth": 4}, "steps": 3}
    assert merge(base, {"model": {"preset": "small", "depth": 4}}) == {"model": {"preset": "small", "depth": 4},
                                                                       "steps": 3}
    done = complete(Run(name="demo", model=Section(width=64)), {"model": {"depth": 5}, "steps": 7})
    assert done["model"] == {"preset": None, "width": 64, "depth": 5} and done["steps"] == 7 and done["name"] == "demo"
    assert complete(Run(name="demo"), "not a dict") == "not a dict"


def test_key_lines_come_from_the_yaml_nodes(tmp_path):
    path = _yaml(tmp_path, "# comment\nname: a\noptim:\n  lr: 1\n  betas:\n    - 0.1\n    - 0.2\n")
    data, lines = read_yaml(path)
    assert data["optim"]["betas"] == [0.1, 0.2]
    assert lines[("name",)] == 2 and lines[("optim", "lr")] == 4 and lines[("optim", "betas", 1)] == 7
    assert read_yaml(_yaml(tmp_path, "", "empty.yaml")) == ({}, {})


def _error(**kwargs) -> str:
    with pytest.raises(BloomstackError) as info:
        load_config(Run, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_bad_value_from_the_file_names_file_line_key_value_and_fix(tmp_path):
    path = _yaml(tmp_path, "name: a\n\noptim:\n  lr: -1\n")
    assert _error(path=path) == (f"{path}:4: optim.lr: Input should be greater than 0 (got -1); "
                                 "fix: change optim.lr: peak learning rate")
    path = _yaml(tmp_path, "name: a\nmode: quick\n")
    assert _error(path=path) == (f"{path}:2: mode: Input should be 'fast' or 'exact' (got 'quick'); "
                                 "fix: change mode: speed or bit-exactness")
    path = _yaml(tmp_path, "name: a\nsteps: 5\nstepz: 6\n")
    assert _error(path=path) == f"{path}:3: stepz: Extra inputs are not permitted (got 6); fix: remove stepz or " \
                                "correct its name (did you mean steps?)"


def test_the_same_format_for_flags_overrides_defaults_and_missing_values(tmp_path):
    path = _yaml(tmp_path, "name: a\nsteps: 5\n")
    # the highest layer that set the key is named: here the override, not the file's line 2
    msg = _error(path=path, overrides=["steps=0"])
    assert msg.startswith("override steps=0: steps: Input should be greater than or equal to 1 (got 0); fix: ")
    msg = _error(values=FlagValues({"name": "a", "steps": "many"}, flags={("steps",): "--steps"},
                                   flag_of=lambda key: "--" + key[-1]), origin="command line")
    assert msg == ("--steps: steps: Input should be a valid integer, unable to parse string as an integer "
                   "(got 'many'); fix: change --steps (or steps in the config file): optimizer steps")
    assert _error(values=FlagValues({}, flag_of=lambda key: "--" + key[-1]), origin="command line") == \
        "command line: name: Field required; fix: set --name (or name in the config file): what the run is called"
    # a model validator's message, located at the section the file set
    msg = _error(path=path, overrides=["mode=exact", "steps=500"])
    assert msg.startswith(f"{path}: (top level): mode=exact runs at most 100 steps; lower steps or use mode=fast;")
    msg = _error(defaults={"name": "a", "steps": -2}, origin="parameters")
    assert msg.startswith("parameters (defaults): steps: Input should be greater than or equal to 1 (got -2)")


def test_yaml_and_file_errors_are_one_line_with_the_line(tmp_path):
    path = _yaml(tmp_path, "name: a\noptim:\n  lr: [1, 2\nsteps: 3\n")
    msg = _error(path=path)
    assert msg.startswith(f"{path}:4: invalid YAML:") and "fix the syntax" in msg
    path = _yaml(tmp_path, "name: a\n  steps: 3\n")
    assert _error(path=path).startswith(f"{path}:2: invalid YAML:")
    assert _error(path=_yaml(tmp_path, "- a\n- b\n")).endswith("expected a mapping of config fields at the top "
                                                             "level, got a list; write `key: value` lines")
    assert _error(path=tmp_path / "absent.yaml") == f"{tmp_path / 'absent.yaml'}: cannot read config file: No such " \
                                                    "file or directory; check the path"
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    assert "not UTF-8" in _error(path=tmp_path / "latin1.yaml")
    assert _error(values={"name": "a"}, overrides=["steps"]).startswith("override 'steps' is not key=value")
    assert "not valid YAML" in _error(values={"name": "a"}, overrides=["steps=[1"])
    assert _error(values={"name": "a"}, overrides=["name.x=1"]) == "override name.x=1: name is a value, not a section"


def test_generated_flags_feed_the_same_loader(tmp_path, capsys):
    parser = ConfigParser(Run, "run", nested=True, sources=Sources(overrides=True))
    path = _yaml(tmp_path, "name: file\nsteps: 5\noptim:\n  lr: 0.5\n")
    cfg, _ = parser.parse(["--config", str(path), "--out", "o", "--optim.betas", "0.1", "0.2", "--mode", "exact",
                           "--steps", "7", "optim.lr=0.25"])
    assert (cfg.name, cfg.out_dir, cfg.steps, cfg.mode) == ("file", "o", 7, "exact")
    assert cfg.optim == Optim(lr=0.25, betas=(0.1, 0.2))
    with pytest.raises(BloomstackError, match=r"^--optim\.lr: optim\.lr: Input should be greater than 0 \(got '-1'\); "
                                              r"fix: change --optim\.lr \(or optim\.lr in the config file\)"):
        parser.parse(["--name", "x", "--optim.lr", "-1"])
    with pytest.raises(SystemExit):
        parser.parse(["--name", "x", "--mode", "slow"])  # choices: argparse's own usage error, exit 2
    assert "invalid choice" in capsys.readouterr().err


def test_derive_is_a_validated_model_copy():
    """``derive``: a config with some fields changed, passing the checks a loaded one does; untouched nested models
    are the same objects (no dump and re-parse); a field named ``model`` is a field like any other."""
    base = Run(name="a", optim=Optim(lr=0.5))
    derived = derive(base, steps=50, mode="exact", model=Section(width=4))
    assert (derived.steps, derived.mode, derived.model.width, base.steps) == (50, "exact", 4, 10)
    assert derived.optim is base.optim
    assert derive(base, optim={"lr": 0.25}).optim == Optim(lr=0.25)  # what the field accepts
    with pytest.raises(ValidationError, match="mode=exact runs at most 100 steps"):  # model_copy would not check
        derive(base, mode="exact", steps=200)
    with pytest.raises(TypeError, match="Run has no field stepz; did you mean steps"):  # model_copy drops it
        derive(base, stepz=3)
    with pytest.raises(ValidationError, match="name\n  Input should be a valid string"):  # model_copy stores it
        derive(base, name=3)
    assert base.model_copy(update={"name": 3}).name == 3 and base.model_copy(update={"stepz": 3}).steps == 10
    assert derived.model_fields_set == {"name", "optim", "steps", "mode", "model"}  # what was given, as model_copy


def test_every_derived_config_and_record_goes_through_derive():
    """No ``model_copy(update=...)`` in the project's code (flows, library) or its tests (this file aside, which shows
    what it skips): it skips validation, so a misspelt key would be dropped and a value of the wrong type stored;
    ``derive`` checks both."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("bloomdata", "bloomtrain", "flows", "tests"):
        for path in sorted((root / package).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == "model_copy" and any(k.arg == "update" for k in node.keywords):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, f"use bloomdata.config_loader.derive instead of model_copy(update=...) at {', '.join(found)}"
