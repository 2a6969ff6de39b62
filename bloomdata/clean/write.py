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
from dataclasses import dataclass

import numpy as np

from bloomdata import durable
from bloomdata.clean.config import CleanConfig
from bloomdata.clean.dedup import SHARD_BITS
from bloomdata.clean.files import DATA_DIR, EMPTY, MARKER_VERSION, WORK_DIR
from bloomdata.clean.language import Doc
from bloomdata.clean.parts import LinesWriter, abort, publish, read_lines, staged
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.clean.summary import FilterManifest, LangCounts, PartStats, WriteManifest
from bloomdata.clean.templates import remove_template_lines
from bloomdata.config_loader import derive
from bloomdata.readers import Shard


def write_dir(out_dir: str) -> str:
    return os.path.join(out_dir, WORK_DIR, "write")


def resolve_path(out_dir: str, shard: Shard) -> str:
    return os.path.join(out_dir, WORK_DIR, "resolve", f"{shard.name}.npy")


def part_name(name: str, index: int, shard: Shard, output_format: str) -> str:
    """A part's path relative to OUT."""
    ext = "parquet" if output_format == "parquet" else "jsonl.zst"
    return os.path.join(DATA_DIR, name, f"{index:05d}-{shard.name}.{ext}")


def write_key(filter_key: str, removals_digest: str, index: int, output_format: str) -> str:
    # "examples": the removed.jsonl work file's format (2: a duplicate names its survivor's shard by plan index)
    return durable.content_key({"version": MARKER_VERSION, "filter": filter_key, "removed": removals_digest,
                                "index": index, "format": output_format, "examples": 2})


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
    the steps of ``quality.steps`` marked ``after_templates``: ``bytes`` and ``space_words``)."""

    def __init__(self, templates_path: str, config: CleanConfig):
        self.templates = np.load(templates_path)
        self.config = config.template_dedup
        bare = derive(config, lang_id=derive(config.lang_id, model=None),  # the steps checked again need no
                      perplexity=derive(config.perplexity, models={}),  # model: none is loaded
                      sentencepiece=derive(config.sentencepiece, models={}))
        self.quality = QualityFilter(bare, {}, {})

    def apply(self, line: bytes) -> tuple[bytes, int, str | None]:
        """(the JSON line, its text's UTF-8 size, the reason it goes or None)."""
        record = json.loads(line)
        text = remove_template_lines(record["text"], self.templates, self.config)
        if not text.strip():
            return line, 0, EMPTY
        lang = record["lang"]
        again = [step for step in self.quality.steps(lang) if step.after_templates]
        reason = self.quality.reason(Doc(text, lang, self.quality.language(lang)), again) if again else None
        if reason is not None:
            return line, 0, reason
        if text != record["text"]:
            line = json.dumps({"text": text, "lang": record["lang"]}, ensure_ascii=False).encode("utf-8") + b"\n"
        return line, len(text.encode("utf-8")), None


@dataclass(frozen=True)
class WriteSettings:
    """What stage 4 of every shard shares: where parts go, their format, the removed examples kept."""

    # no per-shard list here: a copy travels with every write task, so a list of the plan's shards cost
    # O(shards^2) bytes (~3 MB x 100,000 tasks at 100,000 files); a duplicate names its survivor's shard by
    # plan index and the driver turns that into file:line (run._write_examples)
    out_dir: str
    output_format: str
    max_examples: int  # removed documents kept as examples, per reason
    max_chars: int  # characters of an example's text
    dedup_reasons: tuple[str, ...]  # the reason of each code of the resolve files (config.dedup_reasons)


def write_shard(shard: Shard, index: int, filtered: FilterManifest, key: str, settings: WriteSettings,
                post: TemplateRemoval | None = None) -> WriteManifest:
    """Stage 4 of one shard (see the module docstring); idempotent."""
    t0 = time.perf_counter()
    out_dir = settings.out_dir
    manifest = load_marker(out_dir, shard, key)
    if manifest is not None:
        return derive(manifest, reused=True)
    state = _ShardWriter(shard, index, settings, post)
    try:
        for name in filtered.languages:
            state.language(name)
        state.publish()
    except BaseException:
        abort(state.writers)
        raise
    for part in state.parts.values():
        part.file_bytes = os.path.getsize(os.path.join(out_dir, part.file))
    manifest = WriteManifest(shard=shard.name, parts=state.parts, removed=dict(sorted(state.removed.items())),
                             examples=len(state.examples), seconds=round(time.perf_counter() - t0, 3))
    durable.write_marker(os.path.join(write_dir(out_dir), f"{shard.name}.done.json"), key,
                         manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest


class _ShardWriter:
    """One shard's stage 4 in progress: its candidates, the removals of stage 3, the parts written and the
    removed documents (counts per language and reason, the first examples of each reason)."""

    def __init__(self, shard: Shard, index: int, settings: WriteSettings, post: TemplateRemoval | None):
        self.shard, self.index, self.settings, self.post = shard, index, settings, post
        self.work = os.path.join(settings.out_dir, WORK_DIR, "filter", shard.name)
        removals = np.load(resolve_path(settings.out_dir, shard))
        self.gone = {int(c): (int(r), int(s)) for c, r, s in zip(*removals)}  # candidate -> (code, survivor)
        self.lines, self.sizes = np.load(os.path.join(self.work, "candidates.npy")).tolist()
        self.removed: dict[str, LangCounts] = {}
        self.taken: Counter[str] = Counter()
        self.examples: list[str] = []
        self.parts: dict[str, PartStats] = {}
        self.writers: list[LinesWriter] = []

    def language(self, name: str) -> None:
        """The part of language ``name``: its candidates that stage 3 and the template removal kept."""
        ids_file = os.path.join(self.work, f"{name}.ids.npy")
        if not os.path.isfile(ids_file):
            return  # no candidates in this language
        ids = np.load(ids_file).tolist()
        out_dir, output_format = self.settings.out_dir, self.settings.output_format
        target = part_name(name, self.index, self.shard, output_format)
        os.makedirs(os.path.dirname(os.path.join(out_dir, target)), exist_ok=True)
        writer = LinesWriter(os.path.join(out_dir, target), parquet=output_format == "parquet")
        kept_bytes = 0
        for line, cid in zip(read_lines(os.path.join(self.work, f"{name}.jsonl.zst")), ids, strict=True):
            if cid in self.gone:
                code, survivor = self.gone[cid]
                self.remove(name, self.settings.dedup_reasons[code], line, cid, survivor)
                continue
            line, size, reason = (line, self.sizes[cid], None) if self.post is None else self.post.apply(line)
            if reason is None:
                writer.write(line)
                kept_bytes += size
            else:
                self.remove(name, reason, line, cid)
        if writer.lines:
            self.writers.append(writer)
            self.parts[name] = PartStats(file=target, documents=writer.lines, bytes=kept_bytes, file_bytes=0)
        else:
            writer.abort()

    def remove(self, name: str, reason: str, line: bytes, cid: int, survivor: int | None = None) -> None:
        """Count candidate ``cid`` of language ``name`` as removed; keep it as an example while there is room."""
        self.removed.setdefault(name, LangCounts()).remove(reason, self.sizes[cid])
        if self.taken[reason] >= self.settings.max_examples:
            return
        self.taken[reason] += 1
        record = json.loads(line)
        max_chars = self.settings.max_chars
        example = {"reason": reason, "where": f"{self.shard.path}:{self.lines[cid]}", "lang": record["lang"],
                   "text": record["text"][:max_chars], "truncated": len(record["text"]) > max_chars}
        if survivor is not None:
            s, c = survivor >> SHARD_BITS, survivor & ((1 << SHARD_BITS) - 1)
            example["duplicate_of"] = {"shard": s, "candidate": c}  # s: the survivor's shard, by plan index
        self.examples.append(json.dumps(example, ensure_ascii=False))

    def publish(self) -> None:
        folder = os.path.join(write_dir(self.settings.out_dir), self.shard.name)
        os.makedirs(folder, exist_ok=True)
        text = "".join(f"{e}\n" for e in self.examples).encode("utf-8")
        publish(self.writers, [staged(os.path.join(folder, "removed.jsonl"), lambda out: out.write(text))])
