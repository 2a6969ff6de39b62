"""The BLOOM tokenizer: byte-level BPE configured exactly as BigScience's, trained on an alpha-weighted sample.

Configuration (the published BLOOM ``tokenizer.json``; docs/tokenizer.md, "Configuration"):

- no normalizer (NFKC was rejected: it merges ``2²`` with ``22`` for <1% fertility gain);
- pre-tokenizer ``Sequence[Split(BLOOM_SPLIT_PATTERN, Isolated), ByteLevel(add_prefix_space=False,
  trim_offsets=True, use_regex=False)]``. The pattern is Oniguruma syntax: ``[^(\\s|[.,!?…。，、।۔،])]`` is ONE
  negated class, so pieces break at exactly 39 code points (25 whitespace, 14 punctuation); there is no
  digit splitting and no English contraction rule;
- BPE over the 256-symbol byte alphabet (``ByteLevel.alphabet()`` is the trainer's initial alphabet), so
  every string encodes without ``<unk>`` and ``decode(encode(x)) == x`` for any script, seen or not;
- special tokens ``<unk>=0 <s>=1 </s>=2 <pad>=3``; encoding adds none (Megatron appends ``</s>`` as EOD);
- ByteLevel decoder, ByteLevel(trim_offsets=False) post-processor (offsets only).

Training memory: HF's BpeTrainer peaks at ~30 bytes of RAM per byte of training text, so samples are
capped at ``MAX_SAFE_BUDGET`` unless explicitly allowed. The output directory loads with
``transformers.AutoTokenizer.from_pretrained`` (``BloomTokenizerFast``) and with ``Tokenizer.from_file``.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from bloomdata import durable
from bloomdata.config_loader import cli_option
from bloomdata.disk import disk_full, is_disk_full
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig, sources_field
from bloomdata.units import parse_bytes

BLOOM_SPLIT_PATTERN = " ?[^(\\s|[.,!?…。，、।۔،])]+"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0..3, in this order
EOD_TOKEN = "</s>"
BLOOM_VOCAB_SIZE = 250_680
MAX_SAFE_BUDGET = 500_000_000  # bytes of sample text; x30 in the trainer ~ 15 GB of RAM
TRAINER_BYTES_PER_BYTE = 30


class TokenizerTrainConfig(BaseModel):
    """Everything that determines a trained tokenizer (shared by the CLI and the Prefect flows)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceConfig] = sources_field()
    out_dir: str = Field(description="directory to write tokenizer.json and friends into",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    vocab_size: int = Field(default=BLOOM_VOCAB_SIZE, ge=len(SPECIAL_TOKENS) + 256,
                            description="tokens incl. specials and the 256 bytes (BLOOM: 250,680)")
    alpha: float = Field(default=0.3, ge=0.0, le=1.0,
                         description="language sampling exponent: p_lang ∝ bytes_lang ** alpha (1: natural, 0: uniform)")
    byte_budget: Annotated[int, BeforeValidator(parse_bytes)] = Field(
        default=100_000_000, ge=1, description="UTF-8 text to train on, e.g. 50MB or 1GiB")
    seed: int = Field(default=0, description="sampling seed (which documents are drawn)")
    min_frequency: int = Field(default=2, ge=0, description="pairs seen fewer times are never merged")
    allow_large_budget: bool = Field(
        default=False, description=f"allow byte_budget > {MAX_SAFE_BUDGET:,} (the trainer needs ~30x the text in RAM)")
    show_progress: bool = Field(default=True, description="progress bars on stderr",
                                json_schema_extra=cli_option("--progress", off=["--quiet"]))


def bloom_tokenizer() -> Tokenizer:
    """An untrained tokenizer with BLOOM's pipeline (normalizer, pre-tokenizer, decoder, post-processor)."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(BLOOM_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_from_texts(texts: Iterable[str], vocab_size: int = BLOOM_VOCAB_SIZE, min_frequency: int = 2,
                     show_progress: bool = False, length: int | None = None) -> Tokenizer:
    """Train BLOOM's byte-level BPE on an iterable of documents (held by the trainer: mind the memory)."""
    tok = bloom_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: nothing is ever <unk>
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    for i, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != i:  # cannot happen with the trainer above; checked because ids are ABI
            raise BloomstackError(f"trained tokenizer put {token} at id {tok.token_to_id(token)}, expected {i}")
    return tok


REPORT_FILE = "training_report.json"


class TokenizerReport(BaseModel):
    """``training_report.json``: how the sample was drawn and what was trained; what ``train_tokenizer`` returns."""

    languages: list[str]
    bytes_available: dict[str, int]  # language -> UTF-8 bytes of text in the sources
    probabilities: dict[str, float]  # language -> sampling probability (alpha-weighted)
    bytes_quota: dict[str, int]
    bytes_drawn: dict[str, int]
    docs_drawn: dict[str, int]
    total_bytes_drawn: int
    seed: int
    alpha: float
    byte_budget: int
    min_frequency: int
    vocab_size_requested: int
    vocab_size: int
    sampling_seconds: float
    training_seconds: float
    wall_seconds: float
    tokenizer_identity: str | None = None  # sha256 of tokenizer.json (not in the file: it hashes that file's sibling)


def read_training_report(tokenizer_dir: str | os.PathLike[str]) -> TokenizerReport | None:
    """The directory's training_report.json; None when it has none (a tokenizer trained elsewhere) or one this
    version does not read."""
    record = durable.read_json(Path(tokenizer_dir) / REPORT_FILE)
    try:
        return TokenizerReport.model_validate(record) if isinstance(record, dict) else None
    except ValueError:  # pydantic's ValidationError
        return None


def save_tokenizer(tok: Tokenizer, out_dir: str | os.PathLike[str], report: TokenizerReport | None = None) -> Path:
    """Write a transformers-loadable directory: tokenizer.json, tokenizer_config.json,
    special_tokens_map.json and (when given) training_report.json.

    Every file is written atomically (``bloomdata.durable``), tokenizer.json last: callers take its presence
    as "the directory is complete" (the demo reuses such a tokenizer). A full disk raises ``DiskFull`` naming the
    bytes of every file."""
    files = {name: text.encode("utf-8") for name, text in tokenizer_files(tok, report).items()}
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():  # in order: tokenizer.json last
            durable.write_bytes(out / name, data)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise disk_full(out, f"the tokenizer ({', '.join(files)})", sum(map(len, files.values())), key="out_dir",
                        then="run the same command again: the same sample and settings train the same tokenizer") from None
    return out


def tokenizer_files(tok: Tokenizer, report: TokenizerReport | None = None) -> dict[str, str]:
    """The text of each file ``save_tokenizer`` writes, in writing order (tokenizer.json last)."""
    unk, bos, eos, pad = SPECIAL_TOKENS
    special_map = {"bos_token": bos, "eos_token": eos, "unk_token": unk, "pad_token": pad}
    config = {
        "tokenizer_class": "BloomTokenizerFast",
        "padding_side": "left",
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        **special_map,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                     "single_word": False, "special": True}
            for i, t in enumerate(SPECIAL_TOKENS)
        },
        # no model_max_length: ALiBi has no trained position limit
    }
    files = {"tokenizer_config.json": durable.json_text(config, indent=2),
             "special_tokens_map.json": durable.json_text(special_map, indent=2)}
    if report is not None:
        files[REPORT_FILE] = durable.json_text(report.model_dump(exclude={"tokenizer_identity"}), indent=2)
    files["tokenizer.json"] = tok.to_str(pretty=True)  # the bytes Tokenizer.save writes
    return files


def check_budget(config: TokenizerTrainConfig) -> None:
    """Refuse (or, when allowed, warn about) samples the BPE trainer would need too much RAM for."""
    if config.byte_budget <= MAX_SAFE_BUDGET:
        return
    need_gb = config.byte_budget * TRAINER_BYTES_PER_BYTE / 1e9
    msg = (f"byte_budget {config.byte_budget:,} B exceeds {MAX_SAFE_BUDGET:,} B: the BPE trainer would "
           f"need ~{need_gb:.0f} GB of RAM ({TRAINER_BYTES_PER_BYTE}x the text)")
    if not config.allow_large_budget:
        raise BloomstackError(msg + "; lower byte_budget or set allow_large_budget",
                              keys=["byte_budget", "allow_large_budget"])
    warnings.warn(msg, stacklevel=2)


def train_tokenizer(config: TokenizerTrainConfig) -> TokenizerReport:
    """Sample, train and save; returns the training report (also written to training_report.json)."""
    from bloomdata.tokenizer.sampling import draw_sample

    check_budget(config)
    t0 = time.perf_counter()
    sample = draw_sample(config.sources, config.alpha, config.byte_budget, config.seed, config.show_progress)
    t1 = time.perf_counter()
    n_docs = sum(sample.docs.values())
    tok = train_from_texts(sample.iter_texts(), config.vocab_size, config.min_frequency,
                           config.show_progress, length=n_docs)
    t2 = time.perf_counter()
    report = TokenizerReport(
        languages=sorted(sample.texts),
        bytes_available=sample.sizes,
        probabilities={k: round(v, 6) for k, v in sample.probabilities.items()},
        bytes_quota=sample.quotas,
        bytes_drawn=sample.drawn,
        docs_drawn=sample.docs,
        total_bytes_drawn=sum(sample.drawn.values()),
        seed=config.seed,
        alpha=config.alpha,
        byte_budget=config.byte_budget,
        min_frequency=config.min_frequency,
        vocab_size_requested=config.vocab_size,
        vocab_size=tok.get_vocab_size(),
        sampling_seconds=round(t1 - t0, 3),
        training_seconds=round(t2 - t1, 3),
        wall_seconds=round(t2 - t0, 3),
    )
    save_tokenizer(tok, config.out_dir, report)
    report.tokenizer_identity = tokenizer_identity(config.out_dir)
    return report


def _tokenizer_file(path_or_dir: str | os.PathLike[str]) -> Path:
    path = Path(path_or_dir)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise BloomstackError(f"tokenizer not found: {file} (give a tokenizer.json or a directory holding "
                             "one; train one with `bloomdata train-tokenizer`)")
    return file


def load_tokenizer(path_or_dir: str | os.PathLike[str]) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from a tokenizer.json file or a directory holding one."""
    file = _tokenizer_file(path_or_dir)
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises plain Exception for bad JSON / unknown fields
        raise BloomstackError(f"{file}: not a valid tokenizer.json ({exc})") from None


def tokenizer_identity(path_or_dir: str | os.PathLike[str]) -> str:
    """sha256 (hex) of the tokenizer.json bytes: a cache key that changes whenever the tokenizer does."""
    return hashlib.sha256(_tokenizer_file(path_or_dir).read_bytes()).hexdigest()


def eod_id(tok: Tokenizer) -> int:
    """The end-of-document id appended after every document (``</s>``; 2 for BLOOM)."""
    token_id = tok.token_to_id(EOD_TOKEN)
    if token_id is None:
        raise BloomstackError(f"the tokenizer has no {EOD_TOKEN} token; use a BLOOM-style tokenizer "
                             "(bloomdata train-tokenizer) or add it as a special token")
    return token_id
