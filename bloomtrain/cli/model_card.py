"""`bloomtrain model-card CKPT_OR_HF_DIR [--out README.md] [--evaluation eval.json] [--license L] ...`: (re)build a
model card from the records alone: an export's provenance.json, or a checkpoint's training record, and the records
they name (``bloomtrain.card``; flags from ``ModelCardConfig``). Card flags given here replace the stored ones;
for an export they are kept in its provenance.json, so a later rebuild (e.g. after another evaluation) keeps them."""

from __future__ import annotations

from pathlib import Path

from bloomdata.cli.options import ConfigParser
from bloomdata.errors import BloomstackError
from bloomtrain.config import ModelCardConfig


def parser() -> ConfigParser[ModelCardConfig]:
    return ConfigParser(ModelCardConfig, "bloomtrain model-card", __doc__.split("\n\n")[0], config_file=False)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    from bloomtrain.card import load_records, write_model_card  # noqa: PLC0415 - torch only when building
    from bloomtrain.export import CARD_FILE  # noqa: PLC0415
    from bloomtrain.provenance import load_provenance, write_provenance  # noqa: PLC0415

    model_dir = Path(config.path)
    provenance = load_provenance(model_dir, config.tag, config)
    if config.out is None and provenance.export is None:
        raise BloomstackError(f"{model_dir} is a checkpoint: give --out PATH for its card (an export's card goes "
                              f"into the export, as {CARD_FILE})")
    out = Path(config.out) if config.out else model_dir / CARD_FILE
    records = load_records(provenance, model_dir)
    if provenance.export is not None:
        write_provenance(model_dir, provenance)  # the card settings given here, for the next rebuild
    write_model_card(records, model_dir, out)
    print(f"wrote {out}")
    return 0
