"""`bloomtrain model-card CKPT_OR_HF_DIR [--out README.md] [--evaluation eval.json] [--license L] ...`: (re)build a
model card from the records alone: an export's provenance.json, or a checkpoint's training record, and the records
they name (``bloomtrain.card``; flags from ``ModelCardConfig``). Card flags given here replace the stored ones;
for an export they are kept in its provenance.json, so a later rebuild (e.g. after another evaluation) keeps them."""

from __future__ import annotations

from pathlib import Path

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomtrain.config import ModelCardConfig


def parser() -> ConfigParser[ModelCardConfig]:
    return ConfigParser(ModelCardConfig, "bloomtrain model-card", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    from bloomtrain.card import rebuild_model_card  # noqa: PLC0415 - torch only when building

    out = rebuild_model_card(Path(config.path), config, tag=config.tag, out=Path(config.out) if config.out else None)
    print(f"wrote {out}")
    return 0
