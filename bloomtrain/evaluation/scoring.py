"""Summed next-token NLL of documents and of fixed token sequences, batched, with any transformers causal LM.

Scoring convention (fixed; ``bloomtrain evaluate`` documents it): a document of n tokens (encoded without
special tokens) is scored as ``s = [start] + tokens``, where ``start`` is the document-start token
(``models.document_start``: ``</s>``, the EOD, for BLOOM). Every one of the n tokens is predicted, the first
from ``start`` alone; the NLL is in nats, over the model's whole vocabulary (padded rows included, as the
trainer's cross-entropy and ``model(ids)``'s log-softmax do).

A document longer than the context is scored with a sliding window (``document_windows``): the first window
holds ``context`` inputs and scores all of its targets; each next window ends ``stride`` tokens further and
scores only the targets the previous one did not reach. So each token is scored exactly once, and each token
after the first window sees at least ``context - stride + 1`` tokens before it (with the default stride,
context/2: half a window of context at most twice the forwards of disjoint chunks).

A ``Window`` is one row of a forward pass: inputs ``tokens[:-1]``, labels ``tokens[1:]``, of which
``labels[score_from:]`` (and, for a training sample, only those its loss mask keeps) are scored. Batching:
windows are sorted by length (longest first: an out-of-memory shows at once) and right-padded. In a causal
model a pad after the real tokens cannot reach them; the attention mask (passed only when a row is padded)
also keeps pads out of anything computed across the batch. Each window's sum (float64) is kept in its own
slot and added to its owner's in window order, so neither batch size nor order changes a result beyond the
floating-point noise of the forward itself, and a GPU run repeats bit for bit (no atomic adds).

Speed: the model body runs once per batch; the LM head and the log-softmax run only on the scored positions
(not on padding or on the overlap of a window), in chunks that bound the fp32 logits to ``chunk_elements``.
That this split equals the model's own ``logits`` is checked on a probe when a ``Scorer`` is built; a model
whose head does more (logit soft-capping, scaling) fails the probe and is scored from its full logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

IGNORE = -100  # label of a position that is not scored


@dataclass(frozen=True)
class Window:
    tokens: np.ndarray  # int64 [m + 1]: inputs tokens[:-1], labels tokens[1:]
    score_from: int  # labels[score_from:] are scored
    owner: int  # the document or sequence whose sums this window adds to
    mask: np.ndarray | None = None  # [m] labels with mask 0 are not scored (a training sample's loss mask)

    @property
    def scored(self) -> int:
        if self.mask is None:
            return len(self.tokens) - 1 - self.score_from
        return int(np.count_nonzero(self.mask[self.score_from:]))


def document_windows(n: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """``(a, b, score_from)`` per forward over ``s = [start] + doc`` (``len(s) = n + 1``): inputs ``s[a:b]``,
    labels ``s[a+1:b+1]``, the labels from ``score_from`` on scored (targets ``a+1+score_from .. b``)."""
    if n <= 0:
        return []
    if not 1 <= stride <= context:
        raise ValueError(f"stride {stride} must be in [1, context={context}]")
    b = min(n, context)
    windows = [(0, b, 0)]
    while b < n:
        prev, b = b, min(n, b + stride)
        a = max(0, b - context)
        windows.append((a, b, prev - a))
    return windows


def windows_for_documents(docs: Sequence[Sequence[int]], start_id: int, context: int, stride: int) -> list[Window]:
    """The windows that score every token of every document once (``owner`` = the document's index)."""
    out: list[Window] = []
    for owner, ids in enumerate(docs):
        s = np.empty(len(ids) + 1, dtype=np.int64)
        s[0] = start_id
        s[1:] = ids
        out += [Window(s[a:b + 1], score_from, owner)
                for a, b, score_from in document_windows(len(ids), context, stride)]
    return out


def batches(windows: Sequence[Window], batch_size: int) -> list[list[int]]:
    """Window indices per forward: longest first, ties in window order (deterministic)."""
    order = sorted(range(len(windows)), key=lambda i: (-len(windows[i].tokens), i))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


@dataclass
class Batch:
    """One forward's tensors (CPU): right-padded inputs and the flat positions to score."""

    input_ids: torch.Tensor  # int64 [b, L]
    attention_mask: torch.Tensor | None  # int64 [b, L]; None when no row is padded
    positions: torch.Tensor  # int64 [k]: flat indices (row * L + column) of the scored labels, ascending
    labels: torch.Tensor  # int64 [k]: the token each scored position must predict


def collate(windows: Sequence[Window], pad_id: int = 0) -> Batch:
    width = max(len(w.tokens) for w in windows) - 1
    inputs = np.full((len(windows), width), pad_id, dtype=np.int64)
    labels = np.full((len(windows), width), IGNORE, dtype=np.int64)
    attention = np.zeros((len(windows), width), dtype=np.int64)
    for row, w in enumerate(windows):
        m = len(w.tokens) - 1
        inputs[row, :m] = w.tokens[:-1]
        attention[row, :m] = 1
        target = w.tokens[1:].copy()
        target[: w.score_from] = IGNORE
        if w.mask is not None:
            target[np.asarray(w.mask) == 0] = IGNORE
        labels[row, :m] = target
    flat = np.flatnonzero(labels.reshape(-1) != IGNORE)
    return Batch(input_ids=torch.from_numpy(inputs),
                 attention_mask=None if attention.all() else torch.from_numpy(attention),
                 positions=torch.from_numpy(flat), labels=torch.from_numpy(labels.reshape(-1)[flat]))


class Scorer:
    """Scores windows with one model: per-owner summed NLL (float64) and scored-token counts."""

    def __init__(self, model: torch.nn.Module, *, chunk_elements: int = 1 << 27) -> None:
        lm: Any = model.eval()  # a transformers model: base_model and the embedding getters are not nn.Module's
        self.model = lm
        self.device = next(model.parameters()).device
        self.body: Any = lm.base_model
        self.head: Any = lm.get_output_embeddings()
        vocab = lm.get_input_embeddings().num_embeddings
        self.chunk_tokens = max(1, chunk_elements // vocab)  # fp32 logits of one chunk: chunk_elements * 4 B
        self.split_head = self.head is not None and self.body is not model and self._head_matches()

    @torch.no_grad()
    def _head_matches(self) -> bool:
        """Whether head(body(x)) is the model's logits (true for BLOOM, GPT-2, Llama...; not with soft-capping)."""
        probe = torch.arange(1, 9, device=self.device)[None] % self.model.get_input_embeddings().num_embeddings
        full = self.model(input_ids=probe, use_cache=False).logits.float()
        split = self.head(self.body(input_ids=probe, use_cache=False).last_hidden_state).float()
        return full.shape == split.shape and torch.allclose(full, split, rtol=1e-3, atol=1e-3 * float(full.abs().max()))

    @torch.no_grad()
    def hidden(self, batch: Batch) -> torch.Tensor:
        """The last hidden states at the scored positions [k, H] (or logits [k, V] without a split head)."""
        ids = batch.input_ids.to(self.device, non_blocking=True)
        mask = None if batch.attention_mask is None else batch.attention_mask.to(self.device, non_blocking=True)
        positions = batch.positions.to(self.device, non_blocking=True)
        if self.split_head:
            out = self.body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        else:
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        return out.reshape(-1, out.shape[-1]).index_select(0, positions)

    @torch.no_grad()
    def batch_nll(self, batch: Batch) -> torch.Tensor:
        """Summed NLL of each row of the batch [b] (float64, on the device).

        Per-token NLLs are placed into a zero grid [b, L] and summed by row: a fixed reduction, no atomics,
        so a GPU gives the same sums on every run (``index_add_`` would not).
        """
        rows = self.hidden(batch)
        labels = batch.labels.to(self.device, non_blocking=True)
        token_nll = torch.empty(rows.shape[0], dtype=torch.float32, device=self.device)
        for lo in range(0, rows.shape[0], self.chunk_tokens):
            chunk = rows[lo:lo + self.chunk_tokens]
            logits = (self.head(chunk) if self.split_head else chunk).float()  # [c, V] fp32
            token_nll[lo:lo + self.chunk_tokens] = F.cross_entropy(logits, labels[lo:lo + self.chunk_tokens],
                                                                   reduction="none")
        grid = torch.zeros(batch.input_ids.numel(), dtype=torch.float64, device=self.device)
        grid[batch.positions.to(self.device, non_blocking=True)] = token_nll.double()
        return grid.view(batch.input_ids.shape).sum(1)

    def score(self, windows: Sequence[Window], n_owners: int, *, batch_size: int = 8,
              progress=None) -> tuple[np.ndarray, np.ndarray]:
        """(summed NLL in nats [n_owners] float64, scored tokens [n_owners] int64) over ``windows``.

        ``progress``: a tqdm-like object advanced by the tokens scored in each batch.
        """
        window_nll = torch.zeros(len(windows), dtype=torch.float64, device=self.device)
        for index in batches(windows, batch_size):
            batch = collate([windows[i] for i in index])
            if len(batch.positions):
                window_nll[torch.tensor(index, device=self.device)] = self.batch_nll(batch)
            if progress is not None:
                progress.update(len(batch.positions))
        owners = np.array([w.owner for w in windows], dtype=np.int64)
        nll = np.zeros(n_owners, dtype=np.float64)
        np.add.at(nll, owners, window_nll.cpu().numpy())  # in window order: the same sum whatever the batching
        tokens = np.zeros(n_owners, dtype=np.int64)
        np.add.at(tokens, owners, np.array([w.scored for w in windows], dtype=np.int64))
        return nll, tokens


@dataclass(frozen=True)
class Sliding:
    """How a long document is scored: windows of ``context`` tokens at most, advancing ``stride`` tokens."""

    context: int
    stride: int


def score_documents(scorer: Scorer, docs: Sequence[Sequence[int]], start_id: int, sliding: Sliding, *,
                    batch_size: int = 8, progress: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Per document: (summed NLL of its tokens [n] float64, its token count [n]) under the module's convention."""
    windows = windows_for_documents(docs, start_id, sliding.context, sliding.stride)
    return scorer.score(windows, len(docs), batch_size=batch_size, progress=progress)


def score_sequences(scorer: Scorer, sequences: np.ndarray | torch.Tensor, *, loss_mask=None,
                    batch_size: int = 8, progress=None) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence of ``[n, L + 1]`` tokens (Megatron samples of seq_length + 1): predict tokens 1..L from the
    ones before them; ``loss_mask`` ``[n, L]`` (0: not scored) as in training. Returns (summed NLL [n] float64,
    scored tokens [n]); a sample's mean loss is their ratio."""
    seqs = np.asarray(sequences.cpu() if isinstance(sequences, torch.Tensor) else sequences, dtype=np.int64)
    masks = None if loss_mask is None else np.asarray(
        loss_mask.cpu() if isinstance(loss_mask, torch.Tensor) else loss_mask)
    windows = [Window(seqs[i], 0, i, None if masks is None else masks[i]) for i in range(len(seqs))]
    return scorer.score(windows, len(seqs), batch_size=batch_size, progress=progress)
