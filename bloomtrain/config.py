"""``TrainConfig``: one typed object describes a training run; the DeepSpeed JSON is derived from it.

A run is ``model + parallel + optim + schedule + data + checkpoint + stability + logging``, each a small
frozen pydantic model, loaded by the project's one loader (``bloomdata.config_loader.load_config``): YAML, then the
generated ``--section.field`` flags, then ``key.sub=value`` overrides (OLMo-core's dotlist merge). A field's
docstring is its description, hence its ``--help`` text and the fix in an error message.
DeepSpeed never reads a hand-written JSON: ``to_deepspeed_config`` generates it, so there is a single source
of truth (BigScience's tr11 slurm script kept two, CLI flags and a heredoc ds_config; docs/bloom-training.md,
"Launcher").

Units are explicit in names: ``*_samples`` count sequences of ``model.seq_length`` tokens, ``*_iters``
count optimizer iterations (one global batch each).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bloomdata import config_loader as loader
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError, FieldValueError
from bloomdata.megatron.splits import Compat
from bloomdata.plugins import check_target
from bloomtrain.model.config import ModelConfig
from bloomtrain.wandb_config import WandbConfig


class _Frozen(BaseModel):
    # validators raise ValueError (not BloomstackError) so the loader can say which file line or flag set it
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ParallelConfig(_Frozen):
    tp: int = 1
    """Tensor-parallel degree (ranks that share one layer; adjacent global ranks)."""
    pp: int = 1
    """Pipeline stages."""
    partition_method: str = "type:transformer|embedding"
    """DeepSpeed PipelineModule partitioning: blocks and both embedding specs count as one unit each."""
    activation_checkpointing: bool = False
    """Recompute each transformer block in backward (blocks only; never the embedding stage)."""


class OptimConfig(_Frozen):
    precision: Literal["bf16", "fp32"] = "bf16"
    """bf16: DeepSpeed BF16_Optimizer (fp32 master + fp32 grad accumulation); on a CPU without native bf16 it trains
    fp32 instead (bloomtrain.precision). fp32: exact, for tests."""
    force_bf16: bool = False
    """Keep bf16 on a CPU without native bf16 units (no AVX512-BF16/AMX), where it runs several times slower than the
    fp32 it falls back to otherwise: for tests of bf16 numerics."""
    lr: float = 6e-5
    """Peak learning rate, reached at the end of the warmup."""
    min_lr: float = 6e-6
    """Learning rate at the end of the decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.1
    """AdamW weight decay. Applied to matrices only: biases and LayerNorm parameters are never decayed."""
    clip_grad: float = 1.0
    """Max global L2 norm (TP-duplicated and tied parameters counted once); 0 disables clipping."""
    grad_reduce_dtype: Literal["fp32", "bf16"] = "fp32"
    """Data-parallel all-reduce dtype in bf16 mode (BLOOM reduced in bf16; fp32 is the safe default)."""


class ScheduleConfig(_Frozen):
    micro_batch_size: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    global_batch_size: int = 8
    """Sequences per optimizer step (after the ramp-up)."""
    rampup_batch_size: tuple[int, int, int] | None = None
    """BLOOM's ``start increment samples``: grow the global batch from start by increment, evenly over samples."""
    train_samples: int | None = None
    """Training length in samples (set this or train_iters)."""
    train_iters: int | None = None
    """Training length in optimizer iterations (set this or train_samples)."""
    warmup_samples: int = 0
    """Linear warmup from 0 to ``optim.lr`` over this many samples."""
    decay_samples: int | None = None
    """Cosine decay from the end of warmup to ``optim.min_lr`` at this many samples (default: train_samples)."""
    decay_style: Literal["cosine", "linear", "constant"] = "cosine"
    """Shape of the learning-rate decay after the warmup."""

    @model_validator(mode="after")
    def _check(self) -> ScheduleConfig:
        if (self.train_samples is None) == (self.train_iters is None):
            raise ValueError(
                "set exactly one of train_samples and train_iters "
                f"(got train_samples={self.train_samples}, train_iters={self.train_iters})"
            )
        if self.rampup_batch_size is not None and self.train_iters is not None:
            raise FieldValueError("rampup_batch_size needs train_samples (as in Megatron), not train_iters",
                                  "rampup_batch_size", "train_iters")
        if self.global_batch_size % self.micro_batch_size:
            raise FieldValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of "
                f"micro_batch_size {self.micro_batch_size}", "global_batch_size", "micro_batch_size")
        return self


VALID_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class ValidSetConfig(_Frozen):
    """One named validation set (``data.valid_sets.NAME``); its string form is its ``path`` alone.

    Which samples an evaluation reads (bloomtrain.data.build_valid_sets): every full sample of
    ``model.seq_length + 1`` tokens of the validation split, one epoch of Megatron's GPTSamples; of those,
    ``samples`` at evenly spaced positions along the split (the middle of each of ``samples`` equal strata),
    the same at every evaluation, on every parallel layout. A blend YAML spreads them over its datasets by
    weight (Megatron's greedy blending rule), each dataset's share evenly spaced along its own split.
    """

    path: str
    """A Megatron dataset prefix (PREFIX.bin/.idx) or a blend YAML (.yaml/.yml) written by `bloomdata blend`."""
    split: str | None = None
    """Its validation documents: a '949,50,1' split (the second part) or a 'START:END' range; None: a blend YAML's own
    split/valid_range, for a prefix data.blend's (the documents training held out)."""
    samples: int | None = Field(default=None, ge=1)
    """Samples each evaluation reads, fewer if the split holds fewer (None: logging.eval_iters x
    schedule.global_batch_size)."""

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value


class DataConfig(_Frozen):
    kind: Literal["synthetic", "blend"] = "synthetic"
    """synthetic: seeded random tokens (tests, benchmarks); blend: a ``bloomdata blend`` YAML."""
    blend: str | None = None
    """Path of the blend YAML written by ``bloomdata blend`` (kind=blend)."""
    valid_blend: str | None = None
    """Optional separate validation blend; default: the ``valid`` split of ``blend``."""
    compat: Compat = Compat.CORE
    """Index-building rules: megatron-core's, or Megatron-DeepSpeed's as BLOOM used (bloomdata.blend)."""
    seed: int = 1234
    """Seed of the synthetic samples, and of a blend's document and sample shuffles when its YAML names no seed of
    its own (megatron-core's random_seed; bloomdata.megatron.builder)."""
    synthetic_samples: int = 4096
    """Samples in the synthetic training set (validation gets a quarter, from another seed)."""
    cache_dir: str | None = None
    """Where the blend's sample indices are cached (None: beside each dataset, as megatron-core)."""
    valid_sets: dict[str, ValidSetConfig] = Field(default_factory=dict)
    """Named validation sets NAME=PREFIX or NAME=BLEND_YAML (e.g. one per language) evaluated every
    logging.eval_interval: valid/NAME/loss, ppl, bpb."""
    tokenizer: str | None = None
    """tokenizer.json (or its directory) the data was built with: UTF-8 bytes per token id for the bits per byte of
    valid_sets."""

    @field_validator("valid_sets")
    @classmethod
    def _names(cls, value: dict[str, ValidSetConfig]) -> dict[str, ValidSetConfig]:
        bad = [name for name in value if not VALID_SET_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"names {bad} must be letters, digits, '_', '.' or '-' (they become metric keys "
                             "valid/NAME/loss)")
        return value

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if self.kind == "blend" and not self.blend:
            raise ValueError("kind=blend needs data.blend=PATH (the YAML written by `bloomdata blend`)")
        if self.valid_sets and not self.tokenizer:
            # bpb is the number that compares models with different tokenizers: a run that asked for
            # per-set validation should not quietly log it without.
            raise ValueError("valid_sets needs data.tokenizer=PATH (the tokenizer.json the datasets were built "
                             "with) to log bits per byte")
        return self


class CheckpointConfig(_Frozen):
    dir: str | None = None
    """Checkpoint root (DeepSpeed layout, ``latest`` tag file). None: never save or load."""
    save_interval: int | Literal["auto"] | None = None
    """Save every this many iterations (BLOOM: 100). ``auto``: the interval that loses least work to failures
    (Young/Daly: sqrt(2 x save time x mtbf_hours), in iterations of the measured step time), measured and logged
    with its inputs, recomputed after the first saves. None: only at the end of training."""
    mtbf_hours: float = Field(24.0, gt=0)
    """Mean time between failures of the whole job (any rank's failure stops it), for ``save_interval: auto``.
    BLOOM-176B's 384 GPUs lost one to two a week (84-168 h); a job's MTBF falls as its node count grows."""
    async_save: bool = False
    """Write checkpoints in the background: a save copies the state to host memory (pinned on CUDA) and training
    goes on while a thread writes the files and digests; ``latest`` moves once every rank's files are durable; the
    next save, and the end of the run, wait for it. Costs host memory of one checkpoint per rank."""
    keep_last: int | None = 3
    """Keep this many most recent checkpoints (None keeps all)."""
    load: bool = True
    """Resume from ``dir/latest`` when it exists."""
    on_corrupt: Literal["previous", "fail"] = "previous"
    """When a file of the checkpoint to resume from does not match the digest its save recorded: ``previous`` resumes
    from the newest earlier checkpoint whose files all verify (and says so); ``fail`` stops."""
    load_universal: bool = False
    """Resume at another TP/PP/DP: ``latest`` is converted with ds_to_universal when its layout differs (unless
    ``latest_universal`` names a conversion of it, e.g. DeepSpeed's ds_to_universal run by hand)."""
    kill_switch_path: str | None = None
    """When this file appears, save and stop (BLOOM's --kill-switch-path)."""
    exit_duration_in_mins: float | None = None
    """Save and stop after this many minutes of wall time (BLOOM: 5990 of a 100 h allocation)."""
    exit_signals: tuple[str, ...] = ("SIGTERM", "SIGUSR1")
    """Signals that make the trainer save at the end of the iteration and exit 0."""


class StabilityConfig(_Frozen):
    max_consecutive_skips: int = 10
    """After this many non-finite iterations in a row: save and stop with an error."""
    spike_factor: float = 2.0
    """Log a loss spike when the loss exceeds this factor times its running mean."""
    inject_nan_at_iters: tuple[int, ...] = ()
    """Drill: make the loss NaN at these iterations (1-based) to exercise the skip path."""
    hang_timeout_s: float | Literal["auto"] | None = "auto"
    """A rank that finishes no iteration for this long dumps every thread's stack, records a hang and exits (the restart
    resumes from the last checkpoint); the collective timeouts follow it. auto: hang_floor_s, or 5 x the longest
    iteration (step, evaluations, checkpoint save) measured in this launch if longer; the first iteration of a launch
    gets at least 5 x the start-up. null: off."""
    hang_floor_s: float = Field(default=600.0, gt=0)
    """The least hang_timeout_s=auto waits, in seconds (NCCL's and Megatron's collective timeout)."""
    straggler_factor: float = Field(default=1.5, gt=1)
    """Name a rank (once per launch, in one console line) whose fastest step over straggler_window log intervals took
    this many times the median of its peers' fastest (CPU seconds: waiting for a peer costs none)."""
    straggler_window: int = Field(default=5, ge=1)
    """Log intervals a rank must stay slow before it is named (bloomtrain.callbacks.stragglers)."""

    @field_validator("hang_timeout_s")
    @classmethod
    def _positive(cls, value: float | str | None) -> float | str | None:
        if isinstance(value, float | int) and value <= 0:
            raise ValueError(f"{value} must be > 0 seconds, auto, or null (off)")
        return value


class LoggingConfig(_Frozen):
    dir: str | None = None
    """TensorBoard events and ``metrics.jsonl`` go here (rank 0 only). None: console only."""
    log_interval: int = 1
    """Log the training metrics every this many iterations."""
    eval_interval: int | None = None
    """Evaluate on the validation blend every this many iterations (None: never)."""
    eval_iters: int = 1
    """Global batches per evaluation (valid_loss reads the same first validation samples each time; valid_sets as many,
    spread)."""
    tensorboard: bool = True
    """Also write TensorBoard events into logging.dir."""
    peak_tflops: float | None = None
    """Per-device peak (dense bf16) for MFU; None: 312 on A100, 989 on H100, no MFU on CPU."""
    profile_iters: tuple[int, int] | None = None
    """Profile iterations [first, last] (1-based, inclusive) with torch.profiler: a trace and a table by self time in
    logging.dir/profile/. None: never."""
    profile_ranks: tuple[int, ...] = (0,)
    """The global ranks that profile (each writes its own files)."""
    wandb: WandbConfig | None = None
    """Also log every metrics record and the resolved config to Weights & Biases (None: not)."""

    @model_validator(mode="after")
    def _check(self) -> LoggingConfig:
        if self.profile_iters is None:
            return self
        first, last = self.profile_iters
        if not 1 <= first <= last:
            raise ValueError(f"profile_iters [{first}, {last}] must be [first, last] with 1 <= first <= last "
                             "(1-based iterations, both profiled)")
        if self.dir is None:
            raise FieldValueError("profile_iters needs logging.dir=PATH (the profile is written to "
                                  "logging.dir/profile/)", "profile_iters", "dir")
        return self


class CallbackSpec(_Frozen):
    """A callback of the user's, added after the trainer's own (``callbacks``); its string form is ``target``."""

    # no flags of their own: --callbacks TARGET gives the string form, a config file the {target, args} form
    target: str = Field(json_schema_extra=cli_option(skip=True))
    """``package.module:ClassName`` of a ``bloomtrain.callbacks.Callback`` subclass, importable on every rank."""
    args: dict[str, Any] = Field(default_factory=dict, json_schema_extra=cli_option(skip=True))
    """Keyword arguments of its constructor."""

    @model_validator(mode="before")
    @classmethod
    def _from_target(cls, value: Any) -> Any:
        return {"target": value} if isinstance(value, str) else value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return check_target(value)


class TrainConfig(_Frozen):
    model: ModelConfig
    """The model's shape and numerics, or ``{preset: bloom-560m, ...}``: a preset with overrides."""
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    """Tensor/pipeline degrees (data parallelism is what the world size leaves)."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """Precision, AdamW and clipping."""
    schedule: ScheduleConfig
    """Batch sizes, ramp-up, training length, learning-rate schedule."""
    data: DataConfig = Field(default_factory=DataConfig)
    """Synthetic tokens or a blend YAML."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Saving, resuming and stopping."""
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    """Non-finite iterations, loss spikes, the NaN drill."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Metrics, TensorBoard, evaluation."""
    seed: int = 42
    """Python/numpy/torch seed (+ 100 x pipeline rank, as Megatron); the weights' init seed is model.init_seed."""
    callbacks: list[CallbackSpec] = Field(default_factory=list)
    """Your callbacks, run after the trainer's own (before its checkpoint saves) in this order:
    package.module:ClassName, or {target, args}."""

    # --- derived sizes -----------------------------------------------------------------------------

    def dp_size(self, world_size: int) -> int:
        tp, pp = self.parallel.tp, self.parallel.pp
        if world_size % (tp * pp):
            raise BloomstackError(
                f"world size {world_size} is not divisible by tp {tp} x pp {pp}; launch a multiple of {tp * pp} "
                "processes or change parallel.tp / parallel.pp"
            )
        dp = world_size // (tp * pp)
        for name, batch in self._batch_sizes():
            if batch % (self.schedule.micro_batch_size * dp):
                raise BloomstackError(
                    f"schedule.{name}={batch} is not a multiple of micro_batch_size "
                    f"{self.schedule.micro_batch_size} x data-parallel size {dp}; change one of them"
                )
        return dp

    def _batch_sizes(self) -> list[tuple[str, int]]:
        sizes = [("global_batch_size", self.schedule.global_batch_size)]
        if self.schedule.rampup_batch_size is not None:
            start, inc, _ = self.schedule.rampup_batch_size
            sizes += [("rampup_batch_size start", start), ("rampup_batch_size increment", inc)]
        return sizes

    def to_deepspeed_config(self, world_size: int, train_batch_size: int | None = None,
                            load_universal: bool | None = None) -> dict[str, Any]:
        """The DeepSpeed config for this run (``train_batch_size`` = the current, ramped global batch;
        ``load_universal`` = the resolved decision, default ``checkpoint.load_universal``).

        bf16: DeepSpeed 0.19.8 builds BF16_Optimizer with fp32 gradient accumulation only for ZeRO stage 1
        plus ``data_types.grad_accum_dtype=fp32`` (stage 0 accumulates in bf16, stage 0 + fp32 raises;
        docs/bloom-training.md, "DeepSpeed BF16 optimizer"). fp32: stage 0 and DeepSpeed's clipping off,
        because its fp32 clip_grad_norm_ counts LayerNorms only on model-parallel rank 0 and tied weights
        twice; our optimizer wrapper (bloomtrain.engine) clips on the correct global norm instead.
        """
        dp = self.dp_size(world_size)
        batch = train_batch_size or self.schedule.global_batch_size
        mbs = self.schedule.micro_batch_size
        ds: dict[str, Any] = {
            "train_batch_size": batch,
            "train_micro_batch_size_per_gpu": mbs,
            "gradient_accumulation_steps": batch // (mbs * dp),
            "steps_per_print": 10**9,  # our metrics module logs; keep DeepSpeed quiet
            "wall_clock_breakdown": False,
            "zero_allow_untested_optimizer": True,
            "checkpoint": {"load_universal": self.checkpoint.load_universal if load_universal is None
                           else load_universal},
        }
        if self.optim.precision == "bf16":
            ds.update(
                # immediate_grad_update: each parameter's bf16 gradient is added to its fp32 accumulator by a hook as
                # soon as backward produces it, and freed: no pass over every gradient after each micro-batch's
                # backward, and no bf16 gradients held to the end of it (DeepSpeed's BF16_Optimizer).
                bf16={"enabled": True, "immediate_grad_update": True},
                zero_optimization={"stage": 1},
                data_types={"grad_accum_dtype": "fp32"},
                communication_data_type=self.optim.grad_reduce_dtype,
                gradient_clipping=self.optim.clip_grad,
            )
        else:
            ds.update(zero_optimization={"stage": 0}, gradient_clipping=0.0)
        return ds


# --- loading ---------------------------------------------------------------------------------------------


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                base: TrainConfig | dict[str, Any] | None = None) -> TrainConfig:
    """A YAML file (on top of ``base``) with ``key.sub=value`` overrides, validated; errors name the file
    line or the override, the key and the fix (``bloomdata.config_loader.load_config``)."""
    return loader.load_config(TrainConfig, path, defaults=base, overrides=list(overrides or []),
                              origin="training config")


# --- export ---------------------------------------------------------------------------------------------

Dtype = Literal["float32", "bfloat16", "float16"]


class CardConfig(BaseModel):
    """What a model card needs besides the training run's own records: the licence, the records of the stages
    around training (cleaning, tokenizer fertility, evaluation) and the figures a compute estimate needs.
    ``bloomtrain export`` stores them in the model's provenance.json, so ``bloomtrain model-card`` rebuilds the
    same card from the records alone (bloomtrain.card)."""

    model_config = ConfigDict(extra="forbid")

    license: str | None = Field(default=None, description="licence of the weights, as a Hub licence id (apache-2.0, "
                                "bigscience-bloom-rail-1.0, other, ...); no default: the card says it is not set")
    name: str | None = Field(default=None, description="the model's name on its card and in the card's metadata "
                                                       "(default: the run's name: the directory of the run that holds "
                                                       "its checkpoints, e.g. tiny for runs/tiny/checkpoints)")
    tags: list[str] = Field(default_factory=list, json_schema_extra=cli_option("--hub-tag", metavar="TAG"),
                            description="extra Hub tags for the card (repeatable)")
    clean_summary: str | None = Field(default=None, json_schema_extra=cli_option(metavar="JSON"),
                                      description="clean_summary.json of the `bloomdata clean` run the training "
                                                  "data was built from")
    fertility: str | None = Field(default=None, json_schema_extra=cli_option(metavar="JSON"),
                                  description="the tokenizer's fertility per language (`bloomdata fertility --json`)")
    evaluation: str | None = Field(default=None, json_schema_extra=cli_option(metavar="JSON"),
                                   description="eval.json of a `bloomtrain evaluate` run that scored this model")
    evaluated_model: str | None = Field(default=None, json_schema_extra=cli_option(metavar="NAME"),
                                        description="this model's name in eval.json (default: the model whose path "
                                                    "is this directory, or the only one)")
    evaluation_split: str = Field(default="test", description="the split eval.json's documents are, as the card "
                                  "names it (the pipeline's held-out validation documents: validation)")
    power_watts: float | None = Field(default=None, gt=0, json_schema_extra=cli_option(metavar="W"),
                                      description="average power per GPU (CPU runs: per core) in watts; with it the "
                                                  "card estimates energy, without it it does not")
    carbon_intensity: float | None = Field(default=None, ge=0, json_schema_extra=cli_option(metavar="KG_PER_KWH"),
                                           description="grid carbon intensity in kg CO2eq per kWh; with "
                                                       "--power-watts the card estimates emissions")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        # provenance.json of exports written before `name` replaced `model_name`
        if isinstance(data, dict) and "model_name" in data and "name" not in data:
            data = {**data, "name": data["model_name"]}
            data.pop("model_name")
        return data

    def card_settings(self, given_only: bool = False) -> CardConfig:
        """This config's card fields (those of a subclass: ExportConfig, the flows' export stage) as a CardConfig;
        with ``given_only``, only the fields set explicitly, so that they replace stored settings and leave the
        others (an evaluation added later with `bloomtrain model-card`) as they are."""
        names = set(CardConfig.model_fields) & (self.model_fields_set if given_only else set(CardConfig.model_fields))
        return CardConfig.model_validate(self.model_dump(include=names))


class ExportConfig(CardConfig):
    """``bloomtrain export``: a checkpoint (any TP x PP layout) -> a transformers BloomForCausalLM directory with its
    model card (README.md, built from the run's records and the card fields)."""

    checkpoint: str = Field(description="checkpoint directory (holds `latest`)",
                            json_schema_extra=cli_option(positional=True, metavar="CHECKPOINT"))
    out_dir: str = Field(description="directory to write the transformers model into",
                         json_schema_extra=cli_option(positional=True, metavar="OUT_DIR"))
    tag: str | None = Field(default=None, description="checkpoint tag (default: the `latest` file)")
    tokenizer: str | None = Field(default=None, description="directory with tokenizer.json (default: the checkpoint "
                                                            "directory)")
    dtype: Dtype | None = Field(default=None, description="weights' dtype (default: the checkpoint's)")


class ModelCardConfig(CardConfig):
    """``bloomtrain model-card``: (re)build a model card from the records of an export or a checkpoint."""

    path: str = Field(description="an exported model directory (holds provenance.json) or a checkpoint directory",
                      json_schema_extra=cli_option(positional=True, metavar="CKPT_OR_HF_DIR"))
    out: str | None = Field(default=None, json_schema_extra=cli_option(metavar="README.md"),
                            description="where to write the card; its images go beside it (default: README.md in "
                                        "an exported model directory)")
    tag: str | None = Field(default=None, description="checkpoint tag (default: the `latest` file)")
