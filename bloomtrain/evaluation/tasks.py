"""Downstream tasks (xnli, xstorycloze, xwinograd, ...) through lm-evaluation-harness (the ``eval`` extra).

The already-loaded model and tokenizer are handed to lm-eval's Hugging Face model class (``HFLM``), so the
tasks score the very weights the bits-per-byte table scores. Tasks run offline: ``HF_DATASETS_OFFLINE`` and
``HF_HUB_OFFLINE`` are set while they run, so a task whose data is not in the local datasets cache fails at
once, as one line that names the task and how to make its data available, instead of trying the network.
Extra task YAMLs (a local multiple-choice set, say) come from ``--task-path DIR`` (lm-eval's include path).

``task_metrics`` keeps the numeric metrics of every task and subtask lm-eval reports (``acc``, ``acc_norm``
and their ``_stderr``), keyed by task name, for ``eval.json`` and ``eval.md``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomdata.errors import BloomstackError
from bloomtrain.evaluation.models import CausalLM

_OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """No network for datasets / huggingface_hub while the block runs (their flags are read at import, so the
    already-imported modules' constants are set too), restored afterwards."""
    saved_env = {k: os.environ.get(k) for k in _OFFLINE}
    os.environ.update(dict.fromkeys(_OFFLINE, "1"))
    patched: list[tuple[Any, str, Any]] = []
    for module, attr in (("datasets.config", "HF_DATASETS_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                         ("huggingface_hub.constants", "HF_HUB_OFFLINE")):
        mod = sys.modules.get(module)
        if mod is not None and hasattr(mod, attr):
            patched.append((mod, attr, getattr(mod, attr)))
            setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in patched:
            setattr(mod, attr, value)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _import_lm_eval():
    try:
        import lm_eval  # noqa: PLC0415
        from lm_eval.models.huggingface import HFLM  # noqa: PLC0415
        from lm_eval.tasks import TaskManager  # noqa: PLC0415
    except ImportError as exc:
        raise BloomstackError(f"tasks needs lm-evaluation-harness ({exc}); install the eval extra: "
                              "pip install 'bloomstack[eval]'", keys=["tasks"]) from None
    return lm_eval, HFLM, TaskManager


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:240]}"


def task_manager(task_paths: Sequence[str] = (), tasks: Sequence[str] = ()):
    """lm-eval's ``TaskManager`` for ``tasks``, one per process for the same YAML files. Its index of lm-eval's own
    tasks parses every task YAML lm-eval ships (over 14,000 names: seconds of start-up), which a run of
    several models paid once per model. When every name in ``tasks`` is a task of the YAMLs in ``task_paths`` (an
    offline run's local tasks), the index of those YAMLs alone serves: loading a task reads its own YAML (and what
    that includes) by path, never the index of lm-eval's. Groups and tags, which name other tasks, take both."""
    _import_lm_eval()  # without the eval extra: its one-line error, before the directories are checked
    for path in task_paths:
        if not os.path.isdir(path):
            raise BloomstackError(f"task_paths {path}: not a directory; give a directory of lm-eval task YAMLs",
                                  keys=["task_paths"])
    inputs = _index_inputs(task_paths)
    if task_paths and tasks:
        local = _manager(tuple(task_paths), inputs, with_lm_eval_tasks=False)
        if set(tasks) <= set(local.all_subtasks):
            return local
    return _manager(tuple(task_paths), inputs, with_lm_eval_tasks=True)


def _index_inputs(task_paths: Sequence[str]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime ns, size) of each YAML the index reads under ``task_paths`` (lm-eval's own are installed files): an
    added, removed or changed one builds a new index. The index holds names and paths only; a task's config is read
    from its YAML again whenever the task is loaded."""
    files = sorted(str(f) for path in task_paths for f in Path(path).glob("**/*.yaml"))
    return tuple((f, (s := os.stat(f)).st_mtime_ns, s.st_size) for f in files)


@functools.lru_cache(maxsize=8)
def _manager(task_paths: tuple[str, ...], _inputs: tuple[tuple[str, int, int], ...], with_lm_eval_tasks: bool):
    _, _, TaskManager = _import_lm_eval()
    return TaskManager(include_path=list(task_paths) or None, include_defaults=with_lm_eval_tasks)


def check_tasks(tasks: Sequence[str], task_paths: Sequence[str] = ()) -> None:
    """Every name in ``tasks`` is an lm-eval task, group or tag (with the YAMLs of ``task_paths``): before a model
    loads, so a misspelt name costs seconds, not a scored model."""
    check_task_names(task_manager(task_paths, tasks), tasks)


def check_task_names(manager, tasks: Sequence[str]) -> None:
    known = set(manager.all_tasks)
    for name in tasks:
        if name not in known:
            raise BloomstackError(f"tasks {name}: not an lm-eval task, group or tag; list them with `lm-eval ls "
                                  "tasks`, or add the directory of its YAML to task_paths",
                                  keys=["tasks", "task_paths"])


def _data_error(manager, tasks: Sequence[str]) -> BloomstackError | None:
    """After a failed run: the first task whose data cannot be loaded offline, as the error to show."""
    for name in tasks:
        try:
            with offline():
                manager.load([name])
        except Exception as exc:  # noqa: BLE001 - datasets raises many types for missing data
            return BloomstackError(
                f"tasks {name}: its data is not available offline ({_one_line(exc)}); fetch it once where there is "
                f"network: HF_DATASETS_OFFLINE=0 python -c \"from lm_eval.tasks import TaskManager; "
                f"TaskManager().load(['{name}'])\" fills the HF datasets cache (HF_DATASETS_CACHE, default "
                "~/.cache/huggingface/datasets; copy it here), or point the task's dataset_path/data_files at local "
                "files in a YAML in a directory of task_paths", keys=["tasks", "task_paths"])
    return None


@dataclass(frozen=True)
class TaskOptions:
    """How lm-eval runs the tasks: where extra task YAMLs are, how many examples, batches and positions."""

    task_paths: Sequence[str] = ()  # directories of extra lm-eval task YAMLs
    limit: int | None = None  # the first N examples of each task only
    batch_size: int = 8
    max_length: int | None = None  # positions the model takes (lm-eval truncates contexts to it)
    log_samples: bool = False  # keep every example's inputs and scores in the results (``samples``)


def evaluate_tasks(lm: CausalLM, tasks: Sequence[str], options: TaskOptions | None = None) -> dict[str, Any]:
    """lm-eval's ``simple_evaluate`` results for ``tasks`` on the loaded model (offline)."""
    o = options or TaskOptions()
    lm_eval, HFLM, _ = _import_lm_eval()
    manager = task_manager(o.task_paths, tasks)
    check_task_names(manager, tasks)
    with _quiet("lm_eval"):  # its warnings that a pre-loaded model is passed: that is the point here
        harness_lm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=o.batch_size, max_length=o.max_length)
    try:
        with offline():
            results = lm_eval.simple_evaluate(model=harness_lm, tasks=list(tasks), task_manager=manager, limit=o.limit,
                                              log_samples=o.log_samples, bootstrap_iters=1000, verbosity=None)
    except Exception:
        error = _data_error(manager, tasks)
        if error is not None:
            raise error from None
        raise
    if results is None:  # lm-eval returns None on non-zero ranks only; we run one process
        raise RuntimeError("lm-eval returned no results")
    return results


def task_metrics(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """task -> {metric: value} for every task and subtask in lm-eval's results (numeric values only)."""
    out: dict[str, dict[str, float]] = {}
    for task, values in results.get("results", {}).items():
        metrics = {}
        for key, value in values.items():
            name, _, filt = key.partition(",")
            if name == "alias" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            metrics[name if filt in ("", "none") else f"{name},{filt}"] = float(value)
        if metrics:
            out[task] = metrics
    return out


def task_splits(results: dict[str, Any]) -> dict[str, str]:
    """task -> the split lm-eval scored it on (its test split, else its validation split, as lm-eval chooses)."""
    splits = {}
    for task, config in results.get("configs", {}).items():
        split = config.get("test_split") or config.get("validation_split")
        if isinstance(split, str):
            splits[task] = split
    return splits


def run_tasks(lm: CausalLM, tasks: Sequence[str],
              options: TaskOptions | None = None) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """``evaluate_tasks`` reduced to what the report keeps: ``task_metrics`` and ``task_splits``."""
    results = evaluate_tasks(lm, tasks, options)
    return task_metrics(results), task_splits(results)
