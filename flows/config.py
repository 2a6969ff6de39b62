"""Typed flow parameters: one pydantic model per stage, composed into ``PipelineConfig``.

These models are the deployments' parameter schemas (Prefect derives the OpenAPI schema from the type
hints), so every field has a default that runs the embedded demo on a 2-core CPU box, and a description
the UI shows. Library configs (``bloomtrain.config.TrainConfig`` ...) are embedded as they are, not
re-declared, so a field added to the trainer is a flow parameter at once.

Paths: each stage writes under its own ``out_dir``; ``PipelineConfig.out_dir`` places them all and the
pipeline wires each stage's outputs into the next stage's inputs (a user never types a blend path).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from bloomdata.build import BuildConfig
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig
from bloomtrain.config import (
    CheckpointConfig,
    LoggingConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    TrainConfig,
)
from bloomtrain.model.config import PRESETS
from flows.launch_config import LaunchConfig

DEMO_CORPUS = Path(__file__).resolve().parent / "demo_corpus"
DEMO_LANGS = ("en", "fr", "es", "zh", "ar", "pt", "hi", "vi", "sw", "yo")  # largest to smallest


def demo_sources() -> list[SourceConfig]:
    """The embedded demo corpus (flows/demo_corpus): one gzipped JSON-lines file per language."""
    return [SourceConfig(paths=[str(DEMO_CORPUS / f"{lang}.jsonl.gz")], lang=lang) for lang in DEMO_LANGS]


def merge_defaults(defaults: BaseModel, value: object) -> object:
    """A partial dict (from the UI, a CLI ``--param`` or a deployment's JSON) completed by ``defaults``,
    recursively, so ``{"schedule": {"train_iters": 50}}`` means "the defaults with 50 iterations"."""

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, val in over.items():
            # A preset ({"preset": "bloom-560m", ...}) stands for a whole section: never mix the demo's in.
            nested = isinstance(val, dict) and isinstance(base.get(key), dict) and "preset" not in val
            out[key] = merge(base[key], val) if nested else val
        return out

    return merge(defaults.model_dump(), value) if isinstance(value, dict) else value


def demo_train_config() -> TrainConfig:
    """A small BLOOM (4 layers, hidden 128) that trains in a few minutes on 2 CPU processes, tensor-parallel
    over both (tp=2): enough steps on the demo corpus for greedy samples to look like words."""
    return TrainConfig(
        model=PRESETS["tiny"](num_layers=4, hidden_size=128, num_heads=8, seq_length=64),
        parallel=ParallelConfig(tp=2, pp=1),
        optim=OptimConfig(precision="fp32", lr=3e-3, min_lr=3e-4, weight_decay=0.01),
        schedule=ScheduleConfig(micro_batch_size=8, global_batch_size=16, train_iters=600, warmup_samples=480,
                                decay_samples=600 * 16),
        checkpoint=CheckpointConfig(save_interval=200, keep_last=1),
        logging=LoggingConfig(log_interval=10, eval_interval=200, eval_iters=2, tensorboard=False),
    )


class TrainStageConfig(BaseModel):
    train: TrainConfig = Field(default_factory=demo_train_config, description="the trainer's own config")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="how the job is started")
    overrides: list[str] = Field(default_factory=list, description="extra key=value trainer overrides")
    retries: int = Field(1, ge=0, description="relaunches after a crash (each resumes from the last checkpoint)")
    out_dir: str = Field("runs/train", description="run directory: train.yaml, checkpoints/, logs/, loss.png")

    @field_validator("train", mode="before")
    @classmethod
    def _complete_train(cls, value: object) -> object:
        return merge_defaults(demo_train_config(), value)


class BlendStageConfig(BaseModel):
    alpha: float = Field(0.3, ge=0, description="p_lang ∝ tokens_lang ** alpha (1: natural, 0: uniform)")
    token_budget: int | None = Field(None, ge=1, description="tokens to draw; None: what the training consumes")
    floor: float | None = Field(None, description="minimum weight of every language")
    cap: float | None = Field(None, description="maximum weight of every language")
    overrides: dict[str, float] = Field(default_factory=dict, description="fixed weights, e.g. {'en': 0.2}")
    max_epochs: float = Field(4.0, description="warn when a language is repeated more often than this")
    split: str = Field("90,10,0", description="train,valid,test split of every dataset (Megatron style)")
    seq_length: int | None = Field(None, description="recorded in blend.yaml; None: the model's")
    seed: int | None = Field(None, description="recorded in blend.yaml; None: the training data seed")
    out_dir: str = Field("runs/blend", description="blend.yaml, blend.json, blend.md, blend.png")


class ExportStageConfig(BaseModel):
    out_dir: str = Field("runs/hf", description="the transformers BloomForCausalLM directory to write")
    tag: str | None = Field(None, description="checkpoint tag (None: the `latest` one)")
    prompts: list[str] = Field(default_factory=lambda: ["The city", "Le gouvernement", "El presidente"],
                               description="prompts to continue (greedy) with the exported model")
    max_new_tokens: int = Field(24, ge=1)
    seed: int = 0


def demo_tokenizer_config() -> TokenizerTrainConfig:
    return TokenizerTrainConfig(sources=demo_sources(), out_dir="runs/tokenizer", vocab_size=1000,
                                byte_budget=4_000_000, min_frequency=2, show_progress=False)


def demo_build_config() -> BuildConfig:
    return BuildConfig(sources=demo_sources(), tokenizer="runs/tokenizer", out_dir="runs/data",
                       append_eod=True, workers=2, progress=False)


class PipelineConfig(BaseModel):
    """Corpus -> tokenizer -> per-language datasets -> blend -> training -> HF export, in one typed object.

    The pipeline wires the stages: ``corpus`` becomes the tokenizer's and the build's ``sources``; each
    stage's ``out_dir`` becomes ``out_dir/<stage>``; the build reads the new tokenizer; the trainer reads the
    blend, with the model's vocabulary set to the tokenizer's. Those fields of the stage configs are
    therefore ignored here (they matter when a stage flow runs on its own).
    """

    out_dir: str = Field("runs/demo", description="root of every stage's outputs")
    corpus: list[SourceConfig] = Field(default_factory=demo_sources, description="input documents")
    tokenizer: TokenizerTrainConfig = Field(default_factory=demo_tokenizer_config)
    fertility_docs_per_lang: int = Field(200, ge=1, description="documents per language in the fertility table")
    dataset: BuildConfig = Field(default_factory=demo_build_config)
    blend: BlendStageConfig = Field(default_factory=BlendStageConfig)
    train: TrainStageConfig = Field(default_factory=TrainStageConfig)
    export: ExportStageConfig = Field(default_factory=ExportStageConfig)

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _complete_tokenizer(cls, value: object) -> object:
        return merge_defaults(demo_tokenizer_config(), value)

    @field_validator("dataset", mode="before")
    @classmethod
    def _complete_dataset(cls, value: object) -> object:
        return merge_defaults(demo_build_config(), value)
