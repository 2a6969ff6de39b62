"""Megatron-LM's ``tools/preprocess_data.py`` as ``bloomdata build`` runs: ``<prefix>_<key>_document.bin/.idx``,
byte-identical to Megatron-LM's on the same input, tokenized by the build's own path (its shards, workers,
resumability and encoder).

``MegatronArgs`` is what a preprocess_data command line says; ``preprocess`` runs one build per ``--json-keys`` key
(the key is the build's text field; every document is one output) in a work directory beside the outputs,
``<prefix>_<key>_document.build/`` (its summary, rejects and shards: a rerun of the same command reuses them), then
publishes the build's ``.bin/.idx`` under Megatron's names (hard links, atomically replaced).

The tokenizer: ``HuggingFaceTokenizer`` with ``--tokenizer-model DIR`` (a tokenizer.json; eod is its eos token) or
``GPT2BPETokenizer`` with ``--vocab-file``/``--merge-file`` (GPT-2's byte-level BPE and split, written once as a
tokenizer.json in the work directory; eod is ``<|endoftext|>``). Rows are read strictly: a row Megatron-LM would
fail on (no such key, not JSON) is an error naming file:line, and so is an empty text (Megatron-LM writes a
document without tokens there; our datasets hold one sequence per document).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bloomdata import durable
from bloomdata.build.config import BuildConfig
from bloomdata.build.run import run_build
from bloomdata.build.summary import BuildSummary
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import data_file_path, index_file_path
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.encoder import EncoderKind

TOKENIZER_TYPES = ("HuggingFaceTokenizer", "GPT2BPETokenizer")
GPT2_EOD = "<|endoftext|>"
OUTPUT = "data"  # the build's output name inside a work directory


@dataclass
class MegatronArgs:
    """The preprocess_data flags we act on (the others it has are refused by the command line)."""

    input: str
    output_prefix: str
    workers: int
    tokenizer_type: str
    json_keys: list[str] = field(default_factory=lambda: ["text"])
    tokenizer_model: str | None = None
    vocab_file: str | None = None
    merge_file: str | None = None
    append_eod: bool = False
    split_sentences: bool = False
    keep_newlines: bool = False
    lang: str = "english"
    progress: bool = True
    encoder: EncoderKind = "auto"  # not preprocess_data.py's: bloomdata.tokenizer.encoder.load_encoder's kind


def _eos_of(directory: Path) -> str:
    """A HF tokenizer directory's eos token (tokenizer_config.json, else special_tokens_map.json), as transformers
    reads it and Megatron-LM's HuggingFaceTokenizer appends."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        found = durable.read_json(directory / name)
        eos = found.get("eos_token") if isinstance(found, dict) else None
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            return eos
    raise BloomstackError(f"{directory}: no eos_token in tokenizer_config.json or special_tokens_map.json; "
                          "--append-eod needs one")


def gpt2_tokenizer(vocab_file: str, merge_file: str, out: Path) -> Path:
    """GPT-2's tokenizer from its vocab.json and merges.txt, as a tokenizer.json in ``out``: byte-level BPE behind
    GPT-2's split regex (``ByteLevel(use_regex=True)``), no special tokens (Megatron-LM's GPT2 tokenizer reads
    ``<|endoftext|>`` in a text as plain text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    for path, flag in ((vocab_file, "--vocab-file"), (merge_file, "--merge-file")):
        if not os.path.isfile(path):
            raise BloomstackError(f"{flag} {path}: no such file")
    tok = Tokenizer(models.BPE.from_file(vocab_file, merge_file))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    out.mkdir(parents=True, exist_ok=True)
    durable.write_text(out / "tokenizer.json", tok.to_str())
    return out / "tokenizer.json"


def _tokenizer(args: MegatronArgs, work: Path) -> tuple[str, str]:
    """(tokenizer path, eod token) of the command line."""
    if args.tokenizer_type == "HuggingFaceTokenizer":
        if not args.tokenizer_model or not os.path.isdir(args.tokenizer_model):
            raise BloomstackError(f"--tokenizer-model {args.tokenizer_model}: give the directory of a Hugging Face "
                                  "tokenizer (tokenizer.json); hub names are not downloaded")
        model = Path(args.tokenizer_model)
        return str(model), _eos_of(model) if args.append_eod else "</s>"
    if args.tokenizer_type == "GPT2BPETokenizer":
        if not args.vocab_file or not args.merge_file:
            raise BloomstackError("--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file")
        return str(gpt2_tokenizer(args.vocab_file, args.merge_file, work / "gpt2-tokenizer")), GPT2_EOD
    raise BloomstackError(f"--tokenizer-type {args.tokenizer_type}: not supported by bloomdata megatron-preprocess "
                          f"(supported: {', '.join(TOKENIZER_TYPES)})")


def _publish(prefix: str, target: str) -> None:
    """``prefix.bin/.idx`` under ``target.bin/.idx``: hard links (a copy across filesystems), each put in place with
    one rename, the .idx last."""
    for path_of in (data_file_path, index_file_path):
        src, dst = path_of(prefix), path_of(target)
        tmp = f"{dst}{durable.TEMP_INFIX}{os.getpid()}"
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def preprocess(args: MegatronArgs) -> dict[str, BuildSummary]:
    """One build per json key; returns each key's summary (its outputs published under Megatron's names)."""
    summaries = {}
    for key in dict.fromkeys(args.json_keys):
        target = f"{args.output_prefix}_{key}_document"
        work = Path(f"{target}.build")
        tokenizer, eod = _tokenizer(args, work)
        config = BuildConfig(
            sources=[SourceConfig(paths=[args.input], text_field=key, format="jsonl")], tokenizer=tokenizer,
            out_dir=str(work), append_eod=args.append_eod, eod_token=eod, split_by="none", output_name=OUTPUT,
            workers=args.workers, strict=True, progress=args.progress, encoder=args.encoder)
        summaries[key] = run_build(config)
        _publish(str(work / OUTPUT), target)
    return summaries


def describe(summaries: dict[str, BuildSummary], prefix: str) -> str:
    lines = []
    for key, s in summaries.items():
        state = "up to date" if s.up_to_date else f"{s.wall_seconds:.1f} s"
        lines.append(f"{prefix}_{key}_document.bin/.idx: {s.documents:,} documents, {s.tokens:,} tokens ({state}; "
                     f"work files in {s.out_dir})")
    return "\n".join(lines)


def preprocess_sentences(args: MegatronArgs) -> str:
    """``--split-sentences``: ``<prefix>_<key>_sentence.bin/.idx`` (bloomdata.build.megatron_sentences); one line
    per key saying what was written."""
    from bloomdata.build.megatron_sentences import sentence_splitter, write_sentences

    splitter = sentence_splitter(args.lang, args.keep_newlines)  # before anything is written: NLTK and its data
    keys = list(dict.fromkeys(args.json_keys))
    targets = {key: f"{args.output_prefix}_{key}_sentence" for key in keys}
    tokenizer, eod = _tokenizer(args, Path(f"{args.output_prefix}_sentence.build"))
    documents = write_sentences(args.input, targets, tokenizer, eod if args.append_eod else None, splitter,
                                args.encoder)
    return "\n".join(f"{target}.bin/.idx: {documents:,} documents, split into sentences"
                     for target in targets.values())
