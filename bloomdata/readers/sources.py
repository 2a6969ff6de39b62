"""Where documents come from: ``SourceConfig`` and the files behind its paths, with their formats.

Formats (``format="auto"`` picks by suffix; directories are walked and files of unknown suffix skipped):

- jsonl (``.jsonl .ndjson .json``, optionally ``.gz``/``.zst``): one JSON object per line; a row is a line.
- parquet, arrow (IPC *file* or *stream*, told apart by the ``ARROW1`` magic): a row is a table row.
- hf: a ``datasets.save_to_disk`` directory (``state.json`` lists Arrow IPC *stream* files, read with
  pyarrow directly, no ``datasets`` import); a ``DatasetDict`` directory expands to its splits.
- txt (optionally ``.gz``/``.zst``): the whole file is one document (row 1).

``resolve_files`` turns a source into a sorted list of (path, concrete format): the same inputs always
give the same list, which is what makes shard plans deterministic.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.readers.compressed import strip_compression

Format = Literal["auto", "jsonl", "parquet", "arrow", "hf", "txt"]

_SUFFIXES: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "parquet": (".parquet",),
    "arrow": (".arrow", ".ipc", ".feather"),
    "txt": (".txt",),
}


class SourceConfig(BaseModel):
    """One input source: files of one format, one language (from config or from a per-row field).

    Also given as one string, ``PATH`` or ``LANG=PATH`` (``--input``, or an item of a YAML ``sources`` list).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt key (formt:) is an error, not a silent default

    paths: list[str] = Field(description="files, directories or glob patterns", json_schema_extra=cli_option(skip=True))
    format: Format = Field(default="auto", description="file format of every input (auto: by file suffix)")
    text_field: str = Field(default="text", description="row field holding the text")
    lang: str | None = Field(default=None, description="language of every document; else read lang_field")
    lang_field: str = Field(default="lang", description="row field holding the language (when lang is not set)")

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, value: Any) -> Any:
        return _spec_fields(value) if isinstance(value, str) else value



def sources_field(flag: str = "--input", what: str = "inputs") -> Any:
    """The ``sources`` field of every model that reads documents (build, tokenizer, clean, fertility, evaluate):
    one repeatable ``FLAG [LANG=]PATH`` option, at least one."""
    return Field(min_length=1, json_schema_extra=cli_option(flag, metavar="[LANG=]PATH"),
                 description=f"{what}: file, directory or glob, in any format the build reads; LANG= sets the "
                             "language of all its documents, else each row's lang field does (repeatable)")


def format_of(path: str) -> str | None:
    """The concrete format implied by a file name, or None when the suffix is unknown."""
    name = path.lower()
    compressed = name != strip_compression(name)
    name = strip_compression(name)
    for fmt, suffixes in _SUFFIXES.items():
        if name.endswith(suffixes) and not (compressed and fmt in ("parquet", "arrow")):
            return fmt
    return None


def _hf_files(directory: str) -> list[str]:
    """The Arrow stream files of a ``save_to_disk`` directory (``Dataset`` or ``DatasetDict``)."""
    dict_json = os.path.join(directory, "dataset_dict.json")
    if os.path.isfile(dict_json):
        splits = json.loads(open(dict_json, encoding="utf-8").read())["splits"]
        return [f for split in sorted(splits) for f in _hf_files(os.path.join(directory, split))]
    state_path = os.path.join(directory, "state.json")
    try:
        state = json.loads(open(state_path, encoding="utf-8").read())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BloomstackError(f"{state_path}: not a datasets.save_to_disk state file ({exc}); "
                             "re-save the dataset with Dataset.save_to_disk") from None
    return [os.path.join(directory, n) for n in names]  # state.json order is the dataset's row order


def _is_hf_dir(directory: str) -> bool:
    return any(os.path.isfile(os.path.join(directory, f)) for f in ("state.json", "dataset_dict.json"))


def _walk(directory: str, fmt: str) -> list[tuple[str, str]]:
    """(path, concrete format) of every readable file under a directory, HF datasets expanded."""
    found: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if _is_hf_dir(root) and fmt in ("auto", "hf"):
            found += [(p, "arrow") for p in _hf_files(root)]
            dirs[:] = []  # an HF directory is one dataset: do not descend into its splits twice
            continue
        for name in sorted(files):
            inferred = format_of(name)
            if name.startswith(".") or inferred is None or (fmt not in ("auto", "hf") and inferred != fmt):
                continue
            found.append((os.path.join(root, name), inferred))
    return found


def resolve_files(source: SourceConfig) -> list[tuple[str, str]]:
    """(absolute path, concrete format) of every file of a source, sorted by path within each entry."""
    files: list[tuple[str, str]] = []
    for entry in source.paths:
        pattern = os.path.abspath(os.path.expanduser(entry))
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise BloomstackError(f"input path not found: {entry} (check the source's paths; globs must match "
                                 "at least one file)")
        for path in matches:
            if os.path.isdir(path):
                found = _walk(path, source.format)
                if not found:
                    raise BloomstackError(f"{entry}: directory holds no readable files (supported: "
                                         ".jsonl[.gz|.zst], .parquet, .arrow, .txt, save_to_disk dirs)")
                files += sorted(found) if not _is_hf_dir(path) else found
                continue
            fmt = source.format if source.format not in ("auto", "hf") else format_of(path)
            if fmt is None or fmt == "hf":
                raise BloomstackError(f"{path}: unknown file type; name it .jsonl/.parquet/.arrow/.txt or set "
                                     "the source's format")
            files.append((path, fmt))
    return files


_LANG_SPEC = re.compile(r"^([A-Za-z][A-Za-z0-9_-]{0,31})=(.+)$")


def _spec_fields(spec: str) -> dict[str, Any]:
    """``PATH`` (language from each row's lang field) or ``LANG=PATH`` (every document of PATH is in LANG).
    A path that exists as written is never split."""
    match = _LANG_SPEC.match(spec)
    if match and not os.path.exists(spec):
        return {"paths": [match.group(2)], "lang": match.group(1)}
    return {"paths": [spec]}


def source_from_spec(spec: str, text_field: str = "text", format: Format = "auto",
                     lang_field: str = "lang") -> SourceConfig:
    """A source from a CLI ``--input`` value (see ``_spec_fields``) and the flags that apply to every input."""
    return SourceConfig(**_spec_fields(spec), text_field=text_field, format=format, lang_field=lang_field)
