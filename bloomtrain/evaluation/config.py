"""``EvaluateConfig``: what ``bloomtrain evaluate`` (and the flows' evaluate stage) scores, with what, and where
the report goes. One pydantic model; the command line is generated from its fields (``bloomdata.cli.options``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bloomdata.config_loader import cli_option
from bloomdata.errors import FieldValueError
from bloomdata.readers import SourceConfig, sources_field
from bloomdata.tokenizer.encoder import ENCODER_HELP, EncoderKind
from bloomtrain.config import Dtype

_NAMED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(.+)$")


class ModelSpec(BaseModel):
    """A transformers causal-LM directory and the name it gets in the report.

    Also given as one string, ``DIR`` or ``NAME=DIR`` (``--model``); NAME defaults to the directory's base name.
    """

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="transformers model directory (config.json, weights, tokenizer files)",
                      json_schema_extra=cli_option(skip=True))
    name: str | None = Field(default=None, description="name in the report (default: the directory's base name)",
                             json_schema_extra=cli_option(skip=True))

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        match = _NAMED.match(value)
        if match and not os.path.exists(value):  # a path that exists as written is never split
            return {"name": match.group(1), "path": match.group(2)}
        return {"path": value}

    @property
    def label(self) -> str:
        return self.name or os.path.basename(os.path.normpath(self.path)) or self.path


class EvaluateConfig(BaseModel):
    """Bits per byte per language of one or more causal LMs on the documents of any input the build reads,
    and optionally downstream tasks through lm-evaluation-harness."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelSpec] = Field(
        min_length=1, json_schema_extra=cli_option("--model", metavar="[NAME=]DIR"),
        description="a transformers causal-LM directory (ours from `bloomtrain export`, or a reference model); "
                    "NAME= names it in the report (repeatable)")
    sources: list[SourceConfig] = sources_field("--data", "documents to score")
    out_dir: str = Field(description="writes DIR/eval.json, DIR/eval.md and DIR/eval.png",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    max_docs_per_lang: int | None = Field(default=None, ge=1, json_schema_extra=cli_option(metavar="N"),
                                          description="score the first N documents of each language (plan order)")
    context: int = Field(default=2048, ge=1, description="tokens per forward pass at most (the window)")
    stride: int | None = Field(default=None, ge=1, json_schema_extra=cli_option(metavar="S"),
                               description="tokens the window advances over a longer document (default: context/2, "
                                           "so every token sees at least context/2 tokens before it)")
    batch_size: int = Field(default=8, ge=1, description="windows per forward pass")
    encoder: EncoderKind = Field(default="auto", description=ENCODER_HELP)
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="auto: cuda when available")
    dtype: Dtype = Field(default="float32", description="dtype the models run in")
    tasks: list[str] = Field(default_factory=list, json_schema_extra=cli_option(metavar="A,B,C"),
                             description="lm-evaluation-harness tasks to run on every model (xnli,xstorycloze,"
                                         "xwinograd,...; needs the `eval` extra; their data must be available offline)")
    task_paths: list[str] = Field(default_factory=list, json_schema_extra=cli_option("--task-path", metavar="DIR"),
                                  description="directory of extra lm-eval task YAMLs (repeatable)")
    task_limit: int | None = Field(default=None, ge=1, json_schema_extra=cli_option(metavar="N"),
                                   description="evaluate the first N examples of each task only")
    progress: bool = Field(default=True, description="tqdm progress bar on stderr")

    @field_validator("tasks", mode="before")
    @classmethod
    def _split_tasks(cls, value: Any) -> Any:
        """``--tasks a,b --tasks c`` and a YAML list both become ["a", "b", "c"]."""
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        return [part.strip() for item in items for part in str(item).split(",") if part.strip()]

    @model_validator(mode="after")
    def _check(self) -> EvaluateConfig:
        if self.stride is not None and self.stride > self.context:
            raise FieldValueError(f"stride {self.stride} is larger than the context {self.context}: tokens "
                                  "between windows would never be scored; use a stride <= context", "stride", "context")
        labels = [m.label for m in self.models]
        duplicates = sorted({n for n in labels if labels.count(n) > 1})
        if duplicates:
            raise FieldValueError(f"two models are named {duplicates[0]!r}; name them in models as NAME=DIR",
                                  "models")
        return self

    @property
    def window_stride(self) -> int:
        return self.stride or max(1, self.context // 2)
