"""`bloomtrain verify CKPT_DIR [--tag T]`: check a checkpoint folder offline against the digests its saves
recorded (``bloomtrain.checkpoint.verify``): one line per tag; exit 1 when any file is damaged or missing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option


class VerifyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checkpoint: str = Field(description="a checkpoint folder (checkpoint.dir), or one tag's directory in it",
                            json_schema_extra=cli_option(positional=True, metavar="CKPT_DIR"))
    tag: str | None = Field(default=None, description="check only this tag (default: every global_stepN)")


def parser() -> ConfigParser[VerifyConfig]:
    return ConfigParser(VerifyConfig, "bloomtrain verify", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    from pathlib import Path  # noqa: PLC0415

    from bloomtrain.checkpoint.verify import verify_checkpoints  # noqa: PLC0415

    config, _ = parser().parse(argv)
    reports = verify_checkpoints(Path(config.checkpoint), config.tag)
    for report in reports:
        print(report.line(), flush=True)
    damaged = [r.tag for r in reports if r.damaged]
    checked = [r for r in reports if r.verdict is not None and r.verdict.digests]
    print(f"bloomtrain verify: {config.checkpoint}: {len(checked) - len(damaged)} of {len(checked)} checkpoint(s) with "
          f"digests verify" + (f"; damaged: {', '.join(damaged)}" if damaged else ""), flush=True)
    return 1 if damaged else 0
