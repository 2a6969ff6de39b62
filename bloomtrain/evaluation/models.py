"""Loading a transformers causal LM and its tokenizer for scoring, and the token a document is scored after.

Any ``AutoModelForCausalLM`` directory works: ours (``bloomtrain export``) or a reference model saved with
``save_pretrained``. Nothing touches the network (``local_files_only``). Every failure a user can cause (no
such directory, weights that do not load, no tokenizer, a tokenizer larger than the model's vocabulary) is a
one-line ``BloomstackError``.

The document-start token (what the first token of a document is predicted from) is fixed per tokenizer:

- the token the tokenizer itself puts in front of a text, when it adds one (Llama-style ``<s>``): that is
  what the model saw before every document in pretraining;
- otherwise its end-of-sequence token, which pretraining placed between documents: BLOOM's ``</s>`` (id 2,
  the Megatron EOD), GPT-2's ``<|endoftext|>``;
- otherwise its beginning-of-sequence token; a tokenizer with neither is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from bloomdata.errors import BloomstackError


@dataclass
class CausalLM:
    """A loaded model (eval mode, on its device) with its tokenizer and document-start token."""

    name: str
    path: str
    model: torch.nn.Module  # a transformers PreTrainedModel with a causal-LM head
    tokenizer: object  # a transformers PreTrainedTokenizerBase
    start_id: int
    start_token: str

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        """The longest input the model was built for (``n_positions`` / ``max_position_embeddings``), or None
        for BLOOM: ALiBi has no position table, and its ``seq_length`` is the training length, not a limit."""
        config = self.model.config
        if getattr(config, "model_type", None) == "bloom":
            return None
        for key in ("n_positions", "max_position_embeddings"):
            value = getattr(config, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BloomstackError("device cuda: torch sees no CUDA GPU; set device to cpu", keys=["device"])
    return torch.device(device)


def document_start(tokenizer, path: str) -> tuple[int, str]:
    """(id, token) every document is scored after; see the module docstring for the rule."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    probe = "a b"
    with_special = tokenizer(probe, add_special_tokens=True)["input_ids"]
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    if bos is not None and with_special[:1] == [bos] and plain[:1] != [bos]:
        chosen = bos
    elif eos is not None:
        chosen = eos
    elif bos is not None:
        chosen = bos
    else:
        raise BloomstackError(f"{path}: the tokenizer has neither an eos nor a bos token to score documents after; "
                              "set eos_token in its tokenizer_config.json")
    return int(chosen), tokenizer.convert_ids_to_tokens(int(chosen))


def _load_quietly(load):
    """Run a transformers loader without its progress bars (they would interleave with ours on stderr)."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load()
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_causal_lm(path: str | os.PathLike, *, name: str | None = None, dtype: str = "float32",
                   device: str = "auto") -> CausalLM:
    """The model and tokenizer of a transformers directory, ready to score (eval mode, no gradients needed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    path = str(path)
    if not (Path(path) / "config.json").is_file():
        raise BloomstackError(f"{path}: not a transformers model directory (no config.json); give a "
                              "directory written by `bloomtrain export` or save_pretrained")
    torch_device = resolve_device(device)
    try:
        model = _load_quietly(lambda: AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, dtype), local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - whatever transformers raises, the directory does not load
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise BloomstackError(f"model directory {path}: the model does not load ({type(exc).__name__}: {first}); check "
                              "config.json and the weight files (re-export with `bloomtrain export`)") from None
    has_tokenizer = any((Path(path) / f).is_file() for f in
                        ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "tokenizer_config.json"))
    if not has_tokenizer:
        raise BloomstackError(f"model directory {path}: no tokenizer files (tokenizer.json) in the model directory; "
                              "copy them there, or export with `bloomtrain export --tokenizer DIR`")
    try:
        tokenizer = _load_quietly(lambda: AutoTokenizer.from_pretrained(path, local_files_only=True))
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise BloomstackError(f"model directory {path}: the tokenizer does not load ({type(exc).__name__}: {first}); "
                              "check tokenizer.json / tokenizer_config.json there") from None
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise BloomstackError(f"model directory {path}: the tokenizer has {len(tokenizer)} tokens but the model's "
                              f"embedding only {rows} rows; the tokenizer files belong to another model")
    start_id, start_token = document_start(tokenizer, path)
    model = model.to(torch_device).eval()
    label = name or os.path.basename(os.path.normpath(path))
    return CausalLM(label, path, model, tokenizer, start_id, start_token)
