"""``bloomdata train-tokenizer --dry-run``: the sample and the files a training would make, with nothing written.

The plan reads the inputs once, as the sampler's first pass does (``count_bytes``: UTF-8 bytes of text per
language), and applies the same alpha weighting (``byte_quotas``) to show how many bytes each language would give
the sample; it trains nothing. ``tokenizer.json``'s size is estimated at ``JSON_BYTES_PER_TOKEN`` per vocabulary
entry: about what byte-level BPE files hold per entry, from a few thousand tokens to BLOOM's 250,680.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel

from bloomdata.dry_run import Inputs, PlannedFile, inputs_of
from bloomdata.readers import plan_shards
from bloomdata.tokenizer.bpe import (
    REPORT_FILE,
    TokenizerTrainConfig,
    check_budget,
    choose_trainer,
    memory_trainer_bytes,
)
from bloomdata.tokenizer.sampling import alpha_probabilities, byte_quotas, count_bytes

JSON_BYTES_PER_TOKEN = 60  # tokenizer.json (pretty-printed vocabulary and merges) per vocabulary entry


class TokenizerPlan(BaseModel):
    """What ``train_tokenizer(config)`` would do."""

    out_dir: str
    out_dir_exists: bool
    inputs: Inputs
    text_bytes: dict[str, int]  # UTF-8 text per language, as the sampler counts it
    probabilities: dict[str, float]  # p_lang ∝ text_bytes ** alpha
    sample_bytes: dict[str, int]  # each language's share of byte_budget (at most its text)
    byte_budget: int
    vocab_size: int
    trainer: Literal["memory", "counts"]
    trainer_memory_bytes: int | None  # what the in-memory trainer may need (None: the counts trainer spills)
    outputs: list[PlannedFile]


def plan_tokenizer(config: TokenizerTrainConfig) -> TokenizerPlan:
    """The plan (see the module docstring); the same checks as the run fail first (a too large budget)."""
    check_budget(config)
    inputs = inputs_of(plan_shards(config.sources))
    sizes = count_bytes(config.sources)
    trainer = choose_trainer(config)
    names = ["tokenizer_config.json", "special_tokens_map.json", REPORT_FILE]
    outputs = [*(PlannedFile(path=os.path.join(config.out_dir, n)) for n in names),
               PlannedFile(path=os.path.join(config.out_dir, "tokenizer.json"),
                           bytes=config.vocab_size * JSON_BYTES_PER_TOKEN)]
    return TokenizerPlan(
        out_dir=config.out_dir, out_dir_exists=os.path.isdir(config.out_dir), inputs=inputs, text_bytes=sizes,
        probabilities={k: round(v, 6) for k, v in alpha_probabilities(sizes, config.alpha).items()},
        sample_bytes=byte_quotas(sizes, config.alpha, config.byte_budget), byte_budget=config.byte_budget,
        vocab_size=config.vocab_size, trainer=trainer,
        trainer_memory_bytes=memory_trainer_bytes(config.byte_budget) if trainer == "memory" else None,
        outputs=outputs)
