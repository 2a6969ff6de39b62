"""Where documents come from: ``SourceConfig`` and the files behind its paths, with their formats.

A path is a local file, directory or glob, or any fsspec URL (``s3://``, ``gs://``, ``http(s)://``, ``hf://``, ...:
``bloomdata.readers.fs``), globs too where the protocol can list. Formats (``format="auto"`` picks by file name:
``bloomdata.readers.registry``; directories are walked and files of unknown suffix skipped):

- jsonl (``.jsonl .ndjson``, and ``.json`` JSON Lines): one JSON object per line; a row is a line;
- json (a ``.json`` file whose first byte is ``[``): a top-level array of objects; a row is an element;
- csv, tsv: a header row, then one record per row; the text is the column named by ``text_field``;
- parquet, arrow (IPC *file* or *stream*, told apart by the ``ARROW1`` magic): a row is a table row;
- hf: a ``datasets.save_to_disk`` directory (``state.json`` lists Arrow IPC *stream* files, read with
  pyarrow directly, no ``datasets`` import); a ``DatasetDict`` directory expands to its splits;
- txt: the whole file is one document (row 1);
- ``package.module:ClassName``: a user's ``bloomdata.readers.base.Reader``.

Text formats may be compressed (``.gz``, ``.zst``, ``.bz2``, ``.xz``). ``text_field`` may be a dotted path into
nested objects or struct columns (``meta.content``).

``resolve_files`` turns a source into a sorted list of (path, concrete format): the same inputs always
give the same list, which is what makes shard plans deterministic.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.readers import fs
from bloomdata.readers.registry import check_format, format_of, suffix_list, takes

Format = Annotated[str, AfterValidator(check_format)]  # auto, hf, a built-in reader's name or package.module:Class


class SourceConfig(BaseModel):
    """One input source: files of one format, one language (from config or from a per-row field).

    Also given as one string, ``PATH`` or ``LANG=PATH`` (``--input``, or an item of a YAML ``sources`` list).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt key (formt:) is an error, not a silent default

    paths: list[str] = Field(description="files, directories or glob patterns", json_schema_extra=cli_option(skip=True))
    format: Format = Field(default="auto", description="file format of every input (auto: by file name; jsonl, json, "
                           "csv, tsv, parquet, arrow, txt, hf; or a reader class as package.module:ClassName)")
    text_field: str = Field(default="text", description="row field or column holding the text (a dotted path "
                            "reads nested objects: meta.content)")
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


def _hf_files(directory: str) -> list[str]:
    """The Arrow stream files of a ``save_to_disk`` directory (``Dataset`` or ``DatasetDict``)."""
    dict_json = fs.join(directory, "dataset_dict.json")
    if fs.isfile(dict_json):
        splits = json.loads(fs.read_text(dict_json))["splits"]
        return [f for split in sorted(splits) for f in _hf_files(fs.join(directory, split))]
    state_path = fs.join(directory, "state.json")
    try:
        state = json.loads(fs.read_text(state_path))
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, BloomstackError, ValueError, KeyError, TypeError) as exc:
        raise BloomstackError(f"{state_path}: not a datasets.save_to_disk state file ({exc}); "
                             "re-save the dataset with Dataset.save_to_disk") from None
    return [fs.join(directory, n) for n in names]  # state.json order is the dataset's row order


def _is_hf_dir(files: list[str]) -> bool:
    return "state.json" in files or "dataset_dict.json" in files


def _listing(directory: str):
    """(root, dirs, files) top-down under a local or remote directory, hidden entries left out, sorted."""
    if not fs.is_remote(directory):
        for root, dirs, files in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            yield root, dirs, sorted(files)
        return
    pruned: set[str] = set()
    for root, dirs, files in fs.walk(directory):
        if any(root == p or root.startswith(p + "/") for p in pruned):
            continue
        for d in list(dirs):
            if d.startswith("."):
                pruned.add(fs.join(root, d))
        kept = [d for d in dirs if not d.startswith(".")]
        yield root, kept, files
        pruned.update(fs.join(root, d) for d in dirs if d not in kept)


def _walk(directory: str, fmt: str) -> list[tuple[str, str]]:
    """(path, concrete format) of every readable file under a directory, HF datasets expanded."""
    found: list[tuple[str, str]] = []
    skipped: set[str] = set()  # HF directories: one dataset each, not walked into
    for root, dirs, files in _listing(directory):
        if any(root.startswith(s.rstrip("/") + "/") for s in skipped):
            continue
        if _is_hf_dir(files) and fmt in ("auto", "hf"):
            found += [(p, "arrow") for p in _hf_files(root)]
            dirs[:] = []  # an HF directory is one dataset: do not descend into its splits twice
            skipped.add(root)
            continue
        for name in files:
            if name.startswith("."):
                continue
            path = fs.join(root, name)
            inferred = format_of(path) if fmt in ("auto", "hf") else (fmt if takes(fmt, name) else None)
            if inferred is not None:
                found.append((path, inferred))
    return found


def _matches(entry: str) -> list[str]:
    """The paths a source entry names (a glob expanded, sorted); an entry that names nothing is an error."""
    remote = fs.is_remote(entry)
    pattern = entry if remote else os.path.abspath(os.path.expanduser(fs.local_path(entry)))
    if glob.has_magic(pattern.split("://", 1)[-1]):
        matches = fs.glob(pattern) if remote else sorted(glob.glob(pattern, recursive=True))
    else:
        matches = [pattern]
    if not matches or not all(fs.exists(m) for m in matches):
        raise BloomstackError(f"input path not found: {entry} (check the source's paths; globs must match "
                             "at least one file)")
    return matches


def resolve_files(source: SourceConfig) -> list[tuple[str, str]]:
    """(absolute path or URL, concrete format) of every file of a source, sorted by path within each entry."""
    files: list[tuple[str, str]] = []
    for entry in source.paths:
        for path in _matches(entry):
            if fs.isdir(path):
                found = _walk(path, source.format)
                if not found:
                    raise BloomstackError(f"{entry}: directory holds no readable files (supported: "
                                         f"{suffix_list()})")
                hf = any(fs.isfile(fs.join(path, name)) for name in ("state.json", "dataset_dict.json"))
                files += found if hf else sorted(found)
                continue
            fmt = source.format if source.format not in ("auto", "hf") else format_of(path)
            if fmt is None or fmt == "hf":
                raise BloomstackError(f"{path}: unknown file type; name it {suffix_list()} or set the source's "
                                     "format")
            files.append((path, fmt))
    return files


_LANG_SPEC = re.compile(r"^([A-Za-z][A-Za-z0-9_-]{0,31})=(.+)$")


def _spec_fields(spec: str) -> dict[str, Any]:
    """``PATH`` (language from each row's lang field) or ``LANG=PATH`` (every document of PATH is in LANG).
    A path that exists as written is never split."""
    match = _LANG_SPEC.match(spec)
    if match and (fs.is_remote(match.group(2)) or not os.path.exists(spec)):
        return {"paths": [match.group(2)], "lang": match.group(1)}
    return {"paths": [spec]}


def source_from_spec(spec: str, text_field: str = "text", format: Format = "auto",
                     lang_field: str = "lang") -> SourceConfig:
    """A source from a CLI ``--input`` value (see ``_spec_fields``) and the flags that apply to every input."""
    return SourceConfig(**_spec_fields(spec), text_field=text_field, format=format, lang_field=lang_field)
