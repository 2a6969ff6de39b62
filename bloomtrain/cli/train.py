"""`bloomtrain train --config configs/train/NAME.yaml [--section.field VALUE ...] [key=value ...]`.

Run it under torchrun or the DeepSpeed launcher (one process per device); without a launcher it runs as a
single process. The ``TrainConfig`` comes from the YAML, then the flags generated from the model
(``--optim.lr 1e-4``, ``--schedule.train-iters 50``), then ``key.sub=value`` overrides (values parsed as
YAML); ``bloomtrain.train.run`` does the rest.

Restarts: under ``torchrun --max-restarts N`` a worker group whose rank died is started again, and every
start resumes from the checkpoint ``latest`` names. A restarted group's rank 0 says so first, in one line
that the flows parse (flows.launch): ``bloomtrain: torchrun restart K of N ...; resuming from TAG``.
Launch torchrun with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (the flows and ``bloomtrain slurm`` do): with
the rendezvous store shared between agent and workers, a restarted group can read the failed group's
addresses and fail to connect (pytorch/pytorch#135712); rank 0 warns when it is not set.
"""

from __future__ import annotations

import os

from bloomdata.cli.options import ConfigParser
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.config import TrainConfig


def parser() -> ConfigParser[TrainConfig]:
    return ConfigParser(TrainConfig, "bloomtrain train", __doc__.split("\n\n")[0], config_required=True,
                        overrides=True, nested=True)


def announce_restart(cfg: TrainConfig) -> None:
    """Under torchrun, on global rank 0: which restart this worker group is and where it resumes, and a
    warning when a restart could not reconnect (the shared rendezvous store)."""
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ or os.environ.get("RANK", "0") != "0":
        return
    restart, total = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["TORCHELASTIC_MAX_RESTARTS"])
    if restart == 0:
        if total > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            print("bloomtrain: warning: torchrun shares its rendezvous store with the workers, so a restarted "
                  "worker group may read the failed group's addresses and fail to connect (pytorch/pytorch#135712);"
                  " launch torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", flush=True)
        return
    tag = read_latest(cfg.checkpoint.dir) if cfg.checkpoint.dir and cfg.checkpoint.load else None
    where = f"resuming from {tag}" if tag else "no checkpoint yet: starting over"
    last = " (the last one: torchrun stops the run if this worker group fails too)" if restart == total else ""
    print(f"bloomtrain: torchrun restart {restart} of {total}{last} after a rank of the previous worker group "
          f"failed; {where}", flush=True)


def main(argv: list[str]) -> int:
    cfg, _ = parser().parse(argv)
    announce_restart(cfg)
    import torch  # noqa: PLC0415 - `bloomtrain train --help` stays fast
    import torch.distributed as dist  # noqa: PLC0415

    from bloomtrain.train import run  # noqa: PLC0415

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    result = run(cfg)
    if dist.get_rank() == 0:
        pos = result.position
        print(f"bloomtrain: done at iteration {pos.iteration} ({pos.consumed_samples} samples, "
              f"{pos.skipped_iters} skipped); stopped by {result.stopped_by or 'the training length'}; "
              f"last checkpoint {result.last_saved}", flush=True)
    dist.destroy_process_group()
    return 0
