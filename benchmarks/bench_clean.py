"""`bloomdata clean` throughput per core, whole stage and per step, beside datatrove on the same text.

    python benchmarks/bench_clean.py                 # ~20 MB, 3 rounds, best of each
    python benchmarks/bench_clean.py --quick         # ~4 MB, 1 round
    python benchmarks/bench_clean.py --mb 100 --json results.json
    python benchmarks/bench_clean.py --no-datatrove --presets default roots   # the two presets side by side

Text: the sentences of tests/data/corpus (27 languages, zh without spaces) regrouped at random into 5-sentence
documents, round after round with new draws until --mb MB, then 10% exact copies (re-spaced) and 10% copies
with 2 words changed, shuffled (fixed seed): distinct documents plus the duplicates deduplication is for.

Everything runs in this one process on one core, so MB per CPU second is throughput per core (CPU seconds
are less sensitive than wall time to the load of a shared machine; both are printed, best of --repeat).

Per step, each side on every document (no early exits, so each row is that step's own cost):

- normalize: ours (whitespace and controls); datatrove has no such step (its FTFY formatter fixes mojibake);
- quality: ours (word units, lengths, special characters, closed-class words, word and character
  repetition: the ROOTS measures) against datatrove's GopherQualityFilter + GopherRepetitionFilter (lengths,
  symbols, stop words; line, paragraph and 2- to 10-gram repetition). datatrove's word tokenizers need spaCy
  (not installed; Chinese needs jieba), so its filters get a whitespace tokenizer here, which makes every
  Chinese sentence one "word": the comparison is of speed, not of results on unspaced scripts;
- pii: ours (e-mail, IPv4, IPv6) against datatrove's PIIFormatter (e-mail, IPv4 only);
- exact_hash: ours (xxh3-128 of the case-folded text); datatrove's exact dedup hashes too, not timed here;
- minhash: ours against datatrove's MinhashDedupSignature.get_shingles + get_signature, both with datatrove's
  defaults (5-word shingles, 14 bands x 8 rows; ours defaults to 3-word shingles, 20 x 5). datatrove's
  default xxhash hash fails with xxhash 4, a core dependency here ("Strings must be encoded"); it is
  patched to hash the UTF-8 bytes, which is what it did with xxhash 3.

Whole stage, read to written: ``run_clean`` in-process (``workers=0``; plan, filter, exact and near dedup,
write, report) against datatrove's LocalPipelineExecutor with one task per stage, composed as its MinHash
example: (1) read -> Gopher filters -> PIIFormatter -> JsonlWriter, (2) read -> MinhashDedupSignature,
(3) MinhashDedupBuckets, (4) MinhashDedupCluster, (5) read -> MinhashDedupFilter -> JsonlWriter. Its filters
are loosened (min_doc_words 10, no stop-word or word-length rule) so that it keeps about as many documents
as ours does; both counts are printed. Goal: at least datatrove's throughput per core.

Presets (``--presets default roots``, the default): the quality row and the whole stage run once per preset;
``roots`` is ``bloomdata clean --preset roots`` (BigScience's ROOTS filters value by value, its PII categories,
dedup_document and SimHash). Goal: the roots preset's CPU per document within 1.5x of the default preset's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SENTENCE_END = re.compile(r"(?<=[.!?।॥۔。！？])\s+")


def sentence_pools(corpus: Path) -> dict[str, list[str]]:
    """Language -> the sentences of its corpus file (also benchmarks/bench_scale.py's input)."""
    return {f.stem: [s for line in f.read_text(encoding="utf-8").splitlines()
                     for s in SENTENCE_END.split(json.loads(line)["text"])] for f in sorted(corpus.glob("*.jsonl"))}


def make_docs(corpus: Path, target_bytes: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    sentences = sentence_pools(corpus)
    docs, size = [], 0
    while size < target_bytes:
        for lang, pool in sentences.items():
            rng.shuffle(pool)
            for i in range(0, len(pool), 5):
                docs.append({"text": " ".join(pool[i:i + 5]), "lang": lang})
                size += len(docs[-1]["text"].encode())
    copies = [dict(d, text=d["text"].replace(" ", "  ")) for d in rng.sample(docs, len(docs) // 10)]
    for d in rng.sample(docs, len(docs) // 10):
        words = d["text"].split(" ")
        for i in rng.sample(range(len(words)), min(2, len(words))):
            words[i] = rng.choice(["alpha", "beta", "gamma"])
        copies.append(dict(d, text=" ".join(words)))
    docs += copies
    rng.shuffle(docs)
    return docs


def best(fn, repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeat`` calls (by CPU)."""
    runs = []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - w, time.process_time() - c))
    return min(runs, key=lambda r: r[1])


def preset_config(name: str, **values):
    from bloomdata.clean import PRESETS, CleanConfig
    from bloomdata.config_loader import load_config

    return load_config(CleanConfig, PRESETS[name], values={"sources": ["x"], "out_dir": "y", **values})


def ours_steps(docs: list[dict], presets: list[str]) -> dict:
    from bloomdata.clean.config import NearDedupConfig, NormalizeConfig, PiiConfig
    from bloomdata.clean.language import load_word_lists
    from bloomdata.clean.minhash import MinHasher, exact_key
    from bloomdata.clean.pii import redact
    from bloomdata.clean.quality_filter import QualityFilter
    from bloomdata.clean.text import normalize, word_units

    texts, langs = [d["text"] for d in docs], [d["lang"] for d in docs]
    norm, pii = NormalizeConfig(), PiiConfig()

    def minhash():
        hasher = MinHasher(NearDedupConfig(n_grams=5, bands=14, rows=8))
        for i in range(0, len(texts), 1024):
            hasher.band_keys([hasher.shingles(word_units(t)) for t in texts[i:i + 1024]])

    def quality_of(name: str):
        config = preset_config(name)
        quality = QualityFilter(config, *load_word_lists(config.quality))
        return lambda: [quality.check(t, lang) for t, lang in zip(texts, langs)]

    steps = {
        "normalize": lambda: [normalize(t, norm) for t in texts],
        "quality": quality_of("default"),
        "pii": lambda: [redact(t, pii) for t in texts],
        "exact_hash": lambda: [exact_key(t, True) for t in texts],
        "minhash": minhash,
    }
    if "roots" in presets:
        from bloomdata.clean.simhash import SimHasher

        roots = preset_config("roots")
        simhasher = SimHasher(roots.simhash)
        steps["quality (roots)"] = quality_of("roots")
        steps["pii (roots)"] = lambda: [redact(t, roots.pii) for t in texts]
        steps["simhash (roots)"] = lambda: [simhasher.fingerprint(t, lang) for t, lang in zip(texts, langs)]
    return steps


def _datatrove_setup():
    import datatrove.utils.hashes.xxhash as dt_xxhash
    import xxhash
    from datatrove.utils.word_tokenizers import WordTokenizer
    from loguru import logger

    logger.remove()  # datatrove logs every step at INFO to stderr
    dt_xxhash.xxhash64 = lambda text: xxhash.xxh64_intdigest(text.encode())  # its xxhash<4 behaviour
    dt_xxhash.xxhash32 = lambda text: xxhash.xxh32_intdigest(text.encode())

    class Whitespace(WordTokenizer):
        """str.split: what datatrove can do here without spaCy."""

        def word_tokenize(self, text):
            return text.split()

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            return [(0, len(text))]

    return Whitespace()


def _datatrove_filters(words):
    from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter

    return [GopherRepetitionFilter(language=words),
            GopherQualityFilter(min_doc_words=10, min_avg_word_length=None, max_avg_word_length=None,
                                min_stop_words=None, language=words)]


def datatrove_steps(docs: list[dict], work: Path) -> dict:
    from datatrove.data import Document
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.pipeline.formatters import PIIFormatter

    words = _datatrove_setup()
    documents = [Document(text=d["text"], id=str(i)) for i, d in enumerate(docs)]
    filters = _datatrove_filters(words)
    pii = PIIFormatter()
    signature = MinhashDedupSignature(str(work / "datatrove-steps"), config=MinhashConfig(), language=words)

    def minhash():
        for d in documents:
            shingles = signature.get_shingles(d.text)
            if shingles.size:
                signature.get_signature(shingles)

    return {
        "quality": lambda: [[f.filter(d) for f in filters] for d in documents],
        "pii": lambda: [pii.format(d.text) for d in documents],
        "minhash": minhash,
    }


def ours_whole(path: Path, out: Path, preset: str = "default") -> tuple[int, dict]:
    from bloomdata.clean import run_clean

    shutil.rmtree(out, ignore_errors=True)
    values = {"sources": [str(path)], "out_dir": str(out), "workers": 0, "progress": False}
    if preset == "default":
        values["near_dedup"] = {"n_grams": 5, "bands": 14, "rows": 8}
    summary = run_clean(preset_config(preset, **values))
    return summary.documents_kept, summary.step_seconds


def datatrove_whole(path: Path, out: Path) -> int:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    words = _datatrove_setup()
    shutil.rmtree(out, ignore_errors=True)
    config = MinhashConfig()
    stages = [
        [JsonlReader(str(path.parent), glob_pattern=path.name), *_datatrove_filters(words), PIIFormatter(),
         JsonlWriter(str(out / "filtered"), compression=None)],
        [JsonlReader(str(out / "filtered")), MinhashDedupSignature(str(out / "sigs"), config=config, language=words)],
        [MinhashDedupBuckets(str(out / "sigs"), str(out / "buckets"), config=config)],
        [MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)],
        [JsonlReader(str(out / "filtered")), MinhashDedupFilter(str(out / "remove")), JsonlWriter(str(out / "final"))],
    ]
    out.mkdir(parents=True)
    with open(out / "datatrove.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        for i, pipeline in enumerate(stages):  # its executor adds a loguru sink on stderr per task: kept in the log
            tasks = config.num_buckets if i == 2 else 1  # stage 2 runs one task per bucket, as in its example
            LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=str(out / f"logs{i}")).run()
    import gzip

    return sum(len(gzip.open(p).read().splitlines()) for p in (out / "final").glob("*.gz"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=20.0, help="MB of document text (default 20)")
    p.add_argument("--quick", action="store_true", help="~4 MB, one round")
    p.add_argument("--repeat", type=int, default=3, help="rounds per row; the fastest (by CPU) counts")
    p.add_argument("--corpus", default=str(REPO / "tests" / "data" / "corpus"))
    p.add_argument("--no-datatrove", action="store_true", help="our rows only")
    p.add_argument("--presets", nargs="+", default=["default", "roots"], choices=["default", "roots"],
                   help="bloomdata clean presets to run (the quality row and the whole stage per preset)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args()
    mb, repeat = (4.0, 1) if args.quick else (args.mb, args.repeat)
    docs = make_docs(Path(args.corpus), int(mb * 1e6))
    size = sum(len(d["text"].encode()) for d in docs) / 1e6
    work = Path(tempfile.mkdtemp(prefix="bench-clean-"))
    path = work / "input" / "docs.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    print(f"{size:.1f} MB, {len(docs):,} documents, {len(set(d['lang'] for d in docs))} languages; best of {repeat}")
    rows: dict[str, dict] = {}
    sides = {"bloomdata": ours_steps(docs, args.presets)}
    if not args.no_datatrove:
        sides["datatrove"] = datatrove_steps(docs, work)
    for step in sides["bloomdata"]:
        for side, steps in sides.items():
            if step in steps:
                wall, cpu = best(steps[step], repeat)
                rows.setdefault(step, {})[side] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                                   "mb_per_cpu_s": round(size / cpu, 2)}
    kept = {}
    for preset in args.presets:
        row = "whole stage" if preset == "default" else f"whole stage ({preset})"
        wall, cpu = best(lambda p=preset: kept.update({p: ours_whole(path, work / f"ours-{p}", p)[0]}), repeat)
        rows[row] = {"bloomdata": {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                   "mb_per_cpu_s": round(size / cpu, 2),
                                   "us_per_doc": round(cpu / len(docs) * 1e6, 1), "documents_kept": kept[preset]}}
    if not args.no_datatrove:
        wall, cpu = best(lambda: kept.update(datatrove=datatrove_whole(path, work / "datatrove")), repeat)
        rows["whole stage"]["datatrove"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                            "mb_per_cpu_s": round(size / cpu, 2), "documents_kept": kept["datatrove"]}
    print(f"\n{'step':<20} {'bloomdata MB/s/core':>20} {'datatrove MB/s/core':>20} {'ratio':>7}"
          "   (CPU s: ours / datatrove)")
    for step, sides_ in rows.items():
        ours, theirs = sides_["bloomdata"], sides_.get("datatrove")
        ratio = f"{ours['mb_per_cpu_s'] / theirs['mb_per_cpu_s']:.2f}x" if theirs else "-"
        print(f"{step:<20} {ours['mb_per_cpu_s']:>20.2f} {theirs['mb_per_cpu_s'] if theirs else '-':>20} {ratio:>7}   "
              f"({ours['cpu_s']:.2f} / {theirs['cpu_s'] if theirs else '-'})")
    print(f"documents kept of {len(docs):,}: " + ", ".join(f"{k} {v:,}" for k, v in kept.items()))
    if "whole stage (roots)" in rows and "whole stage" in rows:
        ratios = {step: rows[f"{step} (roots)"]["bloomdata"]["cpu_s"] / rows[step]["bloomdata"]["cpu_s"]
                  for step in ("quality", "whole stage") if f"{step} (roots)" in rows}
        print("roots preset CPU per document / default preset's: " +
              ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) + " (goal: whole stage <= 1.5x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"mb": size, "documents": len(docs), "rows": rows}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
