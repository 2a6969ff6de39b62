"""`bloomtrain train --config configs/train/NAME.yaml [--section.field VALUE ...] [key=value ...]`.

Run it under torchrun or the DeepSpeed launcher (one process per device); without a launcher it runs as a
single process. The ``TrainConfig`` comes from the YAML, then the flags generated from the model
(``--optim.lr 1e-4``, ``--schedule.train-iters 50``), then ``key.sub=value`` overrides (values parsed as
YAML); ``bloomtrain.train.run`` does the rest. ``--dry-run`` prints the plan (``bloomtrain.plan``: the parallel
layout for ``WORLD_SIZE`` processes, parameters, memory per GPU, iterations and tokens) and exits.

Exit record: each rank writes how it ended (finished, time budget, signal, kill switch, config or input
error, full disk, damaged checkpoint, failure: bloomtrain.exit_record) into ``BLOOMTRAIN_EXIT_DIR`` (default
``<checkpoint.dir>/exits``); ``bloomtrain.recovery`` reads it to decide retry / requeue / stop. Under
``bloomtrain.launcher`` a failed rank prints nothing: its traceback goes to the record's file and the node's agent
reports the attempt in a few lines. A config or input error (every input path is checked first: bloomtrain.inputs), a
full disk and a damaged checkpoint (with ``checkpoint.on_corrupt=fail``) exit 2: a retry would meet them again. A rank
that finishes no iteration for ``stability.hang_timeout_s`` writes every thread's stack beside a ``hang`` record and
exits 1 (bloomtrain.callbacks.hang).

Launch plain torchrun with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (bloomtrain.launcher, the flows and
``bloomtrain slurm`` do): with the rendezvous store shared between agent and workers, a restarted group can
read the failed group's addresses and fail to connect (pytorch/pytorch#135712); rank 0 warns when it is not set.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from bloomdata.cli.options import ConfigParser, Sources
from bloomdata.disk import DiskFull, raising_disk_full
from bloomdata.dry_run import print_plan
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint.manifest import CheckpointDamaged
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.config import TrainConfig
from bloomtrain.exit_record import ExitKind, Recorder
from bloomtrain.inputs import check_inputs
from bloomtrain.launcher import die_with_agent


def parser() -> ConfigParser[TrainConfig]:
    p = ConfigParser(TrainConfig, "bloomtrain train", __doc__.split("\n\n")[0], nested=True,
                        sources=Sources(file_required=True, overrides=True, dry_run=DRY_RUN,
                                        override_example="optim.lr=1e-4 schedule.train_iters=100"))
    p.add_argument("--json", action="store_true", help="print the --dry-run plan as JSON instead of text")
    return p


DRY_RUN = ("the TP/PP/DP layout for WORLD_SIZE processes, micro-batches, parameters, memory per GPU with and "
           "without recomputation, iterations and tokens")


def dry_run(cfg: TrainConfig, as_json: bool) -> int:
    """Print the plan of ``cfg`` (bloomtrain.plan) after the input checks; no process group, nothing written."""
    import torch  # noqa: PLC0415 - `bloomtrain train --help` stays fast

    from bloomtrain.plan import plan_training  # noqa: PLC0415 - imports DeepSpeed

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    check_inputs(cfg)
    print_plan("bloomtrain train", plan_training(cfg), as_json)
    return 0


def warn_shared_store() -> None:
    """Under plain torchrun with restarts, on global rank 0: warn when a restart could not reconnect."""
    if os.environ.get("RANK", "0") != "0" or os.environ.get("TORCHELASTIC_RESTART_COUNT") != "0":
        return
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0 and \
            os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        print("bloomtrain: warning: torchrun shares its rendezvous store with the workers, so a restarted "
              "worker group may read the failed group's addresses and fail to connect (pytorch/pytorch#135712); "
              "launch torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", flush=True)


@contextlib.contextmanager
def recorded(recorder: Recorder) -> Iterator[None]:
    """Record how the process ends: a config or input error, a full disk or a damaged checkpoint (exit 2), an
    interrupt, or a failure. Under
    bloomtrain.launcher both exit quietly (the agent reports them; a traceback goes to the record's file);
    otherwise they print as usual."""
    try:
        with raising_disk_full("a write", then="run the same command again"):  # a full disk outside a save's writes
            yield
    except BloomstackError as exc:
        recorder.end(ending_of(exc), str(exc))
        if not recorder.quiet:
            raise
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        recorder.end(ExitKind.SIGNAL, "interrupted (SIGINT) before the trainer could save")
        raise
    except Exception as exc:
        recorder.fail(exc)
        if not recorder.quiet:
            raise
        raise SystemExit(1) from None


def ending_of(exc: BloomstackError) -> ExitKind:
    """The exit record's kind of a user-facing error: each one a retry would meet again (recovery's ``never``)."""
    if isinstance(exc, DiskFull):
        return ExitKind.DISK_FULL
    return ExitKind.CORRUPT_CHECKPOINT if isinstance(exc, CheckpointDamaged) else ExitKind.CONFIG_ERROR


def train(cfg: TrainConfig, recorder: Recorder) -> int:
    import torch  # noqa: PLC0415 - `bloomtrain train --help` stays fast
    import torch.distributed as dist  # noqa: PLC0415

    from bloomtrain.callbacks import ExitRecordCallback  # noqa: PLC0415
    from bloomtrain.callbacks.hang import hang_callbacks  # noqa: PLC0415
    from bloomtrain.train import run  # noqa: PLC0415

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    result = run(cfg, callbacks=[ExitRecordCallback(recorder), *hang_callbacks(cfg.stability, recorder)])
    if dist.get_rank() == 0:
        pos = result.position
        assert pos is not None  # set once the loop ran
        print(f"bloomtrain: done at iteration {pos.iteration} ({pos.consumed_samples} samples, "
              f"{pos.skipped_iters} skipped); stopped by {result.stopped_by or 'the training length'}; "
              f"last checkpoint {result.last_saved}", flush=True)
    dist.destroy_process_group()
    return 0


def main(argv: list[str]) -> int:
    recorder = Recorder.from_env()
    with recorded(recorder):
        die_with_agent()
        cfg, args = parser().parse(argv)
        if args.dry_run:
            return dry_run(cfg, args.json)
        ckpt = cfg.checkpoint.dir
        recorder.open(ckpt, read_latest(ckpt) if ckpt and cfg.checkpoint.load else None)
        check_inputs(cfg)
        warn_shared_store()
        return train(cfg, recorder)
