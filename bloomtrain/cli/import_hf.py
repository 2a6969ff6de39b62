"""`bloomtrain import HF_DIR --out CKPT --tp N [--pp M]`: a transformers BLOOM checkpoint -> our layout
(``bloomtrain.hf_import.import_hf``), ready for continued pretraining."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option
from bloomtrain.cli import torch_dtype
from bloomtrain.config import Dtype


class ImportConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hf_dir: str = Field(description="a transformers BloomForCausalLM directory",
                        json_schema_extra=cli_option(positional=True, metavar="HF_DIR"))
    out_dir: str = Field(description="checkpoint directory to write",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree of the written shards")
    pp: int = Field(default=1, ge=1, description="pipeline degree (recorded; layer files do not depend on it)")
    dtype: Dtype | None = Field(default=None, description="cast the weights (default: keep theirs)")
    tag: str = Field(default="global_step0", description="checkpoint tag to write")


def parser() -> ConfigParser[ImportConfig]:
    return ConfigParser(ImportConfig, "bloomtrain import", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    from bloomtrain.hf_import import import_hf  # noqa: PLC0415

    model = import_hf(Path(config.hf_dir), Path(config.out_dir), config.tp, config.pp, torch_dtype(config.dtype),
                      config.tag)
    print(f"wrote {config.out_dir}/{config.tag}: {model.num_layers} layers, hidden {model.hidden_size}, "
          f"TP={config.tp}, PP={config.pp}")
    return 0
