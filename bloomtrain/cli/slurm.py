"""`bloomtrain slurm --config YAML --nodes N [--exclude NODE ...] [key=value ...]`: write a tr11-style sbatch
script that requeues itself until the run is over (``bloomtrain.slurm.render``; flags from ``SlurmConfig``),
validated against the training config first."""

from __future__ import annotations

import sys
from pathlib import Path

from bloomdata import durable
from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomtrain.slurm import SlurmConfig, render


def parser() -> ConfigParser[SlurmConfig]:
    # --config is SlurmConfig's own field here (the training YAML), not a file of SlurmConfig
    return ConfigParser(SlurmConfig, "bloomtrain slurm", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    job, _ = parser().parse(argv)
    script = render(job)
    if job.out:
        durable.write_text(job.out, script)
        Path(job.out).chmod(0o755)
        print(f"wrote {job.out}: sbatch {job.out}", file=sys.stderr)
    else:
        sys.stdout.write(script)
    return 0
