"""``megatron-preprocess --split-sentences [--keep-newlines]``: Megatron-LM's sentence-level datasets,
``<prefix>_<key>_sentence.bin/.idx``, one sequence per sentence and one document per input line.

As Megatron-LM's ``tools/preprocess_data.py`` (tag core_v0.16.1) does it: each text is cut into pieces of at most
1,000,000 characters, each piece split by NLTK's Punkt sentence splitter for ``--lang`` (default english), each
sentence tokenized on its own; sentences without tokens are dropped, ``--append-eod`` adds the eod token to the last
sentence of a document with tokens, and a document without tokens is kept with no sequence (megatron-core's builder
keeps it). ``--keep-newlines`` rebuilds the splitter from the same parameters with Punkt language variables whose
sentence-end pattern takes the whitespace after a sentence into it (newlines stay in the sentences).

The splitter's data: preprocess_data.py asks ``nltk.load("nltk:tokenizers/punkt/<lang>.pickle")``; NLTK 3.9 and later
load no pickle there and answer with ``PunktTokenizer(lang)``, read from the ``punkt_tab`` data
(``tokenizers/punkt_tab/<lang>/``), which is what we load too: the same English Punkt model in the form NLTK now
ships. Without NLTK or that data the command is one line naming the install (exit 2); we download nothing.

This path reads the input line by line in this process (local file or fsspec URL), not through the build's shards.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDatasetWriter, best_fitting_dtype
from bloomdata.readers import fs

MAX_PIECE = 1_000_000  # characters split at a time, as preprocess_data.py cuts a text
INSTALL = "pip install nltk && python -m nltk.downloader punkt_tab (or put punkt_tab under $NLTK_DATA)"
# Punkt's sentence-end context with the whitespace after the end taken into the sentence: what preprocess_data.py's
# --keep-newlines sets (Punkt's own pattern has \s+ before the next token and drops it between sentences)
KEEP_NEWLINES_CONTEXT = r"""
        \S*                          # some word material
        %(SentEndChars)s             # a potential sentence ending
        \s*                          # the whitespace after it, newlines included
        (?=(?P<after_tok>
            %(NonWord)s              # either other punctuation
            |
            (?P<next_tok>\S+)        # or the next word, right after that whitespace
        ))"""


def sentence_splitter(lang: str, keep_newlines: bool) -> Any:
    """NLTK's Punkt splitter for ``lang`` (``.tokenize(text) -> list[str]``); one line naming the install when NLTK or
    its punkt_tab data for ``lang`` is missing."""
    try:
        from nltk.tokenize import punkt
    except ImportError:
        raise BloomstackError(f"--split-sentences needs NLTK, which is not installed: {INSTALL}") from None
    try:
        splitter = punkt.PunktTokenizer(lang)
    except (LookupError, ValueError, OSError):
        raise BloomstackError(f"--split-sentences --lang {lang}: NLTK's Punkt data for {lang!r} "
                              f"(tokenizers/punkt_tab/{lang}/) is not installed: {INSTALL}") from None
    if not keep_newlines:
        return splitter
    lang_vars = type("KeepNewlines", (punkt.PunktLanguageVars,), {"_period_context_fmt": KEEP_NEWLINES_CONTEXT})
    return punkt.PunktSentenceTokenizer(train_text=splitter._params, lang_vars=lang_vars())


def split(splitter: Any, text: str) -> list[str]:
    """The sentences of a text, pieces of MAX_PIECE characters split one by one."""
    return [s for i in range(0, len(text), MAX_PIECE) for s in splitter.tokenize(text[i:i + MAX_PIECE])]


def _rows(path: str) -> Iterator[tuple[int, dict]]:
    """(line number, row) of a JSON-lines file, lines cut as Python's text mode cuts them (as preprocess_data.py)."""
    with io.TextIOWrapper(fs.open_input(path), encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise BloomstackError(f"{path}:{number}: not JSON ({exc}); fix or drop that row") from None
            if not isinstance(row, dict):
                raise BloomstackError(f"{path}:{number}: not a JSON object; fix or drop that row")
            yield number, row


def write_sentences(path: str, targets: dict[str, str], tokenizer_path: str, eod: str | None, splitter: Any,
                    encoder: str = "auto") -> int:
    """``targets[key].bin/.idx`` for each json key: one document per row, one sequence per sentence with tokens;
    returns the documents (rows) written."""
    from bloomdata.tokenizer.bpe import load_tokenizer
    from bloomdata.tokenizer.encoder import load_encoder

    tok = load_tokenizer(tokenizer_path)
    enc = load_encoder(tokenizer_path, encoder)  # type: ignore[arg-type]
    eod_id = None if eod is None else tok.token_to_id(eod)
    if eod is not None and eod_id is None:
        raise BloomstackError(f"{tokenizer_path}: no token {eod!r} for --append-eod")
    dtype = best_fitting_dtype(tok.get_vocab_size())
    writers = {key: IndexedDatasetWriter(target, dtype) for key, target in targets.items()}
    documents = 0
    try:
        for number, row in _rows(path):
            documents += 1
            for key, writer in writers.items():
                text = row.get(key)
                if not isinstance(text, str):
                    raise BloomstackError(f"{path}:{number}: no {key!r} text field; fix or drop that row")
                ids = [a for a in enc.encode_batch(split(splitter, text)) if len(a)]
                lengths = [len(a) for a in ids]
                tokens = [t for a in ids for t in a.tolist()]
                if tokens and eod_id is not None:
                    tokens.append(eod_id)
                    lengths[-1] += 1
                writer.add_sentences(tokens, lengths)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    for writer in writers.values():
        writer.finalize()
    return documents
