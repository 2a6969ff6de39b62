"""What each stage flow returns: a ``StageResult`` wrapping the typed result of the stage's work.

Every stage flow returns ``StageResult[R]`` (``flows.stages``: stage name, key, skipped, out_dir, result), and
the pipeline reads fields, never string keys. ``R`` is the library's own result model where the work is one
library call (``CleanSummary``, ``BuildSummary``), or a small model here that holds the library results the
flow gathered (the tokenizer's report and fertility table; the training run's ``TrainingSummary``, paths and
restarts; ...). So bloomtrain code (a model card, a mixture search) reads the library models without
importing flows.

The ``*Result`` aliases below are the parametrized classes, created here at module level so that pickling
finds them (Prefect may pickle a flow's return value); a new stage declares its alias here too.
"""

from __future__ import annotations

from pydantic import BaseModel

from bloomdata.blend.spec import BlendSpec
from bloomdata.build.summary import BuildSummary
from bloomdata.clean.summary import CleanSummary
from bloomdata.tokenizer.bpe import TokenizerReport
from bloomdata.tokenizer.fertility import FertilityRow
from bloomtrain.evaluation.exported import BlendLoss
from bloomtrain.evaluation.heldout import HeldOutFile
from bloomtrain.evaluation.report import ModelResult
from bloomtrain.metrics import TrainingSummary
from bloomtrain.mixture_search.result import SearchResult
from flows.restarts import Restart
from flows.stages import StageResult


class TrainedTokenizer(BaseModel):
    """The tokenizer stage: the tokenizer directory, its training report and its fertility per language (also as
    the JSON a model card reads)."""

    tokenizer_dir: str  # tokenizer.json and the transformers files
    report: TokenizerReport
    fertility: list[FertilityRow]
    fertility_json: str  # tokenizer_dir/fertility.json (bloomdata.tokenizer.fertility.write_fertility)


class TunedBlend(BaseModel):
    """The blend stage: the YAML the trainer reads, and its content."""

    blend_yaml: str
    spec: BlendSpec


class RunPaths(BaseModel):
    """Where a training run's files are."""

    config: str  # the train.yaml the trainer read
    checkpoints: str  # the checkpoint root (holds `latest`)
    metrics: str  # logs/metrics.jsonl


class TrainedRun(BaseModel):
    """The training stage: the run's numbers (None when the job logged elsewhere, e.g. an sbatch script),
    where its files are, its loss curve and every restart."""

    summary: TrainingSummary | None
    paths: RunPaths
    loss_png: str | None = None
    restarts: list[Restart] = []


class ExportedModel(BaseModel):
    """The export stage: the transformers directory, greedy samples from it, and its loss on the training's
    validation samples (None when the pipeline does not evaluate)."""

    hf_dir: str
    samples: list[str]
    evaluation: BlendLoss | None = None


class Evaluation(BaseModel):
    """The evaluate stage: eval.json's per-model scores, and the held-out documents scored (none when the stage
    was given its own sources)."""

    eval_json: str
    heldout: list[HeldOutFile]
    models: dict[str, ModelResult]


CleanResult = StageResult[CleanSummary]
TokenizerResult = StageResult[TrainedTokenizer]
DatasetResult = StageResult[BuildSummary]
BlendResult = StageResult[TunedBlend]
MixtureSearchResult = StageResult[SearchResult]
TrainResult = StageResult[TrainedRun]
ExportResult = StageResult[ExportedModel]
EvaluateResult = StageResult[Evaluation]


class PipelineResult(BaseModel):
    """``bloom_pipeline``'s result: every stage's (``clean`` None when the pipeline has no clean stage)."""

    out_dir: str
    clean: CleanResult | None
    tokenizer: TokenizerResult
    dataset: DatasetResult
    mixture_search: MixtureSearchResult | None = None  # None: the pipeline ran no search
    blend: BlendResult
    train: TrainResult
    export: ExportResult
    evaluate: EvaluateResult
