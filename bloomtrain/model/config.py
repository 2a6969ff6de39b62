"""``ModelConfig``: the shape and numerics of a BLOOM model, with the published sizes as presets.

One pydantic model holds everything the model code reads (no global args). Presets mirror the BigScience
runs (docs/bloom-training.md, "Model sizes"): every size uses init std 0.0048, eps 1e-5, ALiBi, the embedding
LayerNorm and a vocabulary of 250680 tokens padded to 250880 rows, so the padded size does not depend on
the tensor-parallel degree. Without ``pad_vocab_size_to`` the Megatron rule applies instead: pad to a
multiple of ``make_vocab_size_divisible_by * tp_size`` (250752 at TP=1, 250880 at TP=2/4/8).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bloomdata.config_loader import cli_option, load_config
from bloomdata.errors import BloomstackError, FieldValueError

BLOOM_VOCAB = 250680  # len(tokenizer) of bigscience/tokenizer
BLOOM_PADDED_VOCAB = 250880  # = 1960 * 128; the rows in every released BLOOM checkpoint


# The released BLOOM sizes (docs/bloom-training.md, "Model sizes") and a tiny test size: what `model.preset` sets,
# under whatever else the config gives.
PresetName = Literal["tiny", "bloom-560m", "bloom-1b1", "bloom-1b7", "bloom-3b", "bloom-7b1", "bloom-176b"]
PRESET_SHAPES: dict[str, dict[str, Any]] = {
    # 2 layers, 12 heads: 3 per rank at TP=4, a non-power-of-two ALiBi
    "tiny": {"num_layers": 2, "hidden_size": 96, "num_heads": 12, "vocab_size": 250, "pad_vocab_size_to": 256,
             "seq_length": 32},
    "bloom-560m": {"num_layers": 24, "hidden_size": 1024, "num_heads": 16},
    "bloom-1b1": {"num_layers": 24, "hidden_size": 1536, "num_heads": 16},
    "bloom-1b7": {"num_layers": 24, "hidden_size": 2048, "num_heads": 16},
    "bloom-3b": {"num_layers": 30, "hidden_size": 2560, "num_heads": 32},
    "bloom-7b1": {"num_layers": 30, "hidden_size": 4096, "num_heads": 32},
    "bloom-176b": {"num_layers": 70, "hidden_size": 14336, "num_heads": 112},
}


BY_PRESET = "unless model.preset sets it"


def _preset_help() -> str:
    sizes = [f"{name} ({shape['num_layers']} layers x {shape['hidden_size']}, {shape['num_heads']} heads)"
             for name, shape in PRESET_SHAPES.items()]
    return ("A shipped shape, under the other model.* keys: " + "; ".join(sizes) +
            ". Applied when the config is read: the printed config holds the resulting fields.")


def _on_off(value: Any) -> Any:
    """``on`` / ``off`` as written: YAML 1.1 reads both as booleans, in a config file and in ``model.compile=off``."""
    return ("on" if value else "off") if isinstance(value, bool) else value


class ModelConfig(BaseModel):
    """Shape, initialisation and dropout of a BLOOM decoder. Frozen: build a new one to change it."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    preset: PresetName | None = Field(default=None, exclude=True, description=_preset_help())
    num_layers: int = Field(json_schema_extra=cli_option(required=BY_PRESET))
    """Transformer blocks."""
    hidden_size: int = Field(json_schema_extra=cli_option(required=BY_PRESET))
    """Width of the residual stream (h); the MLP is 4h wide."""
    num_heads: int = Field(json_schema_extra=cli_option(required=BY_PRESET))
    """Attention heads, each hidden_size / num_heads wide."""
    vocab_size: int = BLOOM_VOCAB
    """Tokenizer vocabulary before padding."""
    pad_vocab_size_to: int | None = BLOOM_PADDED_VOCAB
    """Exact number of embedding rows (TP-independent). None: the multiple-of-(divisor x TP) rule."""
    make_vocab_size_divisible_by: int = 128
    """Without pad_vocab_size_to: pad the embedding to a multiple of this x TP (Megatron's rule)."""
    seq_length: int = 2048
    """Training sequence length in tokens (ALiBi has no position table, so this is not a hard limit)."""
    layernorm_eps: float = 1e-5
    """LayerNorm epsilon."""
    init_std: float = 0.0048
    """Std of the normal init; output projections use init_std / sqrt(2 * num_layers)."""
    init_seed: int = 42
    """Base seed of the TP-invariant per-parameter init (bloomtrain.parallel.init)."""
    hidden_dropout: float = 0.0
    """Dropout after the embedding LN and on both residual branches (BLOOM trained with 0.1)."""
    attention_dropout: float = 0.0
    """Dropout on the attention probabilities (BLOOM trained with 0.1)."""
    kernels: Literal["auto", "torch", "fused", "compile", "apex"] = "auto"
    """Implementation of LayerNorm, bias+GeLU, the ALiBi softmax and causal attention (bloomtrain.kernels).
    auto: each fused kernel that passes a self-check against PyTorch on first use per device type and dtype,
    PyTorch for the others (one warning each); fused: the fused kernels, an error where one fails to build or
    check; torch: PyTorch only; compile: torch.compile of the PyTorch ops; apex: NVIDIA apex where it applies."""
    compile: Annotated[Literal["auto", "on", "off"], BeforeValidator(_on_off)] = "auto"
    """torch.compile each transformer block into one graph forward and one backward, attention and TP collectives
    inside, so LayerNorm, bias + GeLU, the dropouts and the residual adds become a few generated kernels around the
    matmuls (bloomtrain.model.compiled).
    auto: on where the blocks run on CUDA, off on the CPU; on: on any device (the CPU needs a C++ compiler);
    off: eager. The first step's compile time is logged."""

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        # ValueError (FieldValueError), as pydantic expects: the config loader names the file, line and key
        for name in ("num_layers", "hidden_size", "num_heads", "vocab_size"):
            if getattr(self, name) < 1:
                raise FieldValueError(f"{name} must be >= 1, got {getattr(self, name)}", name)
        if self.hidden_size % self.num_heads:
            raise FieldValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; "
                "pick a head count that divides it", "hidden_size", "num_heads")
        if self.pad_vocab_size_to is not None:
            if self.pad_vocab_size_to < self.vocab_size:
                raise FieldValueError(
                    f"pad_vocab_size_to={self.pad_vocab_size_to} is smaller than vocab_size={self.vocab_size}; "
                    "raise it or set it to null", "pad_vocab_size_to", "vocab_size")
            if self.pad_vocab_size_to % self.make_vocab_size_divisible_by:
                raise FieldValueError(
                    f"pad_vocab_size_to={self.pad_vocab_size_to} is not a multiple of "
                    f"make_vocab_size_divisible_by={self.make_vocab_size_divisible_by}",
                    "pad_vocab_size_to", "make_vocab_size_divisible_by")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise FieldValueError(f"{name} must be in [0, 1), got {getattr(self, name)}", name)
        return self

    def compiles(self, device_type: str) -> bool:
        """Whether ``compile`` turns block compilation on for blocks on ``device_type`` ("cuda", "cpu")."""
        return self.compile == "on" or (self.compile == "auto" and device_type == "cuda")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def ffn_hidden_size(self) -> int:
        # BLOOM (and transformers' BloomMLP) hard-wire the MLP width to 4h.
        return 4 * self.hidden_size

    @property
    def output_init_std(self) -> float:
        """Std of the attention ``dense`` and ``dense_4h_to_h`` weights (Megatron's scaled init)."""
        return self.init_std / math.sqrt(2.0 * self.num_layers)

    def padded_vocab_size(self, tp_size: int = 1) -> int:
        """Rows of the word embedding for ``tp_size`` tensor-parallel ranks (Megatron's padding rule)."""
        if self.pad_vocab_size_to is not None:
            if self.pad_vocab_size_to % tp_size:
                raise BloomstackError(
                    f"ModelConfig: pad_vocab_size_to={self.pad_vocab_size_to} is not divisible by "
                    f"tensor-parallel size {tp_size}; pick a TP size that divides it"
                )
            return self.pad_vocab_size_to
        multiple = self.make_vocab_size_divisible_by * tp_size
        return -(-self.vocab_size // multiple) * multiple

    def num_parameters(self, tp_size: int = 1) -> int:
        """Total parameters with the tied head counted once: l(12h^2 + 13h) + Vh + 4h."""
        h, v = self.hidden_size, self.padded_vocab_size(tp_size)
        return self.num_layers * (12 * h * h + 13 * h) + v * h + 4 * h

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        """``{preset: bloom-560m, seq_length: 1024}`` = the preset's shape with overrides; the preset itself is
        not kept (every field it set is), so a model compares and prints by its values alone."""
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        rest = {k: v for k, v in data.items() if k != "preset"}
        if data["preset"] not in PRESET_SHAPES:
            raise FieldValueError(f"unknown model preset {data['preset']!r}; choose one of {sorted(PRESET_SHAPES)}",
                                  "preset")
        return {**PRESET_SHAPES[data["preset"]], **rest}

    @classmethod
    def tiny(cls, **overrides: Any) -> ModelConfig:
        return cls(preset="tiny", **overrides)

    @classmethod
    def bloom_176b(cls, **overrides: Any) -> ModelConfig:
        return cls(preset="bloom-176b", **overrides)


def _preset(name: str) -> Any:
    """A callable building the preset ``name`` with keyword overrides."""
    def build(**overrides: Any) -> ModelConfig:
        return ModelConfig(preset=name, **overrides)
    return build


PRESETS = {name: _preset(name) for name in PRESET_SHAPES}


def model_config_from(values: dict[str, Any], source: str) -> ModelConfig:
    """A ``ModelConfig`` from a file that is not a config the loader reads (a checkpoint's metadata, a
    transformers ``config.json``): a bad value is the loader's one ``BloomstackError`` line, naming ``source`` and
    the key."""
    try:
        return load_config(ModelConfig, values=values, origin=source)
    except BloomstackError as exc:
        raise BloomstackError(f"{exc}; this is no BLOOM model configuration bloomtrain can build") from None
