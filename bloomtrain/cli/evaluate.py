"""`bloomtrain evaluate --model [NAME=]DIR ... --data [LANG=]PATH ... --out DIR`: bits per byte per language of
transformers causal LMs (ours, exported, or reference models) on any input the build reads, optionally with
lm-evaluation-harness tasks (``--tasks``); writes DIR/eval.json, eval.md and eval.png
(``bloomtrain.evaluation.run.run_evaluation``; flags from ``EvaluateConfig``).

Each document is scored as the document-start token (``</s>``, the EOD, for BLOOM) followed by its tokens:
every token is predicted once, a document longer than ``--context`` through a sliding window of stride
``--stride``. Bits per byte = summed NLL / (ln 2 x the text's UTF-8 bytes), comparable across tokenizers.
"""

from __future__ import annotations

import json

from bloomdata.cli.options import ConfigParser
from bloomtrain.evaluation.config import EvaluateConfig


def parser() -> ConfigParser[EvaluateConfig]:
    p = ConfigParser(EvaluateConfig, "bloomtrain evaluate", __doc__)
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout instead of the table")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    from bloomtrain.evaluation.report import markdown  # noqa: PLC0415
    from bloomtrain.evaluation.run import run_evaluation  # noqa: PLC0415 - transformers only when evaluating

    report = run_evaluation(config)
    if args.json:
        print(json.dumps({"out": config.out_dir, **report.summary()}, indent=1, ensure_ascii=False))
    else:
        print(markdown(report), end="")
    return 0
