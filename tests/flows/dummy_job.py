"""A stand-in for a training job: prints lines, forks grandchildren that would outlive it, exits or hangs.

Run directly (``python tests/flows/dummy_job.py --pidfile F ...``) or as the trainer module under torchrun
(``-m dummy_job --config train.yaml``, with tests/flows on PYTHONPATH); options then come from DUMMY_JOB_*
environment variables, since the launcher owns argv. The pids of this process, its parent when launched
(the torchrun agent) and its grandchildren go to the pidfile (``.RANK`` appended under torchrun) once they
all run, so a test can check that none survives. With ``--config``, rank 0 writes a metrics.jsonl and a
checkpoint directory where the YAML says, like the trainer, with ``latest`` naming global_step<LINES>.
``DUMMY_JOB_FAIL_STARTS=N`` (with ``DUMMY_JOB_COUNTER=FILE``, where starts are counted across torchrun's
restarts and the flow's relaunches) makes rank 1 exit with code 3 on its first N starts, once rank 0 wrote
its checkpoint. ``DUMMY_JOB_HANG_STARTS=N`` does the same as a hang: both ranks keep exit records
(bloomtrain.exit_record, in the launcher's BLOOMTRAIN_EXIT_DIR), rank 0's says finished, and rank 1 records what
the trainer's hang watchdog records (a ``hang`` behind rank 0's iteration, with a stack file), then exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _env(name: str, default: str) -> str:
    return os.environ.get(f"DUMMY_JOB_{name}", default)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pidfile", default=_env("PIDFILE", ""))
    ap.add_argument("--grandchildren", type=int, default=int(_env("GRANDCHILDREN", "0")))
    ap.add_argument("--lines", type=int, default=int(_env("LINES", "3")))
    ap.add_argument("--exit-code", type=int, default=int(_env("EXIT_CODE", "0")))
    ap.add_argument("--hang", action="store_true", default=_env("HANG", "") == "1", help="sleep until killed")
    ap.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (needs the SIGKILL escalation)")
    ap.add_argument("--config", default=None, help="trainer YAML: write metrics and a checkpoint dir there")
    args, _overrides = ap.parse_known_args()
    rank = os.environ.get("RANK")
    hang_starts = int(_env("HANG_STARTS", "0"))
    fail_starts = int(_env("FAIL_STARTS", "0")) or hang_starts
    if fail_starts and rank == "1":
        counter = Path(_env("COUNTER", ""))
        starts = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(starts))
        if starts <= fail_starts:
            args.exit_code = 3
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Grandchildren ignore SIGTERM too when asked, and inherit our stdout (so they hold the pipe open).
    pre = "trap '' TERM; " if args.ignore_term else ""
    kids = [subprocess.Popen(["bash", "-c", f"{pre}sleep 300 & wait"]) for _ in range(args.grandchildren)]
    for i in range(args.lines):
        print(f"step {i} loss {10.0 / (i + 1):.3f}", flush=True)
    if args.config and rank in (None, "0"):
        import yaml  # noqa: PLC0415

        cfg = yaml.safe_load(Path(args.config).read_text())
        Path(cfg["checkpoint"]["dir"]).mkdir(parents=True, exist_ok=True)
        (Path(cfg["checkpoint"]["dir"]) / "latest").write_text(f"global_step{args.lines}")
        logs = Path(cfg["logging"]["dir"])
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "metrics.jsonl", "a") as f:
            for i in range(1, args.lines + 1):
                f.write(json.dumps({"iteration": i, "loss": 10.0 / i, "tokens_per_s": 100.0 * i}) + "\n")
            f.write(json.dumps({"iteration": args.lines, "valid_loss": 1.5, "valid_ppl": 4.48}) + "\n")
    time.sleep(0.3)  # let bash start its sleep so the pid list below is complete
    pids = [os.getpid()] + ([os.getppid()] if rank is not None else []) + [k.pid for k in kids]
    for k in kids:
        out = subprocess.run(["pgrep", "-P", str(k.pid)], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    if args.pidfile:
        target = args.pidfile + (f".{rank}" if rank is not None else "")
        Path(target + ".tmp").write_text("\n".join(map(str, pids)) + "\n")
        os.replace(target + ".tmp", target)
    if args.hang:
        while True:
            time.sleep(1)
    if args.exit_code and fail_starts and args.config:
        latest = Path(yaml_dir(args.config)) / "latest"
        deadline = time.monotonic() + 30
        while not latest.exists() and time.monotonic() < deadline:  # fail after rank 0 saved, as in a real run
            time.sleep(0.05)
    if hang_starts and args.config:
        return _record(args, rank)
    if args.exit_code:
        print(f"RuntimeError: rank {rank or 0} diverged (exit {args.exit_code})", file=sys.stderr, flush=True)
    return args.exit_code


def _record(args: argparse.Namespace, rank: str | None) -> int:
    """Rank 0: a finished record at iteration LINES; a failing rank 1: the hang watchdog's record one behind."""
    import traceback  # noqa: PLC0415

    from bloomtrain.exit_record import ExitKind, Recorder  # noqa: PLC0415

    recorder = Recorder.from_env()
    recorder.open(yaml_dir(args.config), None)
    if not args.exit_code:
        recorder.progress(args.lines, f"global_step{args.lines}")
        recorder.end(ExitKind.FINISHED, f"the schedule ended at iteration {args.lines}")
        return 0
    recorder.progress(args.lines - 1, None)
    said = f"no finished iteration for 9.0 s after iteration {args.lines - 1} (stability.hang_timeout_s=auto: 8.5 s)"
    recorder.hung(said, f"dummy_job: rank {rank}: {said}\n" + "".join(traceback.format_stack()))
    return 1


def yaml_dir(config: str) -> str:
    """The checkpoint directory a trainer YAML names."""
    import yaml  # noqa: PLC0415

    return yaml.safe_load(Path(config).read_text())["checkpoint"]["dir"]


if __name__ == "__main__":
    sys.exit(main())
