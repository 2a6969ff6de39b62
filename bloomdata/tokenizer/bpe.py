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

Two trainers learn the same tokenizer (``trainer``):

- ``memory``: HF's BpeTrainer over the sample's text in this process. It peaks at 5-30 bytes of RAM per
  byte of training text, so samples are capped at ``MAX_SAFE_BUDGET`` unless explicitly allowed.
- ``counts``: the sample's words are counted in parallel on the build's Dask placement and spilled to disk
  (``bloomdata.tokenizer.counting``), then ``bloomdata.tokenizer.merges`` learns HF's merges from the
  counts: memory follows the distinct words, not the text, and ``max_memory`` bounds it. For any sample
  the in-memory trainer can hold, ``tokenizer.json`` is byte-identical.
- ``auto`` (the default) takes ``counts`` when the in-memory trainer would need more than ``max_memory``
  (without one: when the budget is over ``MAX_SAFE_BUDGET``), so today's default runs stay in memory.

The output directory loads with ``transformers.AutoTokenizer.from_pretrained`` (``BloomTokenizerFast``) and
with ``Tokenizer.from_file``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from bloomdata import durable
from bloomdata.config_loader import DASHBOARD, cli_option
from bloomdata.disk import disk_full, is_disk_full
from bloomdata.errors import BloomstackError
from bloomdata.readers import ShardBytes, SourceConfig, shard_bytes_field, sources_field
from bloomdata.tokenizer.split import BLOOM_SPLIT_PATTERN
from bloomdata.units import parse_bytes

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
                         description="language sampling exponent: p_lang ∝ bytes_lang ** alpha "
                                     "(1: natural, 0: uniform)")
    byte_budget: Annotated[int, BeforeValidator(parse_bytes)] = Field(
        default=100_000_000, ge=1, description="UTF-8 text to train on, e.g. 50MB or 1GiB")
    seed: int = Field(default=0, description="sampling seed (which documents are drawn)")
    min_frequency: int = Field(default=2, ge=0, description="pairs seen fewer times are never merged")
    allow_large_budget: bool = Field(
        default=False, description=f"memory trainer: allow byte_budget > {MAX_SAFE_BUDGET:,} (it needs ~30x the "
                                   "text in RAM)")
    trainer: Literal["auto", "counts", "memory"] = Field(
        default="auto", description="memory: HF's trainer over the text in this process; counts: count words in "
                                    "parallel, spill to disk, learn the same merges from the counts; auto: counts "
                                    "when the memory trainer would need more than max_memory (without it: when "
                                    f"byte_budget > {MAX_SAFE_BUDGET:,})")
    max_memory: Annotated[int | None, BeforeValidator(parse_bytes)] = Field(
        default=None, ge=1, json_schema_extra=cli_option(metavar="BYTES"),
        description="RAM the training may use, all processes together (e.g. 1GB): auto picks the trainer by it, "
                    "the counting workers spill to stay under it")
    workers: int = Field(default=2, ge=0, description="counts trainer: LocalCluster worker processes (0: in-process)")
    scheduler: str | None = Field(default=None, description="counts trainer: tcp://host:port of a Dask scheduler",
                                  json_schema_extra=cli_option(metavar="ADDR"))
    dashboard: bool = Field(default=False, description="counts trainer: " + DASHBOARD)
    shard_bytes: ShardBytes = shard_bytes_field()
    keep_work: bool = Field(default=False, description="counts trainer: keep OUT/word_counts after training")
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


def tokenizer_from_merges(vocab: list[str], merges: list[tuple[int, int]]) -> Tokenizer:
    """BLOOM's pipeline around a BPE model of ``vocab`` (id -> token) and ``merges`` (pairs of ids, in order),
    with the special tokens added as the trainer adds them: the tokenizer HF's trainer returns for them."""
    tok = bloom_tokenizer()
    tok.model = models.BPE(vocab={token: i for i, token in enumerate(vocab)},
                           merges=[(vocab[a], vocab[b]) for a, b in merges], unk_token=None, fuse_unk=False)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    _check_special_ids(tok)
    return tok


def _check_special_ids(tok: Tokenizer) -> None:
    for i, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != i:  # cannot happen with the trainers here; checked because ids are ABI
            raise BloomstackError(f"trained tokenizer put {token} at id {tok.token_to_id(token)}, expected {i}")


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
    _check_special_ids(tok)
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
    trainer: Literal["memory", "counts"] = "memory"
    distinct_words: int | None = None  # counts trainer: the words the merges were learned from
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
                        then="run the same command again: "
                             "the same sample and settings train the same tokenizer") from None
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
        files[REPORT_FILE] = durable.json_text(report.model_dump(exclude={"tokenizer_identity"}, exclude_none=True),
                                               indent=2)
    files["tokenizer.json"] = tok.to_str(pretty=True)  # the bytes Tokenizer.save writes
    return files


def memory_trainer_bytes(byte_budget: int) -> int:
    """RAM the in-memory trainer may need for a sample of ``byte_budget`` bytes (the worst corpora seen)."""
    return byte_budget * TRAINER_BYTES_PER_BYTE


def choose_trainer(config: TokenizerTrainConfig) -> Literal["memory", "counts"]:
    """``config.trainer``, with ``auto`` resolved: counts when the in-memory trainer would need more than
    ``max_memory`` (without one: when the budget is over ``MAX_SAFE_BUDGET``)."""
    if config.trainer != "auto":
        return config.trainer
    if config.max_memory is None:
        return "memory" if config.byte_budget <= MAX_SAFE_BUDGET else "counts"
    return "memory" if memory_trainer_bytes(config.byte_budget) <= config.max_memory else "counts"


def check_budget(config: TokenizerTrainConfig) -> None:
    """Refuse (or, when allowed, warn about) samples the in-memory trainer would need too much RAM for; the
    counts trainer takes any budget."""
    if config.byte_budget <= MAX_SAFE_BUDGET or choose_trainer(config) == "counts":
        return
    need_gb = memory_trainer_bytes(config.byte_budget) / 1e9
    msg = (f"byte_budget {config.byte_budget:,} B exceeds {MAX_SAFE_BUDGET:,} B: the in-memory BPE trainer would "
           f"need ~{need_gb:.0f} GB of RAM ({TRAINER_BYTES_PER_BYTE}x the text)")
    if not config.allow_large_budget:
        raise BloomstackError(msg + "; lower byte_budget, set trainer to counts or auto, or set allow_large_budget",
                              keys=["byte_budget", "trainer", "allow_large_budget"])
    warnings.warn(msg, stacklevel=2)


def train_tokenizer(config: TokenizerTrainConfig, client: Any = None) -> TokenizerReport:
    """Sample, train and save with the chosen trainer; returns the training report (also written to
    training_report.json). ``client``: a ``distributed.Client`` for the counts trainer."""
    check_budget(config)
    if choose_trainer(config) == "counts":
        return _train_counts(config, client)
    from bloomdata.tokenizer.sampling import draw_sample

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


def _train_counts(config: TokenizerTrainConfig, client: Any) -> TokenizerReport:
    """The counts trainer: count the sample's words (resumable), learn the merges, save."""
    from bloomdata.tokenizer.counting import WORK_NAME, count_words
    from bloomdata.tokenizer.merges import learn_from_counts

    t0 = time.perf_counter()
    counts = count_words(config, client)
    t1 = time.perf_counter()
    work = os.path.join(config.out_dir, WORK_NAME)
    learned = learn_from_counts(work, counts, list(SPECIAL_TOKENS), config, _merge_bar(config))
    tok = tokenizer_from_merges(learned.vocab, learned.merges)
    t2 = time.perf_counter()
    report = TokenizerReport(
        languages=counts.languages, bytes_available=counts.bytes_available, probabilities=counts.probabilities,
        bytes_quota=counts.bytes_quota, bytes_drawn=counts.bytes_drawn, docs_drawn=counts.docs_drawn,
        total_bytes_drawn=sum(counts.bytes_drawn.values()), seed=config.seed, alpha=config.alpha,
        byte_budget=config.byte_budget, min_frequency=config.min_frequency, vocab_size_requested=config.vocab_size,
        vocab_size=tok.get_vocab_size(), sampling_seconds=round(t1 - t0, 3), training_seconds=round(t2 - t1, 3),
        wall_seconds=round(t2 - t0, 3), trainer="counts", distinct_words=counts.words)
    save_tokenizer(tok, config.out_dir, report)
    if not config.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    report.tokenizer_identity = tokenizer_identity(config.out_dir)
    return report


def _merge_bar(config: TokenizerTrainConfig) -> Any:
    """A progress callback for the merge learner (merges so far), or None."""
    if not config.show_progress:
        return None
    from tqdm import tqdm

    bar = tqdm(total=config.vocab_size, desc="learning merges", unit=" merges", file=sys.stderr, mininterval=1.0)
    return lambda done: bar.update(done - bar.n)


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


def eod_id(tok: Any, token: str = EOD_TOKEN) -> int:
    """The end-of-document id appended after every document (``</s>``: 2 for BLOOM; ``<|endoftext|>`` for GPT-2),
    of a ``Tokenizer`` or an encoder (``bloomdata.tokenizer.encoder``): anything with ``token_to_id``."""
    token_id = tok.token_to_id(token)
    if token_id is None:
        raise BloomstackError(f"the tokenizer has no {token} token; use a BLOOM-style tokenizer "
                             "(bloomdata train-tokenizer), add it as a special token or set eod_token",
                              keys=["eod_token"])
    return int(token_id)
