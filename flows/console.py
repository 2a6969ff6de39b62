"""The console of ``python -m flows.demo`` and ``flows.rehearsal``, and the run's log file that keeps the rest.

What a person at the terminal sees (``setup``):

- each stage's start and end lines (Prefect's flow-run lines) and the flows' own messages and summary tables;
- a progress bar while a stage works (cleaning, tokenizing, training iterations, evaluation), on an
  interactive terminal only (``bars()``: a log file or a pipe gets no carriage-return noise);
- every warning and error, once (the same text from two ranks, or from two stages, is printed once).

What goes to ``<out>/logs/<prog>.log`` only (and, for the runs' own lines, to the Prefect UI):

- other libraries' INFO output: Dask's cluster start and stop (nannies, "Register worker", "Retire worker
  addresses", "Lost all workers", the jupyter-server-proxy hint), DeepSpeed's, transformers';
- Prefect's "View at <temporary server>" links (dead once the command ends; the demo's last lines say how to
  open the runs, ``flows.ui``) and its task-run "Finished in state Completed()" lines;
- from the training job (``job_line``): DeepSpeed's log lines below WARNING, its layer listing and topology
  lines, its "Setting accelerator to CPU" warning (expected on a CPU machine), and the trainer's iteration
  and validation lines, which the progress bar stands for (they stay in ``train/launch.log`` and
  ``train/logs/metrics.jsonl`` too);
- transformers' "Loading weights" progress bars are turned off.

``--verbose`` (or ``LOG_LEVEL=DEBUG``; ``LOG_LEVEL`` sets the level of this project's loggers) prints
everything as the libraries do. Measured on the demo: 305 console lines before, ``tests/flows/test_demo_console``
counts them now.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOGS_DIR = "logs"
OURS = ("flows", "bloomdata", "bloomtrain")  # this project's loggers: their INFO lines are the stages' own
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # the runs' loggers (a stage's lines, Prefect's engine's)
CONSOLE = "bloomstack_console"  # a record with this attribute False goes to the log file and the API only
QUIET: dict[str, Any] = {CONSOLE: False}  # ``log.info(msg, extra=QUIET)``
DEEPSPEED_LOGGER = "DeepSpeed"

# Warnings that are expected and say nothing to act on: into the log file.
EXPECTED = (re.compile(r"Setting accelerator to CPU\. If you have GPU or other accelerator"),)

# DeepSpeed's log format: "[2026-11-27 15:03:03,538] [WARNING] [real_accelerator.py:213:get_accelerator] msg".
DEEPSPEED_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[(?P<level>[A-Z]+)\] \[[^]]*\] (?P<msg>.*)$")
# What DeepSpeed prints (print(), not its logger) while building a PipelineModule, on rank 0.
DEEPSPEED_PRINTS = re.compile(r"^(SEED_LAYERS=|Using topology: |stage=\d+ layers=\d+$|\s+\d+: \w+$|\s+loss: \w+$)")
# The trainer's iteration and validation lines (bloomtrain.metrics): the progress bar shows them.
PROGRESS_LINES = re.compile(r"^(iter \d+/\d+ \||validation .*at iter \d+ \|)")


@dataclass(frozen=True)
class Console:
    """How this process prints: ``verbose`` (everything, as the libraries do) and the log file, if any."""

    verbose: bool = False
    log_file: Path | None = None


_console = Console(verbose=True)  # until ``setup``: as before (tests, deployments, ``flows.serve``)


def verbose_requested(flag: bool) -> bool:
    return flag or os.environ.get("LOG_LEVEL", "").upper() == "DEBUG"


def bars() -> bool:
    """Progress bars on stderr: on an interactive terminal only."""
    return sys.stderr.isatty()


def progress_bar(total: int, desc: str, unit: str) -> Any:
    """A tqdm bar on stderr when ``bars()``, else None."""
    if not bars():
        return None
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)


def job_line(line: str) -> tuple[int, bool]:
    """The level of one line of the training job's output and whether it belongs on the console."""
    if _console.verbose:
        return logging.INFO, True
    if m := DEEPSPEED_LINE.match(line):
        level = logging.getLevelName(m.group("level"))
        level = level if isinstance(level, int) else logging.INFO
        return level, level >= logging.WARNING and not _expected(m.group("msg"))
    if DEEPSPEED_PRINTS.match(line) or PROGRESS_LINES.match(line):
        return logging.INFO, False
    if "warning" in line.lower():
        return logging.WARNING, not _expected(line)
    return logging.INFO, True


def _expected(message: str) -> bool:
    return any(p.search(message) for p in EXPECTED)


class ConsoleFilter(logging.Filter):
    """On the terminal's handlers: a stage's lines and every warning or error once; the rest is the file's."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, CONSOLE, True) is False:
            return False
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            if _expected(message) or message in self.seen:
                return False
            self.seen.add(message)
            return True
        if record.name.startswith(RUN_LOGGERS):
            return not (message.startswith("View at ")
                        or (record.name.startswith("prefect.task_runs") and message.startswith("Finished in state")))
        return record.name.split(".")[0] in OURS


class _DeepSpeedToFile(logging.Filter):
    """On DeepSpeed's own logger (it prints to stdout through a handler of its own, and does not propagate):
    every record to the log file, and only warnings and errors that are not ``EXPECTED`` on to its handler."""

    def __init__(self, file_handler: logging.Handler, console: ConsoleFilter) -> None:
        super().__init__()
        self.file_handler, self.console = file_handler, console

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.file_handler.level:
            self.file_handler.handle(record)
        return record.levelno >= logging.WARNING and self.console.filter(record)


def _terminal_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))]
    return [h for lg in loggers for h in getattr(lg, "handlers", [])
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and getattr(h, "stream", None) in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)]


def _above_bars(handler: logging.Handler) -> None:
    """Print ``handler``'s lines above the progress bars on the terminal (a bar is cleared, the line written,
    the bar drawn again), not into the middle of one."""
    from tqdm import tqdm  # noqa: PLC0415

    emit = handler.emit

    def emit_above_bars(record: logging.LogRecord) -> None:
        with tqdm.external_write_mode(file=sys.stderr):
            emit(record)

    handler.emit = emit_above_bars  # type: ignore[method-assign]


def setup(out_dir: str | Path, prog: str, verbose: bool = False) -> Console:
    """Route this process's logging as the module says; returns the console (its log file: ``<out>/logs/<prog>.log``).

    Call once, before the flows run (Prefect's logging is configured first, so that its console handler gets
    the filter). ``verbose``: the terminal gets everything; the file still does too."""
    global _console
    from prefect.logging.configuration import ensure_logging_setup  # noqa: PLC0415

    verbose = verbose_requested(verbose)
    level = logging.getLevelName(os.environ.get("LOG_LEVEL", "INFO").upper())
    level = level if isinstance(level, int) else logging.INFO
    log_file = Path(out_dir).resolve() / LOGS_DIR / f"{prog}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    ensure_logging_setup()
    # Dask configures its loggers when first imported: a stderr handler of its own, propagate off, so its lines
    # would never reach the file. Imported here and handed to the root logger's handlers, they go where every
    # other library's go (the file; warnings and errors to the terminal, once).
    import distributed  # noqa: F401, PLC0415

    logging.getLogger("distributed").handlers.clear()
    logging.getLogger("distributed").propagate = True
    file_handler = logging.FileHandler(log_file, encoding="utf-8")  # an append-only log, not a durable file
    file_handler.setLevel(min(level, logging.INFO))
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(file_handler)
    for name in OURS:
        logging.getLogger(name).setLevel(level)
    if level < logging.INFO:
        logging.getLogger().setLevel(level)
    _console = Console(verbose=verbose, log_file=log_file)
    if verbose:
        return _console
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bars, here and
    from huggingface_hub.utils import disable_progress_bars  # noqa: PLC0415 - in subprocesses

    disable_progress_bars()
    console = ConsoleFilter()
    for handler in _terminal_handlers():
        handler.addFilter(console)
        _above_bars(handler)
    logging.getLogger(DEEPSPEED_LOGGER).addFilter(_DeepSpeedToFile(file_handler, console))
    return _console


class TrainingBar:
    """The training's progress bar in the flow process, from the run's metrics.jsonl (the job's own iteration
    lines go to the log file): iterations done of ``total``, the last loss and validation loss."""

    def __init__(self, total: int | None) -> None:
        self.total, self.bar = total, None

    def show(self, train: list[dict[str, Any]], evals: list[dict[str, Any]]) -> None:
        if not self.total or not train:
            return
        if self.bar is None:
            self.bar = progress_bar(self.total, "train", "it")
            if self.bar is None:  # not a terminal: nothing to draw, ever
                self.total = None
                return
        self.bar.n = min(train[-1]["iteration"], self.total)  # a resumed run starts from its checkpoint
        postfix = {"loss": f"{train[-1]['loss']:.4f}"}
        if evals and "valid_loss" in evals[-1]:
            postfix["valid"] = f"{evals[-1]['valid_loss']:.4f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()

    def close(self, metrics: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None, finished: bool) -> None:
        """The last look at the metrics; ``finished``: the run ended at its last iteration (logged or not)."""
        if metrics is not None:
            self.show(*metrics)
        if self.bar is not None:
            if finished and self.total:
                self.bar.n = self.total
            self.bar.close()
