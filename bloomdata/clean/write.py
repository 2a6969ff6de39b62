"""Stage 4 of a clean run, one shard: copy its candidates minus the duplicates into the cleaned data.

``write_shard`` reads the shard's stage-1 candidate files and its removals from stage 3, and writes one part
per language, ``OUT/data/<name>/<plan index:05d>-<shard name>.jsonl.zst`` (or ``.parquet``): the kept
lines byte for byte, in read order. The plan index leads the name, so a directory listing is plan order,
which is the order the build and the tokenizer trainer read. The parts are published as a group, then the
removed duplicates' examples, then the marker ``OUT/work/write/<shard>.done.json`` (a ``WriteManifest``) under
a key of the stage-1 key, the removals' digest, the part names and the format: when a rerun finds the same
duplicates (a file appended to the plan never changes which earlier copy survives) the shard is not rewritten.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import numpy as np

from bloomdata import durable
from bloomdata.clean.config import DATA_DIR, MARKER_VERSION, WORK_DIR, CleanConfig
from bloomdata.clean.dedup import EXACT, SHARD_BITS
from bloomdata.clean.parts import LinesWriter, abort, publish, read_lines, staged
from bloomdata.clean.summary import FilterManifest, LangCounts, PartStats, WriteManifest
from bloomdata.clean.templates import remove_template_lines
from bloomdata.readers import Shard

REASON_OF = {EXACT: "exact_duplicate"}
NEAR_REASON = "near_duplicate"


def write_dir(out_dir: str) -> str:
    return os.path.join(out_dir, WORK_DIR, "write")


def resolve_path(out_dir: str, shard: Shard) -> str:
    return os.path.join(out_dir, WORK_DIR, "resolve", f"{shard.name}.npy")


def part_name(name: str, index: int, shard: Shard, output_format: str) -> str:
    """A part's path relative to OUT."""
    ext = "parquet" if output_format == "parquet" else "jsonl.zst"
    return os.path.join(DATA_DIR, name, f"{index:05d}-{shard.name}.{ext}")


def write_key(filter_key: str, removals_digest: str, index: int, output_format: str) -> str:
    return durable.content_key({"version": MARKER_VERSION, "filter": filter_key, "removed": removals_digest,
                                "index": index, "format": output_format})


def load_marker(out_dir: str, shard: Shard, key: str) -> WriteManifest | None:
    manifest = durable.read_manifest(os.path.join(write_dir(out_dir), f"{shard.name}.done.json"), key, WriteManifest)
    if manifest is None:
        return None
    for part in manifest.parts.values():
        path = os.path.join(out_dir, part.file)
        if not os.path.isfile(path) or os.path.getsize(path) != part.file_bytes:
            return None
    return manifest


class TemplateRemoval:
    """What the write stage does to a surviving document when template removal is on: its template lines
    dropped, then the checks that ROOTS's catalogue ran after them (an empty document goes as ``empty``, then
    the language's ``bytes`` and ``space_words`` steps when ``quality.steps`` lists them)."""

    def __init__(self, templates_path: str, config: CleanConfig):
        from bloomdata.clean.filters import QualityFilter

        self.templates = np.load(templates_path)
        self.config = config.template_dedup
        bare = config.model_copy(update={  # the small-document steps need no model: none is loaded
            "lang_id": config.lang_id.model_copy(update={"model": None}),
            "perplexity": config.perplexity.model_copy(update={"models": {}}),
            "sentencepiece": config.sentencepiece.model_copy(update={"models": {}})})
        self.quality = QualityFilter(bare, {}, {})

    def apply(self, line: bytes) -> tuple[bytes, int, str | None]:
        """(the JSON line, its text's UTF-8 size, the reason it goes or None)."""
        from bloomdata.clean.steps import Doc

        record = json.loads(line)
        text = remove_template_lines(record["text"], self.templates, self.config)
        if not text.strip():
            return line, 0, "empty"
        language = self.quality.language(record["lang"])
        doc = Doc(text, record["lang"], language)
        for step in language.steps:
            if step.name in ("bytes", "space_words"):
                verdict = step.keep(doc)
                if verdict is not True:
                    return line, 0, verdict if isinstance(verdict, str) else step.reasons[0]
        if text != record["text"]:
            line = json.dumps({"text": text, "lang": record["lang"]}, ensure_ascii=False).encode("utf-8") + b"\n"
        return line, len(text.encode("utf-8")), None


def write_shard(shard: Shard, index: int, out_dir: str, filtered: FilterManifest, key: str,
                shard_names: list[str], output_format: str, max_examples: int, max_chars: int,
                post: TemplateRemoval | None = None) -> WriteManifest:
    """Stage 4 of one shard (see the module docstring); idempotent."""
    t0 = time.perf_counter()
    manifest = load_marker(out_dir, shard, key)
    if manifest is not None:
        return manifest.model_copy(update={"reused": True})
    work = os.path.join(out_dir, WORK_DIR, "filter", shard.name)
    removals = np.load(resolve_path(out_dir, shard))
    gone = {int(c): (int(r), int(s)) for c, r, s in zip(*removals)}
    lines, sizes = np.load(os.path.join(work, "candidates.npy")).tolist()
    removed: dict[str, LangCounts] = {}
    taken: Counter[str] = Counter()
    examples: list[str] = []
    parts: dict[str, PartStats] = {}
    writers: list[LinesWriter] = []
    try:
        for name in filtered.languages:
            if not os.path.isfile(os.path.join(work, f"{name}.ids.npy")):
                continue  # no candidates in this language
            ids = np.load(os.path.join(work, f"{name}.ids.npy")).tolist()
            target = part_name(name, index, shard, output_format)
            os.makedirs(os.path.dirname(os.path.join(out_dir, target)), exist_ok=True)
            writer = LinesWriter(os.path.join(out_dir, target), parquet=output_format == "parquet")
            kept_bytes = 0
            for line, cid in zip(read_lines(os.path.join(work, f"{name}.jsonl.zst")), ids, strict=True):
                if cid not in gone:
                    line, size, reason = (line, sizes[cid], None) if post is None else post.apply(line)
                    if reason is None:
                        writer.write(line)
                        kept_bytes += size
                        continue
                    removed.setdefault(name, LangCounts()).remove(reason, sizes[cid])
                    if taken[reason] < max_examples:
                        taken[reason] += 1
                        record = json.loads(line)
                        examples.append(json.dumps({
                            "reason": reason, "where": f"{shard.path}:{lines[cid]}", "lang": record["lang"],
                            "text": record["text"][:max_chars], "truncated": len(record["text"]) > max_chars},
                            ensure_ascii=False))
                    continue
                code, survivor = gone[cid]
                reason = REASON_OF.get(code, NEAR_REASON)
                removed.setdefault(name, LangCounts()).remove(reason, sizes[cid])
                if taken[reason] < max_examples:
                    taken[reason] += 1
                    record = json.loads(line)
                    where = f"{shard.path}:{lines[cid]}"
                    s, c = survivor >> SHARD_BITS, survivor & ((1 << SHARD_BITS) - 1)
                    examples.append(json.dumps({
                        "reason": reason, "where": where, "lang": record["lang"], "text": record["text"][:max_chars],
                        "truncated": len(record["text"]) > max_chars,
                        "duplicate_of": {"shard": shard_names[s], "candidate": c}}, ensure_ascii=False))
            if writer.lines:
                writers.append(writer)
                parts[name] = PartStats(file=target, documents=writer.lines, bytes=kept_bytes, file_bytes=0)
            else:
                writer.abort()
        os.makedirs(os.path.join(write_dir(out_dir), shard.name), exist_ok=True)
        text = "".join(f"{e}\n" for e in examples).encode("utf-8")
        publish(writers, [staged(os.path.join(write_dir(out_dir), shard.name, "removed.jsonl"),
                                 lambda out: out.write(text))])
    except BaseException:
        abort(writers)
        raise
    for part in parts.values():
        part.file_bytes = os.path.getsize(os.path.join(out_dir, part.file))
    manifest = WriteManifest(shard=shard.name, parts=parts, removed=dict(sorted(removed.items())),
                             examples=len(examples), seconds=round(time.perf_counter() - t0, 3))
    durable.write_marker(os.path.join(write_dir(out_dir), f"{shard.name}.done.json"), key,
                         manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest
