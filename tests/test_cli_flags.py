"""Every command's flags are generated from its model: today's flag names parse to the config values the
hand-written parsers gave (written out below, as those parsers produced them), every generated flag sets a
model field, nothing else is declared by hand, and ``--help`` shows every option with its help text."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from bloomdata.cli.options import HAND_DECLARED, ConfigParser

# module exposing parser() -> ConfigParser, for every command of every package
COMMANDS = {
    "bloomdata build": "bloomdata.cli.build",
    "bloomdata train-tokenizer": "bloomdata.cli.train_tokenizer",
    "bloomdata fertility": "bloomdata.cli.fertility",
    "bloomdata inspect": "bloomdata.cli.inspect",
    "bloomdata blend": "bloomdata.cli.blend",
    "bloomdata demo": "bloomdata.cli.demo",
    "bloomdata clean": "bloomdata.cli.clean",
    "bloomtrain train": "bloomtrain.cli.train",
    "bloomtrain export": "bloomtrain.cli.export",
    "bloomtrain model-card": "bloomtrain.cli.model_card",
    "bloomtrain import": "bloomtrain.cli.import_hf",
    "bloomtrain generate": "bloomtrain.cli.generate",
    "bloomtrain evaluate": "bloomtrain.cli.evaluate",
    "bloomtrain slurm": "bloomtrain.cli.slurm",
    "bloomtrain build-kernels": "bloomtrain.cli.build_kernels",
    "bloomtrain mixture-search": "bloomtrain.cli.mixture_search",
    "python -m bloomtrain.recovery": "bloomtrain.recovery",
    "python -m flows.demo": "flows.demo",
    "python -m flows.serve": "flows.serve",
    "python -m flows.deploy": "flows.deploy",
    "python -m flows.rehearsal": "flows.rehearsal",
    "python -m flows.ui": "flows.ui",
}
TINY = Path(__file__).resolve().parents[1] / "configs" / "train" / "tiny-cpu.yaml"


def _parser(command: str) -> ConfigParser:
    return importlib.import_module(COMMANDS[command]).parser()


def _parse(command: str, argv: list[str]) -> tuple[BaseModel, argparse.Namespace]:
    return _parser(command).parse(argv)


def _same(config: BaseModel, before: dict) -> bool:
    """The values the old parser gave; a field added since then must sit at its default."""
    dump = config.model_dump()
    defaults = {k: f.get_default(call_default_factory=True) for k, f in type(config).model_fields.items()}
    added = {k: v for k, v in dump.items() if k not in before}
    return {k: dump[k] for k in before if k in dump} == before and added == {k: defaults[k] for k in added}


def _source(path, lang=None, text_field="text", lang_field="lang", format="auto"):
    return {"paths": [path], "format": format, "text_field": text_field, "lang": lang, "lang_field": lang_field}


def test_build_flags():
    cfg, args = _parse("bloomdata build", [
        "--input", "en=c/en.jsonl", "--input", "c/all", "--text-field", "body", "--tokenizer", "tok", "--out", "data",
        "--workers", "3", "--scheduler", "tcp://h:8786", "--append-eod", "--strict", "--max-rows-per-shard", "500",
        "--split-by", "none", "--output-name", "mix", "--batch-docs", "64", "--keep-shards", "--no-progress", "--json"])
    assert _same(cfg, {
        "sources": [_source("c/en.jsonl", "en", "body"), _source("c/all", None, "body")], "tokenizer": "tok",
        "out_dir": "data", "append_eod": True, "split_by": "none", "output_name": "mix", "workers": 3,
        "scheduler": "tcp://h:8786", "max_rows_per_shard": 500, "strict": True, "batch_docs": 64,
        "batch_bytes": 8388608, "max_reject_examples": 20, "keep_shards": True, "progress": False})
    assert args.json is True


def test_train_tokenizer_flags():
    cfg, _ = _parse("bloomdata train-tokenizer", [
        "--input", "en=c/en.jsonl", "--input", "c/x", "--text-field", "body", "--lang-field", "language", "--format",
        "jsonl", "--out", "tok", "--vocab-size", "32000", "--alpha", "0.25", "--byte-budget", "50MB", "--seed", "3",
        "--min-frequency", "4", "--allow-large-budget", "--quiet"])
    assert _same(cfg, {
        "sources": [_source("c/en.jsonl", "en", "body", "language", "jsonl"),
                    _source("c/x", None, "body", "language", "jsonl")],
        "out_dir": "tok", "vocab_size": 32000, "alpha": 0.25, "byte_budget": 50_000_000, "seed": 3,
        "min_frequency": 4, "allow_large_budget": True, "trainer": "auto", "max_memory": None, "workers": 2,
        "scheduler": None, "shard_bytes": 64_000_000, "keep_work": False, "show_progress": False})
    cfg, _ = _parse("bloomdata train-tokenizer", ["--input", "c/x", "--out", "tok", "--byte-budget", "1GiB",
                                                  "--trainer", "counts", "--max-memory", "2GB", "--workers", "4",
                                                  "--scheduler", "tcp://h:8786", "--shard-bytes", "1GB", "--keep-work"])
    assert _same(cfg, {"sources": [_source("c/x")], "out_dir": "tok", "vocab_size": 250680, "alpha": 0.3,
                                "byte_budget": 2**30, "seed": 0, "min_frequency": 2, "allow_large_budget": False,
                                "trainer": "counts", "max_memory": 2_000_000_000, "workers": 4,
                                "scheduler": "tcp://h:8786", "shard_bytes": 1_000_000_000, "keep_work": True,
                                "show_progress": True})


def test_fertility_and_inspect_flags():
    cfg, args = _parse("bloomdata fertility", ["--tokenizer", "t", "--compare", "c", "--input", "zh=x.jsonl",
                                               "--input", "y", "--format", "jsonl", "--max-docs", "5",
                                               "--out", "o.json", "--json"])
    assert _same(cfg, {"tokenizer": "t", "compare": "c", "max_docs": 5, "out": "o.json",
                                "sources": [_source("x.jsonl", "zh", format="jsonl"), _source("y", format="jsonl")]})
    assert args.json is True  # --json prints JSON, in every command
    cfg, args = _parse("bloomdata inspect",
                       ["data/en.idx", "--tokenizer", "t", "--docs", "5", "--chars", "80", "--json"])
    assert _same(cfg, {"prefix": "data/en.idx", "tokenizer": "t", "docs": 5, "chars": 80}) and args.json
    cfg, args = _parse("bloomdata inspect", ["data/en"])
    assert _same(cfg, {"prefix": "data/en", "tokenizer": None, "docs": 3, "chars": 200}) and not args.json


def test_blend_flags():
    cfg, _ = _parse("bloomdata blend", [
        "--dataset", "en=d/en", "--dataset", "fr=d/fr", "--datasets-dir", "d", "--budget", "350e9", "--alpha", "0.5",
        "--floor", "0.01", "--cap", "en=0.5", "fr=0.4", "--override", "en=0.2", "--max-epochs", "3", "--seq-length",
        "2048", "--seed", "5", "--split", "949,50,1", "--compat", "bloom", "--out", "blend"])
    assert _same(cfg, {
        "datasets": {"en": "d/en", "fr": "d/fr"}, "datasets_dir": "d", "token_budget": 350_000_000_000, "alpha": 0.5,
        "floor": 0.01, "cap": {"en": 0.5, "fr": 0.4}, "overrides": {"en": 0.2}, "max_epochs": 3.0, "seq_length": 2048,
        "seed": 5, "split": "949,50,1", "train_range": None, "valid_range": None, "compat": "bloom",
        "out_dir": "blend"})
    cfg, _ = _parse("bloomdata blend", ["--datasets-dir", "d", "--budget", "1e9", "--train-range", "0:0.95",
                                        "--valid-range", "0.95:1", "--out", "b", "--floor", "en=0.05",
                                        "--floor", "fr=0.02"])
    assert (cfg.token_budget, cfg.train_range, cfg.valid_range, cfg.out_dir) == (10**9, "0:0.95", "0.95:1", "b")
    assert (cfg.alpha, cfg.max_epochs, cfg.compat, cfg.split, cfg.seed) == (0.3, 4.0, "core", None, None)
    assert cfg.floor == {"en": 0.05, "fr": 0.02} and cfg.cap is None and cfg.overrides == {}


def test_demo_flags():
    cfg, _ = _parse("bloomdata demo", ["--out", "o", "--corpus", "c", "--vocab-size", "1000", "--workers", "3",
                                       "--no-progress"])
    assert _same(cfg, {"out_dir": "o", "corpus": "c", "vocab_size": 1000, "workers": 3, "progress": False})


def test_train_flags_and_overrides():
    cfg, _ = _parse("bloomtrain train", ["--config", str(TINY), "optim.lr=3e-4", "seed=3"])
    assert (cfg.optim.lr, cfg.seed, cfg.model.hidden_size, cfg.schedule.train_iters) == (3e-4, 3, 96, 20)
    # generated dotted flags sit between the file and the overrides
    cfg, _ = _parse("bloomtrain train", ["--config", str(TINY), "--optim.lr", "1e-2", "--schedule.train-iters", "50",
                                         "--parallel.activation-checkpointing", "--schedule.rampup-batch-size", "4",
                                         "2", "64", "--schedule.train-samples", "400", "schedule.train_iters=null",
                                         "--optim.lr", "2e-2"])
    assert cfg.optim.lr == 2e-2 and cfg.parallel.activation_checkpointing and cfg.schedule.train_iters is None
    assert cfg.schedule.rampup_batch_size == (4, 2, 64) and cfg.schedule.train_samples == 400
    with pytest.raises(SystemExit):
        _parse("bloomtrain train", ["optim.lr=1"])  # --config stays required, as before


def test_export_import_generate_flags():
    cfg, _ = _parse("bloomtrain export", ["ck", "out", "--tag", "global_step5", "--tokenizer", "tok", "--dtype",
                                          "bfloat16"])
    assert _same(cfg, {"checkpoint": "ck", "out_dir": "out", "tag": "global_step5", "tokenizer": "tok",
                                "dtype": "bfloat16"})
    cfg, _ = _parse("bloomtrain export", ["ck", "out"])
    assert _same(cfg, {"checkpoint": "ck", "out_dir": "out", "tag": None, "tokenizer": None, "dtype": None})
    card = ["--license", "apache-2.0", "--name", "m", "--hub-tag", "a", "--hub-tag", "b", "--clean-summary",
            "c.json", "--fertility", "f.json", "--evaluation", "e.json", "--evaluated-model", "exported",
            "--evaluation-split", "validation", "--power-watts", "400", "--carbon-intensity", "0.057"]
    card_values = {"license": "apache-2.0", "name": "m", "tags": ["a", "b"], "clean_summary": "c.json",
                   "fertility": "f.json", "evaluation": "e.json", "evaluated_model": "exported",
                   "evaluation_split": "validation", "power_watts": 400.0, "carbon_intensity": 0.057}
    cfg, _ = _parse("bloomtrain export", ["ck", "out", *card])
    assert _same(cfg, {"checkpoint": "ck", "out_dir": "out", "tag": None, "tokenizer": None, "dtype": None,
                       **card_values})
    cfg, _ = _parse("bloomtrain model-card", ["hf", "--out", "R.md", "--tag", "t", *card])
    assert _same(cfg, {"path": "hf", "out": "R.md", "tag": "t", **card_values})
    assert _parse("bloomtrain model-card", ["hf"])[0].model_fields_set == {"path"}  # only what was given replaces
    cfg, _ = _parse("bloomtrain import", ["hf", "--out", "ck", "--tp", "2", "--pp", "3", "--dtype", "float16",
                                          "--tag", "t0"])
    assert _same(cfg, {"hf_dir": "hf", "out_dir": "ck", "tp": 2, "pp": 3, "dtype": "float16", "tag": "t0"})
    cfg, _ = _parse("bloomtrain import", ["hf", "--out", "ck"])
    assert _same(cfg, {"hf_dir": "hf", "out_dir": "ck", "tp": 1, "pp": 1, "dtype": None, "tag": "global_step0"})
    cfg, _ = _parse("bloomtrain generate", [
        "--model", "m", "--prompt", "a", "--prompt", "b", "--tokenizer", "t", "--max-new-tokens", "5", "--greedy",
        "--temperature", "0.7", "--top-k", "40", "--top-p", "0.9", "--seed", "3", "--dtype", "bfloat16"])
    assert _same(cfg, {"model": "m", "prompts": ["a", "b"], "tokenizer": "t", "max_new_tokens": 5,
                                "greedy": True, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 3,
                                "dtype": "bfloat16"})
    cfg, _ = _parse("bloomtrain generate", ["--model", "m", "--prompt", "a"])
    assert _same(cfg, {"model": "m", "prompts": ["a"], "tokenizer": None, "max_new_tokens": 32,
                                "greedy": False, "temperature": 1.0, "top_k": None, "top_p": None, "seed": 0,
                                "dtype": "float32"})


def test_slurm_and_build_kernels_flags():
    cfg, _ = _parse("bloomtrain slurm", [
        "--config", "c.yaml", "--nodes", "48", "--gpus-per-node", "4", "--cpus-per-task", "32", "--time",
        "1-00:00:00", "--save-margin-minutes", "5", "--job-name", "j", "--master-port", "7000", "--python", "py",
        "--workdir", "/w", "--sbatch=--partition=gpu", "--sbatch=--qos=x", "--env", "A=1", "--out", "s.sh",
        "optim.lr=1", "seed=3"])
    assert _same(cfg, {
        "config": "c.yaml", "nodes": 48, "gpus_per_node": 4, "cpus_per_task": 32, "time": "1-00:00:00",
        "save_margin_minutes": 5.0, "job_name": "j", "master_port": 7000, "python": "py", "workdir": "/w",
        "sbatch": ["--partition=gpu", "--qos=x"], "env": ["A=1"], "out": "s.sh", "overrides": ["optim.lr=1", "seed=3"]})
    cfg, _ = _parse("bloomtrain slurm", ["--config", "c.yaml", "--nodes", "2"])
    assert _same(cfg, {
        "config": "c.yaml", "nodes": 2, "gpus_per_node": 8, "cpus_per_task": 64, "time": "100:00:00",
        "save_margin_minutes": 10.0, "job_name": None, "master_port": None, "python": "python", "workdir": ".",
        "sbatch": [], "env": [], "out": None, "overrides": []})
    # options and overrides in any order
    cfg, _ = _parse("bloomtrain slurm", ["--config", "c.yaml", "a.b=1", "--nodes", "2", "c=2", "--max-restarts", "0",
                                         "d=3"])
    assert (cfg.nodes, cfg.max_restarts, cfg.overrides) == (2, 0, ["a.b=1", "c=2", "d=3"])
    for argv, cuda, verbose in [(["--cpu-only", "--verbose"], False, True), (["--cuda"], True, False),
                                ([], None, False)]:
        cfg, _ = _parse("bloomtrain build-kernels", argv)
        assert (cfg.cuda, cfg.verbose) == (cuda, verbose)


def test_mixture_search_flags():
    cfg, _ = _parse("bloomtrain mixture-search", [
        "--datasets-dir", "d", "--dataset", "x=p/x", "--tokenizer", "t", "--out", "o", "--prior-alpha", "1",
        "--proxies", "8", "--proxy-tokens", "2e5", "--seed", "3", "--objective", "weighted", "--objective-weight",
        "sw=2", "--floor", "0.01", "--cap", "en=0.5", "--budget", "1e9", "--max-epochs", "3", "--concentration", "2",
        "40", "--validate", "--validate-seeds", "3", "--workers", "4", "--scheduler", "tcp://h:1", "--no-progress"])
    assert (cfg.datasets, cfg.datasets_dir, cfg.tokenizer, cfg.out_dir) == ({"x": "p/x"}, "d", "t", "o")
    assert (cfg.prior_alpha, cfg.proxies, cfg.proxy_tokens, cfg.seed) == (1.0, 8, 200_000, 3)
    assert (cfg.objective, cfg.objective_weights, cfg.floor, cfg.cap) == ("weighted", {"sw": 2.0}, 0.01, {"en": 0.5})
    assert (cfg.token_budget, cfg.max_epochs, cfg.concentration) == (10**9, 3.0, (2.0, 40.0))
    assert (cfg.validate_proposal, cfg.validate_seeds, cfg.workers, cfg.scheduler, cfg.progress) == \
        (True, 3, 4, "tcp://h:1", False)
    cfg, _ = _parse("bloomtrain mixture-search", ["--datasets-dir", "d", "--tokenizer", "t", "--out", "o",
                                                  "--valid-range", "0.95:1"])
    assert (cfg.split, cfg.valid_range, cfg.proxies, cfg.prior_alpha) == (None, "0.95:1", 16, 0.3)


def test_flows_demo_and_serve_flags():
    cfg, _ = _parse("python -m flows.demo", ["--corpus", "c.jsonl", "--text-field", "body", "--lang-field", "language",
                                            "--lang", "sw", "--out", "o", "--workers", "3", "--scheduler", "tcp://h:1",
                                            "--train-iters", "50"])
    assert _same(cfg, {"corpus": [_source("c.jsonl", "sw", "body", "language")], "out_dir": "o", "workers": 3,
                                "scheduler": "tcp://h:1", "train_iters": 50})
    cfg, _ = _parse("python -m flows.demo", [])
    assert _same(cfg, {"corpus": [], "out_dir": "demo_out", "workers": 2, "scheduler": None, "train_iters": None})
    assert _parse("python -m flows.demo", ["--verbose"])[0].verbose
    from flows.demo import pipeline_config  # the demo's stages that start a Dask cluster get --dashboard

    on = pipeline_config(_parse("python -m flows.demo", ["--dashboard"])[0])
    assert on.dataset.dashboard and on.clean is not None and on.clean.dashboard and not on.tokenizer.dashboard
    assert not pipeline_config(cfg).dataset.dashboard
    from flows.rehearsal import pipeline_config as rehearsal_pipeline

    assert rehearsal_pipeline(_parse("python -m flows.rehearsal", ["--dashboard", "--out", "r"])[0]).dataset.dashboard
    cfg, _ = _parse("python -m flows.ui", ["--out", "runs/r", "--port", "4300"])
    assert (cfg.out_dir, cfg.host, cfg.port) == ("runs/r", "127.0.0.1", 4300)
    assert _parse("python -m flows.serve", ["--limit", "4"])[0].limit == 4
    assert _parse("python -m flows.serve", [])[0].limit is None
    cfg, _ = _parse("python -m flows.deploy", ["--pull", "shared", "--shared-dir", "/nfs/b", "--pool", "cpu",
                                               "--name", "launch-training", "--name", "bits-per-byte"])
    assert (cfg.pull, str(cfg.shared_dir), cfg.pool, cfg.name) == ("shared", "/nfs/b", "cpu",
                                                                    ["launch-training", "bits-per-byte"])
    cfg, _ = _parse("python -m flows.deploy", ["--repository", "https://git.lab/b.git", "--branch", "exp"])
    assert (cfg.pull, cfg.repository, cfg.branch, cfg.pool, cfg.name) == ("git", "https://git.lab/b.git", "exp",
                                                                          "bloomstack", [])


def _field_path_exists(model: type[BaseModel], key: tuple) -> bool:
    import typing

    from bloomdata.cli.options import _strip
    from bloomdata.config_loader import fields_of

    tp: object = model
    for part in key:
        tp = _strip(tp)[0]
        if typing.get_origin(tp) is list:  # the items of a list[Model] field (their shared flags)
            tp = typing.get_args(tp)[0]
        # fields_of: the model's fields and those it adds at run time (a filter step's parameters)
        if not (isinstance(tp, type) and issubclass(tp, BaseModel)) or part not in fields_of(tp):
            return False
        tp = fields_of(tp)[part].annotation
    return True


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_is_a_model_field_and_has_help(command):
    p = _parser(command)
    generated = {flag for o in p.options for flag in (*o.flags, *o.off)}
    for option in p.options:
        assert _field_path_exists(p.model, option.key), (command, option.key)
    text = p.parser.format_help()
    for action in p.parser._actions:
        flags = [f for f in action.option_strings if not f.startswith("--no-")]
        # generated, or one of the few non-config options (argparse refuses an option string declared twice)
        assert set(flags) <= generated | set(p.hand_declared) | {"-h", "--help"}, (command, flags)
        assert set(p.hand_declared) <= HAND_DECLARED
        assert action.help and "(no description)" not in action.help, (command, action.option_strings)
        for flag in action.option_strings:
            assert flag in text, (command, flag)


def test_a_hand_declared_config_flag_is_refused():
    p = _parser("bloomdata build")
    with pytest.raises(ValueError, match="make it a model field"):
        p.add_argument("--workers", type=int)


def test_a_library_error_names_the_config_key_and_the_cli_its_flag(tmp_path, capsys):
    # the library is called by the flows as much as by a CLI: its message names the config key (out_dir);
    # `bloomdata clean` prints the same line with the key as its flag (--out), from the generated options
    from bloomdata.clean import run_clean
    from bloomdata.clean.config import CleanConfig
    from bloomdata.cli import main as bloomdata_main
    from bloomdata.errors import BloomstackError

    (tmp_path / "a.jsonl").write_text('{"text": "one line of text to clean here", "lang": "en"}\n')
    config = CleanConfig(sources=[str(tmp_path / "a.jsonl")], out_dir=str(tmp_path), workers=0, progress=False)
    with pytest.raises(BloomstackError) as info:
        run_clean(config)
    assert str(info.value).endswith("choose an out_dir outside the inputs") and info.value.keys == ("out_dir",)
    assert bloomdata_main(["clean", "--input", str(tmp_path / "a.jsonl"), "--out", str(tmp_path), "--workers", "0",
                           "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"bloomdata clean: error: {str(info.value).replace('an out_dir', 'an --out')}"


def test_keys_become_flags_as_whole_words_only():
    from bloomdata.errors import BloomstackError

    parser = importlib.import_module("bloomtrain.cli.evaluate").parser()
    exc = BloomstackError("tasks xnli: not a task (runs/tasks/a.yaml, my_tasks, lm_eval.tasks); list them with "
                          "`lm-eval ls tasks`, or add its directory to task_paths; context 9 > 8",
                          keys=["tasks", "task_paths"])
    assert parser.message(exc) == ("--tasks xnli: not a task (runs/tasks/a.yaml, my_tasks, lm_eval.tasks); list them "
                                   "with `lm-eval ls tasks`, or add its directory to --task-path; context 9 > 8")


def test_every_key_a_library_error_names_is_a_flag_of_some_command():
    # keys=[...] in bloomdata/bloomtrain (outside the CLIs) must be config keys a command can set: a misspelt
    # key would reach the CLI user as the key, not as the flag
    import ast

    root = Path(__file__).resolve().parents[1]
    named: dict[str, str] = {}
    for path in [*root.glob("bloomdata/**/*.py"), *root.glob("bloomtrain/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
                if kw.arg == "keys" and isinstance(kw.value, ast.List | ast.Tuple):
                    for item in kw.value.elts:
                        if isinstance(item, ast.Constant):
                            named[item.value] = f"{path.relative_to(root)}:{node.lineno}"
    assert len(named) >= 20
    flags = set()
    for module in COMMANDS.values():
        made = importlib.import_module(module).parser()
        if isinstance(made, ConfigParser):
            flags |= {".".join(map(str, o.key)) for o in made.options if o.flags}
    missing = {key: where for key, where in named.items() if key not in flags}
    assert not missing, f"keys no command has a flag for: {missing}"


@pytest.mark.parametrize("command", ["bloomdata build", "bloomdata clean", "bloomdata train-tokenizer",
                                     "bloomtrain mixture-search", "bloomdata demo", "python -m flows.demo",
                                     "python -m flows.rehearsal"])
def test_dashboard_flag_on_every_command_that_starts_a_dask_cluster(command):
    """`--dashboard` sets the typed `dashboard` field (default off) that bloomdata.jobs hands to its LocalCluster."""
    parser = _parser(command)
    option = next(o for o in parser.options if o.key == ("dashboard",))
    assert option.flags == ["--dashboard"] and option.kind == "bool"
    assert parser.model.model_fields["dashboard"].default is False
