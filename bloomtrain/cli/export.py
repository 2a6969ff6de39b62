"""`bloomtrain export CHECKPOINT OUT_DIR [--tag T] [--tokenizer DIR] [--dtype D] [--license L] ...`: a checkpoint of
any TP x PP layout -> a transformers BloomForCausalLM directory with its model card, README.md, built from the run's
records (``bloomtrain.export.run_export``; flags from ``ExportConfig``)."""

from __future__ import annotations

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomtrain.config import ExportConfig


def parser() -> ConfigParser[ExportConfig]:
    return ConfigParser(ExportConfig, "bloomtrain export", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    from bloomtrain.export import run_export  # noqa: PLC0415 - torch is paid only when exporting

    out = run_export(config)
    has_tok = (out / "tokenizer.json").is_file()
    tokenizer = ", tokenizer" if has_tok else "; no tokenizer files found"
    print(f"wrote {out} (config.json, model.safetensors, README.md{tokenizer})")
    return 0
