"""Exit records: how each rank of each training attempt ended, one small JSON file per rank.

torchelastic's error file (``TORCHELASTIC_ERROR_FILE``) says why a rank *failed*; an exit record says how it
ended, whatever the ending (finished, time budget, signal, kill switch, config or input error, full disk, damaged
checkpoint, failure), at which iteration and with which checkpoint. The restart hook of ``bloomtrain.launcher``,
the flows and the Slurm job read them through ``bloomtrain.recovery``, which decides retry / requeue / stop: nobody
parses log lines. Layout, under the launch's exit directory (``BLOOMTRAIN_EXIT_DIR``, which the launchers set on a
file system every node sees; default ``<checkpoint.dir>/exits``)::

    attempt-<K>/rank-<R>.json        K: torchrun's restart count (TORCHELASTIC_RESTART_COUNT), R: global rank
    attempt-<K>/rank-<R>.traceback   the full traceback of a rank that failed
    attempt-<K>/stacks-rank-<R>.txt  every thread's Python stack of a rank that hung (stability.hang_timeout_s)
    attempt-<K>/stacks-rank-<R>.nccl.json  and, on CUDA, the NCCL flight recorder's trace of its collectives
    attempt-<K>/node-<NAME>.json     what the node's agent saw and decided after the attempt (bloomtrain.launcher)

A rank writes ``running`` as soon as it starts and replaces it with its ending (bloomdata.durable: a reader
sees one or the other, never a torn file). A record still ``running`` after its process exited means it
died without a word: SIGKILL, the OOM killer, a lost node.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.disk import is_disk_full

EXIT_DIR_ENV = "BLOOMTRAIN_EXIT_DIR"
NODE_ENV = "BLOOMTRAIN_NODE"
AGENT_ENV = "BLOOMTRAIN_AGENT"  # set by bloomtrain.launcher: its agent reports failures, the ranks stay quiet


class ExitKind(StrEnum):
    """How a rank ended: one type from ``Trainer.request_stop`` through the exit record to recovery's decision
    (``bloomtrain.recovery.AFTER_KIND`` has a rule for each). The values are the records' JSON."""

    RUNNING = "running"  # not ended yet; still so after the process exited: it died without a word
    FINISHED = "finished"  # the schedule ended
    TIME_BUDGET = "time_budget"  # checkpoint.exit_duration_in_mins: saved, to continue in a new allocation
    SIGNAL = "signal"  # one of checkpoint.exit_signals (or Ctrl-C): saved
    KILL_SWITCH = "kill_switch"  # checkpoint.kill_switch_path appeared: saved
    CONFIG_ERROR = "config_error"  # a config or input error (a BloomstackError): never retried
    DISK_FULL = "disk_full"  # a write met a full disk (ENOSPC, quota): never retried, the user frees space
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"  # the checkpoint's digests disagree (checkpoint.on_corrupt=fail)
    FAILURE = "failure"  # an exception: its traceback is beside the record
    HANG = "hang"  # no finished iteration for stability.hang_timeout_s: every thread's stack is beside the record


class ExitRecord(BaseModel):
    kind: ExitKind
    rank: int
    node: str
    pid: int
    attempt: int
    """torchrun's restart count of the worker group this rank belonged to (0 outside torchrun)."""
    started: float
    """Unix time the rank started."""
    ended: float | None = None
    resumed_from: str | None = None
    """The checkpoint tag the rank loaded (None: started from scratch, or before the config was read)."""
    iteration: int | None = None
    """The last finished iteration (None before the first one)."""
    checkpoint: str | None = None
    """The newest complete checkpoint when the rank ended."""
    checkpoint_dir: str | None = None
    """checkpoint.dir of the run (its ``latest`` names the checkpoint a restart loads)."""
    message: str = ""
    """One line: the stop reason or the error."""
    traceback: str | None = None
    """Path of the full traceback of a failure, or of every thread's stack of a hang."""


class NodeRecord(BaseModel):
    """A node agent's view of one failed attempt and what the nodes decided together (bloomtrain.launcher)."""

    node: str
    attempt: int
    at: float
    """Unix time of the decision."""
    action: Literal["retry", "stop"]
    cause: str
    """The attempt's root cause as the nodes agreed on it (a rank, its node, how it ended)."""
    line: str = ""
    """The decision as the agent printed it."""
    resumes_from: str | None = None
    """The checkpoint tag the next worker group (or the next launch) resumes from; "": none yet, it starts
    over; None: not known (no rank recorded its checkpoint dir)."""
    lost_nodes: list[str] = []
    lost_ranks: list[int] = []


def node_name() -> str:
    """This node's name: ``BLOOMTRAIN_NODE``, else Slurm's node name, else the host name."""
    return os.environ.get(NODE_ENV) or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def attempt_dir(root: str | Path, attempt: int) -> Path:
    return Path(root) / f"attempt-{attempt}"


def attempts(root: str | Path) -> list[int]:
    """The attempts with a directory under ``root``, in order."""
    found = [p.name.removeprefix("attempt-") for p in Path(root).glob("attempt-*") if p.is_dir()]
    return sorted(int(n) for n in found if n.isdigit())


def write_record(root: str | Path, record: ExitRecord | NodeRecord) -> Path | None:
    """Write the record (atomically). The exit directory may share a disk that filled up: then an existing record
    (a rank's ``running``) is rewritten in the blocks it has, since a rank without its ending would read as a death
    and be retried; a new one is not written (None)."""
    folder = attempt_dir(root, record.attempt)
    name = f"rank-{record.rank}" if isinstance(record, ExitRecord) else f"node-{record.node}"
    path = folder / f"{name}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        durable.write_json(path, record)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        if not path.is_file():
            return None
        durable.rewrite_in_place(path, durable.json_text(record).encode("utf-8"))
    return path


class Attempt(BaseModel):
    """Every record of one attempt."""

    number: int
    ranks: dict[int, ExitRecord] = {}
    nodes: dict[str, NodeRecord] = {}


def read_attempt(root: str | Path, number: int) -> Attempt:
    folder = attempt_dir(root, number)
    ranks = {}
    for path in folder.glob("rank-*.json"):
        if (data := durable.read_json(path)) is not None:
            record = ExitRecord.model_validate(data)
            ranks[record.rank] = record
    nodes = {}
    for path in folder.glob("node-*.json"):
        if (data := durable.read_json(path)) is not None:
            node = NodeRecord.model_validate(data)
            nodes[node.node] = node
    return Attempt(number=number, ranks=dict(sorted(ranks.items())), nodes=nodes)


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, at most 300 characters."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


class Recorder:
    """The exit record of this process: ``running`` at the start, then how it ended.

    Made before anything else can fail (``from_env``); the directory may become known only with the config
    (``open``). Without a directory nothing is written and ``quiet`` is False: errors print as usual.
    """

    def __init__(self, root: str | Path | None, rank: int, attempt: int, node: str) -> None:
        self.root = Path(root) if root else None
        self.record = ExitRecord(kind=ExitKind.RUNNING, rank=rank, node=node, pid=os.getpid(), attempt=attempt,
                                 started=time.time())

    @classmethod
    def from_env(cls) -> Recorder:
        return cls(os.environ.get(EXIT_DIR_ENV), int(os.environ.get("RANK", "0")),
                   int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), node_name())

    @property
    def quiet(self) -> bool:
        """A failure is reported by the launcher's agent from this record, not printed by every rank."""
        return self.root is not None and os.environ.get(AGENT_ENV) == "1"

    def open(self, checkpoint_dir: str | None, resumed_from: str | None) -> None:
        """Write ``running`` (into ``<checkpoint_dir>/exits`` unless the launcher named a directory)."""
        if self.root is None and checkpoint_dir is not None:
            self.root = Path(checkpoint_dir) / "exits"
        self.record = derive(self.record, resumed_from=resumed_from, checkpoint=resumed_from,
                             checkpoint_dir=checkpoint_dir)
        self._write()

    def resumed(self, tag: str | None) -> None:
        """The checkpoint the trainer loaded (in memory; written with the ending): not ``latest`` as ``open`` read it
        when that one was damaged and an earlier one was loaded instead."""
        self.record = derive(self.record, resumed_from=tag, checkpoint=tag)

    def progress(self, iteration: int, checkpoint: str | None) -> None:
        """Remember where training is (in memory; written with the ending)."""
        self.record = derive(self.record, iteration=iteration, checkpoint=checkpoint)

    def end(self, kind: ExitKind, message: str = "", tb: str | None = None) -> None:
        traceback_file = None
        if tb is not None and self.root is not None:
            path = attempt_dir(self.root, self.record.attempt) / f"rank-{self.record.rank}.traceback"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                durable.write_text(path, tb)
                traceback_file = str(path)
            except OSError as exc:  # a full disk: the record itself matters more (write_record)
                if not is_disk_full(exc):
                    raise
        self.record = derive(self.record, kind=kind, message=message, ended=time.time(),
                             traceback=traceback_file or self.record.traceback)
        self._write()

    def fail(self, exc: BaseException) -> None:
        self.end(ExitKind.FAILURE, one_line(exc), "".join(traceback.format_exception(exc)))

    def hung(self, message: str, stacks: str, nccl_trace: str | None = None) -> Path | None:
        """End with ``hang``: ``stacks`` (every thread's stack) and the NCCL flight recorder's ``nccl_trace`` (JSON)
        go beside the record; returns the stacks file (None without an exit directory)."""
        path = None
        if self.root is not None:
            path = attempt_dir(self.root, self.record.attempt) / f"stacks-rank-{self.record.rank}.txt"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                durable.write_text(path, stacks)
                if nccl_trace is not None:
                    durable.write_text(path.with_name(f"stacks-rank-{self.record.rank}.nccl.json"), nccl_trace)
            except OSError as exc:  # a full disk: the record itself matters more (write_record)
                if not is_disk_full(exc):
                    raise
                path = None
        self.record = derive(self.record, kind=ExitKind.HANG, message=message, ended=time.time(),
                             traceback=str(path) if path else None)
        self._write()
        return path

    def _write(self) -> None:
        if self.root is not None:
            write_record(self.root, self.record)
