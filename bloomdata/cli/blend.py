"""`bloomdata blend`: tune per-language blend weights for a token budget and write the blend files.

    bloomdata blend --dataset en=data/en --dataset fr=data/fr ... --budget 350e9 --alpha 0.3 --out blend/
    bloomdata blend --datasets-dir data/ --budget 1e9 --floor 0.002 --cap 0.25 --override en=0.2 --out blend/

A thin command line over ``bloomdata.mixture`` (flags generated from ``BlendConfig``): ``tune_blend`` counts
each prefix's tokens (the train range only, when a split or range is given) and weighs them; ``write_blend``
writes OUT/blend.md and OUT/blend.json (table: language, tokens, weight, tokens drawn, effective epochs),
OUT/blend.png (weights and epochs per language) and OUT/blend.yaml (``BlendSpec``, read by the trainer and
the flows). Prints the table, and warns on stderr about languages repeated more than --max-epochs.
"""

from __future__ import annotations

import sys

from bloomdata.cli.options import ConfigParser
from bloomdata.mixture.report import markdown_table, over_repeated, write_blend
from bloomdata.mixture.tune import BlendConfig, tune_blend


def parser() -> ConfigParser[BlendConfig]:
    return ConfigParser(BlendConfig, "bloomdata blend", __doc__.split("\n\n")[0])


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    spec = tune_blend(config)
    print(markdown_table(spec))
    for d in over_repeated(spec, config.max_epochs):
        print(f"warning: {d.name} would be repeated {d.epochs:.2f} epochs (> --max-epochs {config.max_epochs:g}); "
              "lower its weight (--cap/--override), raise --alpha towards natural proportions, or add data",
              file=sys.stderr)
    write_blend(spec, config.out_dir, config.max_epochs)
    print(f"wrote {config.out_dir}/blend.md, blend.json, blend.png, blend.yaml", file=sys.stderr)
    return 0
