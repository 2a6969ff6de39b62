"""Perplexity and bits per byte: the two numbers derived from a summed next-token NLL, defined once.

``loss`` is the mean NLL per token in nats. Perplexity ``exp(loss)`` is clamped at ``exp(700)`` because
``math.exp`` overflows float64 past ~709 (a diverged run's loss must still print). Bits per byte is the
summed NLL over ``ln 2 x`` the UTF-8 bytes of the scored text: unlike the per-token loss, it compares models
with different tokenizers. Torch-free: the trainer's callbacks, the evaluation and the flows all call it.
"""

from __future__ import annotations

import math

MAX_LOG_PPL = 700.0  # nats; exp(700) ~ 1e304 still fits a float64


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a mean per-token loss in nats, clamped at ``exp(MAX_LOG_PPL)``."""
    return math.exp(min(loss, MAX_LOG_PPL))


def bits_per_byte(nll_sum: float, nbytes: int) -> float:
    """Summed NLL (nats) of a text's tokens / (ln 2 x its UTF-8 bytes); ``nbytes`` must be > 0."""
    return nll_sum / (math.log(2) * nbytes)
