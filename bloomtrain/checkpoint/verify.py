"""Offline verification of a checkpoint folder (``bloomtrain verify``): every tag's files against its manifest.

A folder with a ``latest`` file (or ``global_stepN`` directories) is a checkpoint root: each ``global_stepN`` is
checked, newest first. A folder holding a manifest is one tag, checked alone. A tag newer than the one ``latest``
names is an unfinished save (a run stopped while writing it; the next start removes it): reported, not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bloomdata.disk import size_text
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint.manifest import MANIFEST_FILE, Verdict, verify_tag
from bloomtrain.checkpoint.tags import LATEST, read_latest, step_tags


@dataclass(frozen=True)
class TagReport:
    tag: str
    verdict: Verdict | None
    """None: not checked (an unfinished save)."""

    @property
    def damaged(self) -> bool:
        return self.verdict is not None and self.verdict.damage is not None

    def line(self) -> str:
        v = self.verdict
        if v is None:
            return f"{self.tag}: unfinished save (newer than {LATEST}; removed at the next start): not checked"
        if v.damage is not None:
            return f"{self.tag}: DAMAGED: {v.damage.line()}"
        if not v.digests:
            return (f"{self.tag}: no digests (saved before bloomtrain recorded them, or by Megatron-DeepSpeed): "
                    "not checked")
        return f"{self.tag}: ok ({v.files} files, {size_text(v.bytes)} verified)"


def verify_checkpoints(folder: Path, tag: str | None = None) -> list[TagReport]:
    """Check ``folder`` (a checkpoint root, or one tag's directory); ``tag``: only that tag of a root."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BloomstackError(f"{folder}: not a directory; give a checkpoint folder (checkpoint.dir) or one tag in it")
    if (folder / MANIFEST_FILE).exists() and tag is None:
        return [TagReport(folder.name, verify_tag(folder))]
    if tag is not None:
        if not (folder / tag).is_dir():
            raise BloomstackError(f"{folder / tag}: no such checkpoint tag", keys=["tag"])
        return [TagReport(tag, verify_tag(folder / tag))]
    tags = step_tags(folder)
    if not tags:
        raise BloomstackError(f"{folder}: no global_stepN directories and no {MANIFEST_FILE}: not a checkpoint folder")
    latest = read_latest(folder)
    newer = set(tags[:tags.index(latest)]) if latest in tags else set()
    return [TagReport(t, None if t in newer else verify_tag(folder / t)) for t in tags]
