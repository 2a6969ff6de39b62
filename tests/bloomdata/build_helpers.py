"""Constants and helpers shared by the build tests (test_build.py, test_build_sharding.py); their fixtures are in
conftest.py."""

from __future__ import annotations

from pathlib import Path

from bloomdata.build import BuildConfig
from bloomdata.readers import SourceConfig

LANGS = ("en", "fr", "zh", "ar")
REPO = Path(__file__).resolve().parents[2]
BIG_ROWS, BIG_SHARD_ROWS = 4 * (160 + 160 + 146 + 160), 300
BIG_SHARDS = -(-BIG_ROWS // BIG_SHARD_ROWS)  # 9


def _config(inputs, tok, out, **kw) -> BuildConfig:
    sources = [SourceConfig(paths=[str(p)]) for p in inputs]
    return BuildConfig(sources=sources, tokenizer=str(tok), out_dir=str(out), progress=False, **kw)


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".bin", ".idx")}


def _temps(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if ".tmp-" in p.name]
