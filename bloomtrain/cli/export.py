"""`bloomtrain export CHECKPOINT OUT_DIR [--tag T] [--tokenizer DIR] [--dtype D]`: a checkpoint of any TP x PP
layout -> a transformers BloomForCausalLM directory (``bloomtrain.export.export``; flags from ``ExportConfig``)."""

from __future__ import annotations

from pathlib import Path

from bloomdata.cli.options import ConfigParser
from bloomtrain.cli import torch_dtype
from bloomtrain.config import ExportConfig


def parser() -> ConfigParser[ExportConfig]:
    return ConfigParser(ExportConfig, "bloomtrain export", __doc__.split("\n\n")[0], config_file=False)


def run_export(config: ExportConfig) -> Path:
    from bloomtrain.export import export  # noqa: PLC0415

    return export(Path(config.checkpoint), Path(config.out_dir), tag=config.tag,
                  tokenizer_dir=Path(config.tokenizer) if config.tokenizer else None, dtype=torch_dtype(config.dtype))


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    out = run_export(config)
    has_tok = (out / "tokenizer.json").is_file()
    print(f"wrote {out} (config.json, model.safetensors{', tokenizer' if has_tok else '; no tokenizer files found'})")
    return 0
