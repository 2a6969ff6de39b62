"""Docstrings, comments and docs name modules that exist: every dotted name under bloomdata, bloomtrain or flows
(``bloomdata.blend.spec``, ``bloomtrain.measures.perplexity``) written in the packages, the tests, the benchmarks
or the docs resolves to a module, or to a name defined or imported in one (a renamed module leaves no stale
pointer behind)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"(?<![\w./-])((?:bloomdata|bloomtrain|flows)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
NOT_MODULES = {
    "bloomdata._index_helpers",  # the C++ extensions setup.py builds
    "bloomdata._bpe_learner",
    "bloomdata._bpe_encoder",
    "bloomdata.__file__",
    "bloomtrain.DurableCheckpointEngine",  # the name DeepSpeed logs for our checkpoint engine
    "flows.md",  # docs/flows.md
}


def _module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


@functools.cache
def _names(path: Path) -> frozenset[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    k = len(parts)
    while k and _module_file(parts[:k]) is None:
        k -= 1
    if not k:
        return False
    module = _module_file(parts[:k])
    assert module is not None
    return k == len(parts) or parts[k] in _names(module) or ROOT.joinpath(*parts[: k + 1]).exists()


def test_every_dotted_module_reference_resolves():
    files = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("Makefile")]
    for folder in ("bloomdata", "bloomtrain", "flows", "tests", "benchmarks"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".yaml")]
    stale = []
    seen = 0
    for path in files:
        if path.name == "RESULTS.md":  # dated records: they name what existed then
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in DOTTED.finditer(line):
                seen += 1
                dotted = match.group(1)
                if dotted not in NOT_MODULES and not _resolves(dotted):
                    stale.append(f"{path.relative_to(ROOT)}:{number}: {dotted}")
    assert seen > 500
    assert not stale, "names of modules (or their names) that do not exist:\n" + "\n".join(stale)
