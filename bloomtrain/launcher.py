"""``python -m bloomtrain.launcher [torchrun options] -m bloomtrain.cli train --config X ...``: torchrun with
bloomtrain's restart hook; the launcher of the flows and of ``bloomtrain slurm`` jobs.

It takes torchrun's options (torch.distributed.run parses them) and runs torchrun's agent as
``bloomtrain.agent.BloomAgent``: after a failed worker group the nodes agree, through the exit records and
``bloomtrain.recovery``, on restarting it or stopping (a config or input error, a lost node). What else differs:

- every node says what happened in one line (``bloomtrain: node NAME: ...``): the root cause (which rank, on
  which node, how) and the checkpoint the restart loads. Failed ranks stay quiet (bloomtrain.cli.train):
  their tracebacks are files beside their exit records, and torchrun's own log lines and final report go to
  ``<exit dir>/node-<NAME>.log``. A lost node costs the survivors a few lines, not a screen of gloo errors;
- a rank dies with its agent (``die_with_agent``: PR_SET_PDEATHSIG), so killing one node's agent is a lost
  node for the others, never ranks that train on without anyone to restart them;
- no agent waits 300 s at the exit barrier for a peer that is gone.

The workers get ``BLOOMTRAIN_EXIT_DIR`` (kept when set: the flows and the Slurm job put it beside the
checkpoints, where every node sees it; else a new temporary directory), ``BLOOMTRAIN_NODE`` (this node's
name: bloomtrain.exit_record.node_name), ``BLOOMTRAIN_AGENT=1`` and ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
(a restarted worker group must not read the failed group's addresses: pytorch/pytorch#135712).
Exit code: 0, or the decision's (2: config or input error, 1: failure), 128 + N after signal N.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bloomtrain.exit_record import AGENT_ENV, EXIT_DIR_ENV, NODE_ENV, node_name

AGENT_PID_ENV = "BLOOMTRAIN_AGENT_PID"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
TORCH_LOGGERS = ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")


def die_with_agent() -> None:
    """Under bloomtrain.launcher: have the kernel SIGKILL this rank when its agent dies."""
    if os.environ.get(AGENT_ENV) != "1" or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if str(os.getppid()) != os.environ.get(AGENT_PID_ENV):  # the agent died before the prctl
        os.kill(os.getpid(), signal.SIGKILL)


def _log_to_file(path: Path) -> None:
    """torchrun's own log lines (and its final report, written by ``main``) go to ``path``, not the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)  # an append-only log, like launch.log: not a durable file
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in TORCH_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)


@contextlib.contextmanager
def _bloom_agent(node: str, exit_dir: str, say) -> Iterator[list]:
    """torchrun builds ``LocalElasticAgent`` by name inside ``launch_agent``: build ours there instead. Yields
    the agents built (one)."""
    from torch.distributed.launcher import api  # noqa: PLC0415

    from bloomtrain.agent import BloomAgent  # noqa: PLC0415

    built: list = []

    def make(*args, **kwargs):
        built.append(BloomAgent(*args, node=node, exit_dir=exit_dir, say=say, **kwargs))
        return built[-1]

    original, api.LocalElasticAgent = api.LocalElasticAgent, make  # type: ignore[misc,assignment]
    try:
        yield built
    finally:
        api.LocalElasticAgent = original  # type: ignore[misc]


def prepare_env() -> tuple[str, str]:
    """The workers' environment (module docstring); returns (node name, exit directory)."""
    node = node_name()
    exit_dir = os.environ.get(EXIT_DIR_ENV) or tempfile.mkdtemp(prefix="bloomtrain-exits-")
    os.environ.update({EXIT_DIR_ENV: str(Path(exit_dir).resolve()), NODE_ENV: node, AGENT_ENV: "1",
                       AGENT_PID_ENV: str(os.getpid()), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    return node, os.environ[EXIT_DIR_ENV]


def main(argv: list[str] | None = None) -> int:
    # c10d's C++ warnings (a store or peer connection closed: tens of lines each) stay out of the agent's
    # console; the ranks, started with the environment as it was, keep theirs
    cpp_log_level = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    from torch.distributed import run as torchrun  # noqa: PLC0415 - `--help` of the callers stays fast

    if cpp_log_level is None:
        os.environ.pop("TORCH_CPP_LOG_LEVEL")
    else:
        os.environ["TORCH_CPP_LOG_LEVEL"] = cpp_log_level
    args = torchrun.parse_args(sys.argv[1:] if argv is None else argv)
    node, exit_dir = prepare_env()
    log = Path(exit_dir) / f"node-{node}.log"
    _log_to_file(log)

    def say(line: str) -> None:
        print(f"bloomtrain: node {node}: {line}", flush=True)

    with _bloom_agent(node, exit_dir, say) as agents:
        try:
            code = _run_agent(torchrun, args, agents, log, exit_dir, say)
        finally:
            # before finalizing (Heartbeat.stop); a list, not a generator: every agent's, even after a False
            stopped = all([agent.heartbeat.stop() for agent in agents])
    if not stopped:  # its store call still waits on a node that does not answer: leave without finalizing
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_agent(torchrun, args, agents: list, log: Path, exit_dir: str, say) -> int:
    """torchrun's ``run`` under our agent; the exit code (module docstring)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException  # noqa: PLC0415
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: PLC0415
    from torch.distributed.elastic.rendezvous.api import RendezvousError  # noqa: PLC0415

    try:
        torchrun.run(args)
    except ChildFailedError as exc:
        with log.open("a") as f:
            f.write(exc.format_msg() + "\n")
        decision = agents[0].decision if agents else None
        if decision is None or decision.exit_code != 2:
            say(f"stopped; tracebacks beside the exit records in {exit_dir}, torchrun's log in {log}")
        return decision.exit_code if decision is not None else 1
    except RendezvousError as exc:  # e.g. the store's host died between two of the agent's checks
        with log.open("a") as f:
            f.write(f"{type(exc).__name__}: {exc}\n")
        say(f"lost the rendezvous ({type(exc).__name__}: {exc}); the node hosting it is gone or unreachable; "
            f"torchrun's log in {log}")
        return 1
    except SignalException as exc:
        say(f"stopped by {signal.Signals(exc.sigval).name}: the ranks were asked to save and exit")
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
