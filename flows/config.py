"""Typed flow parameters: one pydantic model per stage, composed into ``PipelineConfig``.

These models are the deployments' parameter schemas (Prefect derives the OpenAPI schema from the type
hints), so every field has a default that runs the embedded demo on a 2-core CPU box, and a description
the UI shows. Library configs are embedded as they are, not re-declared, so a field added to the trainer
is a flow parameter at once: ``TokenizerTrainConfig``, ``BuildConfig`` and ``TrainConfig`` directly, the
clean, blend and export stages as subclasses of ``CleanConfig``, ``BlendConfig`` and ``ExportConfig`` that
only change defaults (and add the export's samples). A partial dict from the UI or a deployment is completed from the
demo's defaults by the loader's own merge (``bloomdata.config_loader.complete``), as a YAML file is under a command.

Paths: each stage writes under its own ``out_dir``; ``PipelineConfig.out_dir`` places them all and the
pipeline wires each stage's outputs into the next stage's inputs (a user never types a blend path).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator

from bloomdata.blend.tune import BlendConfig
from bloomdata.build import BuildConfig
from bloomdata.clean import CleanConfig
from bloomdata.config_loader import complete
from bloomdata.megatron.builder import SplitsConfig
from bloomdata.megatron.splits import Compat
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig
from bloomtrain.config import (
    CheckpointConfig,
    ExportConfig,
    LoggingConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    TrainConfig,
)
from bloomtrain.evaluation.config import EvaluateConfig, ModelSpec
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.model.config import PRESETS
from flows.launch_config import LaunchConfig

DEMO_CORPUS = Path(__file__).resolve().parent / "demo_corpus"
DEMO_LANGS = ("en", "fr", "es", "zh", "ar", "pt", "hi", "vi", "sw", "yo")  # largest to smallest


def demo_sources() -> list[SourceConfig]:
    """The embedded demo corpus (flows/demo_corpus): one gzipped JSON-lines file per language."""
    return [SourceConfig(paths=[str(DEMO_CORPUS / f"{lang}.jsonl.gz")], lang=lang) for lang in DEMO_LANGS]


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


class CleanStageConfig(CleanConfig):
    """``CleanConfig`` (``bloomdata clean``) with the demo's inputs and output directory, no progress bars. In the
    pipeline, ``sources`` are the corpus and ``out_dir`` is ``PipelineConfig.out_dir/clean``; the tokenizer and
    the build then read the cleaned shards (``out_dir/data/<lang>``)."""

    sources: list[SourceConfig] = Field(default_factory=demo_sources, min_length=1,
                                        description="documents to clean (any input the build reads)")
    out_dir: str = Field("runs/clean", description="data/<lang>/*.jsonl.zst, clean_summary.json, removed.jsonl.zst, "
                                                   "clean.md, clean.png")
    progress: bool = Field(False, description="tqdm progress bars on stderr always (on an interactive terminal "
                                             "the flow draws them anyway: flows.console)")


class TrainStageConfig(BaseModel):
    train: TrainConfig = Field(default_factory=demo_train_config, description="the trainer's own config")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="how the job is started")
    overrides: list[str] = Field(default_factory=list, description="extra key=value trainer overrides")
    retries: int = Field(3, ge=0, description="relaunches of the job after a failed launch, each resuming from the "
                                              "last checkpoint (torchrun first restarts a failed worker group "
                                              "launch.max_restarts times inside a launch)")
    out_dir: str = Field("runs/train", description="run directory: train.yaml, checkpoints/, logs/, loss.png")

    @field_validator("train", mode="before")
    @classmethod
    def _complete_train(cls, value: object) -> object:
        return complete(demo_train_config(), value)


class BlendStageConfig(BlendConfig):
    """``BlendConfig`` with the demo's split and output directory. In the pipeline, ``datasets`` are the
    build's outputs, a ``token_budget``/``seq_length``/``seed`` left None are the training's, and ``out_dir`` is
    ``PipelineConfig.out_dir/blend``."""

    split: str | None = Field("90,10,0", description="train,valid,test split of every dataset (Megatron style)")
    out_dir: str = Field("runs/blend", description="blend.yaml, blend.json, blend.md, blend.png")


class MixtureSearchStageConfig(MixtureSearchConfig):
    """``MixtureSearchConfig`` (``bloomtrain mixture-search``) with the demo's paths and no progress bar (the flow
    logs each proxy). In the pipeline (``PipelineConfig.mixture_search``), the datasets, tokenizer and
    ``out_dir`` are the pipeline's, and the prior (alpha or mixture), floor, cap, max epochs, split and token
    budget are the blend stage's: the proposal replaces the blend's weights within the blend's own bounds."""

    datasets_dir: str | None = Field("runs/data", description="every PREFIX.idx in this directory, named after its "
                                                              "file (in the pipeline: the build's outputs)")
    tokenizer: str = Field("runs/tokenizer", description="the datasets' tokenizer (in the pipeline: its own)")
    out_dir: str = Field("runs/search", description="search.json, search.md, search.png, blend.yaml, proxies/")
    progress: bool = Field(False, description="a progress bar on stderr (the flow logs each proxy instead)")


class ExportStageConfig(ExportConfig):
    """``ExportConfig`` with the demo's paths, plus the greedy samples generated from the exported model."""

    checkpoint: str = Field("runs/train/checkpoints", description="checkpoint directory (holds `latest`)")
    out_dir: str = Field("runs/hf", description="the transformers BloomForCausalLM directory to write")
    tokenizer: str | None = Field("runs/tokenizer", description="directory with tokenizer.json (None: the "
                                                                "checkpoint directory)")
    prompts: list[str] = Field(default_factory=lambda: ["The city", "Le gouvernement", "El presidente"],
                               description="prompts to continue (greedy) with the exported model")
    max_new_tokens: int = Field(24, ge=1, description="tokens generated per prompt at most")
    seed: int = Field(0, description="torch seed before generating")


class ExportCheck(BaseModel):
    """Which samples the export stage scores the exported model on: the trainer's own validation samples (the
    blend's first ``samples`` of its validation split, in the trainer's order and index arithmetic), so the
    loss matches the trainer's last validation loss."""

    blend: str = Field(description="the blend YAML the run trained on")
    samples: int = Field(16, ge=1, description="samples scored (the trainer's: logging.eval_iters x "
                                               "schedule.global_batch_size)")
    compat: Compat = Field(Compat.CORE, description="index arithmetic, as the trainer's data.compat")
    seed: int = Field(description="the trainer's data.seed (the sample order of a blend YAML without its own seed)")
    seq_length: int = Field(ge=1, description="the trainer's model.seq_length")
    cache_dir: str | None = Field(None, description="the trainer's data.cache_dir (sample indices)")

    def splits(self) -> SplitsConfig:
        """What the trainer built its data from (its validation split is what the export is scored on)."""
        return SplitsConfig(seq_length=self.seq_length, seed=self.seed, blend=self.blend, compat=self.compat,
                            cache_dir=self.cache_dir)


class EvaluateStageConfig(EvaluateConfig):
    """``EvaluateConfig`` (``bloomtrain evaluate``) with the demo's paths, scoring by default each blend dataset's
    validation documents (``bloomtrain.evaluation.heldout``) instead of ``sources``, plus reference models. In the
    pipeline, ``models`` is the exported model (named ``exported``), ``blend``/``tokenizer``/``compat``/``out_dir`` are
    the pipeline's, and a ``context`` left None is the training's sequence length."""

    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec(path="runs/hf", name="exported")],
                                    min_length=1, description="transformers model directories to evaluate")
    reference_models: list[str] = Field(default_factory=list, description="[NAME=]DIR of reference transformers "
                                        "causal LMs, scored after `models` on the same text")
    sources: list[SourceConfig] = Field(default_factory=list, description="held-out documents to score instead "
                                        "of the blend's validation documents (any input the build reads)")
    blend: str = Field("runs/blend/blend.yaml", description="blend YAML whose datasets' validation documents are "
                                                            "scored when `sources` is empty")
    tokenizer: str = Field("runs/tokenizer", description="the datasets' tokenizer, to decode their documents")
    compat: Compat = Field(Compat.CORE, description="split arithmetic, as the trainer's data.compat")
    max_docs_per_lang: int | None = Field(1000, ge=1, description="score the first N held-out documents of each "
                                                                  "language, in document order (None: all)")
    context: int | None = Field(None, ge=1, description="tokens per forward pass at most (None: 2048; in the "  # type: ignore[assignment]
                                                        "pipeline, the training's seq_length)")
    out_dir: str = Field("runs/eval", description="eval.json, eval.md, eval.png and heldout/<lang>.jsonl")
    progress: bool = Field(False, description="tqdm progress bar on stderr always (on an interactive terminal "
                                             "the flow draws it anyway: flows.console)")

    @model_validator(mode="after")
    def _check(self) -> EvaluateStageConfig:  # replaces EvaluateConfig's: context may be None here
        # EvaluateConfig's own checks (stride <= context, distinct model names) on what this stage scores with;
        # which documents does not matter to them (the blend stands in for its validation documents)
        self.scoring(self.sources or [SourceConfig(paths=[self.blend])])
        return self

    def scoring(self, sources: list[SourceConfig]) -> EvaluateConfig:
        """The ``EvaluateConfig`` that scores ``sources`` with ``models`` then ``reference_models``."""
        fields = self.model_dump(include=set(EvaluateConfig.model_fields) - {"models", "sources", "context"})
        context = self.context or EvaluateConfig.model_fields["context"].default
        models = [*self.models, *(ModelSpec.model_validate(m) for m in self.reference_models)]
        return EvaluateConfig(**fields, models=models, sources=sources, context=context)


def demo_tokenizer_config() -> TokenizerTrainConfig:
    return TokenizerTrainConfig(sources=demo_sources(), out_dir="runs/tokenizer", vocab_size=1000,
                                byte_budget=4_000_000, min_frequency=2, show_progress=False)


def demo_build_config() -> BuildConfig:
    return BuildConfig(sources=demo_sources(), tokenizer="runs/tokenizer", out_dir="runs/data",
                       append_eod=True, workers=2, progress=False)


class PipelineConfig(BaseModel):
    """Corpus -> clean -> tokenizer -> per-language datasets -> blend -> training -> HF export -> evaluation, in one
    typed object.

    The pipeline wires the stages: ``corpus`` is cleaned, and the cleaned shards become the tokenizer's and the
    build's ``sources`` (``corpus`` itself when ``clean`` is null); each
    stage's ``out_dir`` becomes ``out_dir/<stage>``; the build reads the new tokenizer; the trainer reads the
    blend, with the model's vocabulary set to the tokenizer's; the export reads the run's checkpoints and the
    new tokenizer; the evaluation scores the export on the blend's validation documents. Those fields of the
    stage configs are therefore ignored here (they matter when a stage flow runs on its own).
    """

    name: str = Field("bloomstack-demo", description="the run's name: the exported model's name on its card "
                                                     "unless export.name sets one")
    out_dir: str = Field("runs/demo", description="root of every stage's outputs")
    corpus: list[SourceConfig] = Field(default_factory=demo_sources, description="input documents")
    clean: CleanStageConfig | None = Field(default_factory=CleanStageConfig,
                                           description="filters, deduplication and PII redaction before the "
                                                       "tokenizer; null: the tokenizer and the build read the corpus "
                                                       "as it is")
    tokenizer: TokenizerTrainConfig = Field(default_factory=demo_tokenizer_config)
    fertility_docs_per_lang: int = Field(200, ge=1, description="documents per language in the fertility table")
    dataset: BuildConfig = Field(default_factory=demo_build_config)
    blend: BlendStageConfig = Field(default_factory=BlendStageConfig)
    mixture_search: MixtureSearchStageConfig | None = Field(
        None, description="a mixture search (flows.mixture_search) before the blend, whose proposal becomes the "
                          "blend's weights ({} for its defaults); null (the demo's default): alpha or the mixture "
                          "file weigh the blend")
    train: TrainStageConfig = Field(default_factory=TrainStageConfig)
    export: ExportStageConfig = Field(default_factory=ExportStageConfig)
    evaluate: EvaluateStageConfig = Field(default_factory=EvaluateStageConfig)

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _complete_tokenizer(cls, value: object) -> object:
        return complete(demo_tokenizer_config(), value)

    @field_validator("dataset", mode="before")
    @classmethod
    def _complete_dataset(cls, value: object) -> object:
        return complete(demo_build_config(), value)
