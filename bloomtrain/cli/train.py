"""`bloomtrain train --config configs/train/NAME.yaml [--section.field VALUE ...] [key=value ...]`.

Run it under torchrun or the DeepSpeed launcher (one process per device); without a launcher it runs as a
single process. The ``TrainConfig`` comes from the YAML, then the flags generated from the model
(``--optim.lr 1e-4``, ``--schedule.train-iters 50``), then ``key.sub=value`` overrides (values parsed as
YAML); ``bloomtrain.train.run`` does the rest.
"""

from __future__ import annotations

import os

from bloomdata.cli.options import ConfigParser
from bloomtrain.config import TrainConfig


def parser() -> ConfigParser[TrainConfig]:
    return ConfigParser(TrainConfig, "bloomtrain train", __doc__.split("\n\n")[0], config_required=True,
                        overrides=True, nested=True)


def main(argv: list[str]) -> int:
    cfg, _ = parser().parse(argv)
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
