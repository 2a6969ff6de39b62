"""Held-out text: each blend dataset's validation documents, decoded back to text (the evaluate stage's input).

``bloomtrain evaluate`` scores documents (text, re-tokenized by each model's own tokenizer), while the build
stores token ids. The held-out documents of a dataset are those of its *validation range*: the blend's
``split`` (``"90,10,0"``) or BLOOM's ``valid_range`` (``"0.95:1"``), turned into a ``[begin, end)`` range of
the dataset's documents (``BlendSpec.split_of(Split.VALID)``) by ``bloomdata.megatron.splits.split_range`` with the
trainer's ``compat`` arithmetic,
the same call that places the trainer's training and validation samples. So no document of the range is in
any training sample (training draws from the train range only), and the documents are taken in document
order (the build's plan order), the first ``max_docs`` of the range when capped.

Each document's token ids are decoded with the build's tokenizer, the EOD token the build appended dropped.
bloomdata's tokenizer is byte-level BPE with no normalizer, so the decoded text is exactly the text the build
read from the corpus row (tests check this against the corpus itself).

Trade-off: decoding instead of going back to the corpus rows. The datasets and the tokenizer are all that is
needed (the corpus may have moved since the build, and the build's rejects and shard plan need not be
replayed to learn which row became document i), at the cost of relying on the tokenizer's round trip: a
normalizing tokenizer would give the normalized text. The texts are written as JSON lines
(``heldout/<name>.jsonl``, one ``{"text", "doc"}`` per document, ``doc`` its index in the dataset), which
``bloomtrain evaluate --data NAME=FILE`` reads as any other input, so a person can score another model on
the very same text.

``heldout_files`` does both and returns one typed ``HeldOutFile`` per dataset (the evaluate flow's task).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from bloomdata import durable
from bloomdata.blend.spec import load_blend_spec
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import Compat, Split, split_range
from bloomdata.tokenizer.bpe import eod_id, load_tokenizer


@dataclass
class HeldOut:
    """The held-out documents of one blend dataset."""

    name: str  # the blend dataset's name (the build's output name: its language)
    prefix: str
    begin: int  # the validation range of the dataset's documents, [begin, end)
    end: int
    texts: list[str]  # documents begin, begin + 1, ... (the first max_docs of the range)


class HeldOutFile(BaseModel):
    """Where one dataset's held-out documents were written, and which documents they are."""

    name: str  # the blend dataset's name (a language in the pipeline)
    prefix: str
    valid_range: tuple[int, int]  # [begin, end) of the dataset's documents
    docs: int  # documents written (the first max_docs of the range when capped)
    path: str  # the JSON-lines file


def heldout_documents(blend_yaml: str, tokenizer: str, compat: Compat = Compat.CORE,
                      max_docs: int | None = None) -> list[HeldOut]:
    """The validation documents of every dataset of ``blend_yaml``, as text, in the blend's dataset order."""
    spec = load_blend_spec(blend_yaml)
    split = spec.split_of(Split.VALID)
    if split is None:
        raise BloomstackError(f"{blend_yaml}: the blend has no validation split (neither split nor valid_range); "
                              "set blend.split (e.g. 90,10,0) or give the evaluate stage its own sources")
    tok = load_tokenizer(tokenizer)
    eod = eod_id(tok)
    out = []
    for d in spec.datasets:
        dataset = IndexedDataset(d.prefix)
        if len(dataset) != dataset.num_documents:
            raise BloomstackError(f"{d.prefix}: {len(dataset)} sequences in {dataset.num_documents} documents; "
                                  "held-out documents need one sequence per document (a build without sentence "
                                  "splitting, as `bloomdata build` writes)")
        begin, end = split_range(split, Split.VALID, len(dataset), compat)
        if end <= begin:
            raise BloomstackError(f"{blend_yaml}: dataset {d.name} ({d.prefix}) has no validation documents under "
                                  f"split {split!r} ({len(dataset)} documents); use a larger valid share or more data")
        stop = end if max_docs is None else min(end, begin + max_docs)
        texts = []
        for i in range(begin, stop):
            ids = dataset[i].tolist()
            if ids and ids[-1] == eod:
                ids.pop()  # the build's document separator, not part of the text
            texts.append(tok.decode(ids, skip_special_tokens=False))
        out.append(HeldOut(d.name, d.prefix, begin, end, texts))
    return out


def file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] + ".jsonl"


def write_heldout(held: list[HeldOut], out_dir: str | Path) -> dict[str, Path]:
    """``out_dir/<name>.jsonl`` per dataset (atomic writes); returns name -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for h in held:
        lines = (json.dumps({"text": t, "doc": h.begin + k}, ensure_ascii=False) + "\n" for k, t in enumerate(h.texts))
        durable.write_text(out / file_name(h.name), "".join(lines))
        paths[h.name] = out / file_name(h.name)
    return paths


def heldout_files(blend_yaml: str, tokenizer: str, out_dir: str | Path, compat: Compat = Compat.CORE,
                  max_docs: int | None = None) -> list[HeldOutFile]:
    """Each blend dataset's validation documents written as ``out_dir/<name>.jsonl``, described."""
    held = heldout_documents(blend_yaml, tokenizer, compat, max_docs)
    paths = write_heldout(held, out_dir)
    return [HeldOutFile(name=h.name, prefix=h.prefix, valid_range=(h.begin, h.end), docs=len(h.texts),
                        path=str(paths[h.name])) for h in held]
