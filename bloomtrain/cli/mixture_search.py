"""`bloomtrain mixture-search --datasets-dir DATA --tokenizer TOK --out DIR`: find blend weights by training
small proxy models on mixtures around a prior and fitting a regression (RegMix).

    bloomtrain mixture-search --datasets-dir data/ --tokenizer tok/ --out search/
    bloomtrain mixture-search --datasets-dir data/ --tokenizer tok/ --out search/ --prior-alpha 1.0 --proxies 8
    bloomtrain mixture-search --datasets-dir data/ --tokenizer tok/ --out search/ --budget 1e9 --max-epochs 4 \\
        --objective weighted --objective-weight sw=3 --objective-weight yo=3 --scheduler tcp://head:8786

Flags are generated from ``MixtureSearchConfig`` (``--config YAML`` holds the same model). Writes DIR/blend.yaml
(the best measured mixture among the prior, the validated proposal and the proxies: ``bloomtrain train ...
data.kind=blend data.blend=DIR/blend.yaml``), DIR/search.json, DIR/search.md and DIR/search.png, and keeps
every proxy in DIR/proxies/ (a rerun reuses the finished ones). The last line says what blend.yaml holds and
why, with the figures.
"""

from __future__ import annotations

import sys

from bloomdata.cli.options import ConfigParser
from bloomdata.errors import BloomstackError
from bloomtrain.mixture_search.config import MixtureSearchConfig


def parser() -> ConfigParser[MixtureSearchConfig]:
    return ConfigParser(MixtureSearchConfig, "bloomtrain mixture-search", "\n\n".join(__doc__.split("\n\n")[:2]))


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    if config.prior_mixture and "prior_alpha" in config.model_fields_set:
        raise BloomstackError("--prior-alpha does not apply with --prior-mixture: the mixture's ratios are the "
                              "prior; drop one of them")
    from bloomtrain.mixture_search.report import search_markdown  # noqa: PLC0415
    from bloomtrain.mixture_search.run import run_search  # noqa: PLC0415

    result = run_search(config)
    print(search_markdown(result))
    print(f"wrote {result.blend_yaml} and search.json, search.md, search.png in {result.out_dir}", file=sys.stderr)
    print(result.choice.reason, file=sys.stderr)
    return 0
