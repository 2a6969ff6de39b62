"""`bloomdata blend`: per-language blend weights, for a token budget or from a mixture, and the blend files.

    bloomdata blend --dataset en=data/en --dataset fr=data/fr --budget 1e6 --alpha 0.3 --out blend-enfr/
    bloomdata blend --datasets-dir data/ --budget 1e6 --floor 0.002 --cap 0.9 --override en=0.2 --out blend-capped/
    bloomdata blend --mixture configs/data/bloom-tr11-mixture.yaml --datasets-dir data/ --seq-length 2048 \\
        --seed 42 --out data/tr11
    bloomdata blend --datasets-dir data/ --budget 1e6 --eval eval/eval.json --out blend-eval/
    bloomdata blend --datasets-dir data/ --budget 1e9 --eval before/eval.json --eval after/eval.json \\
        --out blend/   # needs-data

A thin command line over ``bloomdata.blend`` (flags generated from ``BlendEvalConfig``: ``BlendConfig`` and
the evaluation reports to show): ``tune_blend`` counts each prefix's tokens (the train range only, when a
split or range is given) and weighs them, by ``tokens ** alpha`` or, with ``--mixture``, by the mixture's
ratios over the groups the datasets cover (a dataset matches the group of its name: data/en.bin/.idx is
group en; see ``bloomdata.blend.mixture``).
``write_blend`` writes OUT/blend.md and OUT/blend.json (table: language, tokens, weight, tokens drawn,
effective epochs; for a mixture, its missing groups), OUT/blend.png (weights and epochs per language) and
OUT/blend.yaml (``BlendSpec``, read by the trainer and the flows), and, when the blend has a validation
split, OUT/valid_sets.yaml (``NAME: PREFIX`` per dataset: the trainer's ``data.valid_sets``, per-language
validation as tr11's). Prints the table, and warns on stderr about languages repeated more than
--max-epochs and about mixture groups with no dataset.

``--eval EVAL_JSON`` (``bloomdata.blend.evaluation``) adds each language's bits per byte from an eval.json
of ``bloomtrain evaluate`` or the flows' evaluate stage to the table, blend.json and blend.png (the dataset
named like the evaluated language; ``--eval-model NAME``, else the report's first model); given twice
(before, after), both and the change. blend.yaml does not change.
"""

from __future__ import annotations

import sys

from bloomdata.blend.evaluation import BlendEvalConfig, blend_evaluation
from bloomdata.blend.report import markdown_table, over_repeated, write_blend
from bloomdata.blend.tune import tune_blend
from bloomdata.cli.options import ConfigParser
from bloomdata.errors import BloomstackError


def parser() -> ConfigParser[BlendEvalConfig]:
    return ConfigParser(BlendEvalConfig, "bloomdata blend", "\n\n".join(__doc__.split("\n\n")[:2]))


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    if config.mixture and "alpha" in config.model_fields_set:  # set by a flag or the --config file, not defaulted
        raise BloomstackError("--alpha does not apply with --mixture: the mixture's ratios are the weights; drop "
                              "--alpha (or --mixture)")
    spec = tune_blend(config)
    evaluation = blend_evaluation(spec, config.eval_reports, config.eval_model) if config.eval_reports else None
    print(markdown_table(spec, evaluation))
    for d in over_repeated(spec, config.max_epochs):
        print(f"warning: {d.name} would be repeated {d.epochs:.2f} epochs (> --max-epochs {config.max_epochs:g}); "
              "lower its weight (--cap/--override), raise --alpha towards natural proportions, or add data",
              file=sys.stderr)
    if spec.missing:
        print(f"warning: no dataset for {len(spec.missing)} part(s) of {spec.mixture} ({', '.join(spec.missing)}); "
              "the others' ratios were renormalized. Add DATASETS_DIR/<group>.bin/.idx to include one",
              file=sys.stderr)
    paths = write_blend(spec, config.out_dir, config.max_epochs, evaluation)
    print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    return 0
