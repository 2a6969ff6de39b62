"""``make wheelhouse WHEELHOUSE=DIR``: every wheel bloomstack and its extras need, for an offline install.

BLOOM's compute nodes had no internet access, as most HPC clusters: on a machine that reaches the package
registry, this downloads into DIR the wheels of the project's dependencies (``[project].dependencies``, the
extras: every one, or those ``--extras`` names), of its build requirements (``[build-system].requires``: setup.py
compiles a pybind11 extension at install, so an offline install needs setuptools and pybind11 as wheels too), and of
torch (``--torch-spec`` from ``--torch-index``, or none). ``make install WHEELHOUSE=DIR`` then installs from DIR alone
(``pip --no-index --find-links DIR``). Standard library and pip only: it runs before anything is installed.

Steps, all through pip (its index, certificates and proxy settings are the machine's):

1. resolve every requirement for the target, ``pip install --dry-run --report`` (``--python-version`` and
   ``--platform`` name another machine's Python and platform; default: this machine's);
2. packages published only as source (deepspeed, sqlitedict, rouge-score, word2number at the time of
   writing) are built into wheels here, ``pip wheel --no-deps``: each must come out as a pure-Python wheel
   (``py3-none-any``) when the target is another platform, or the command stops naming it;
3. download every resolved wheel, ``pip download --no-deps --only-binary=:all:``, pinned to the resolved
   versions (``requirements.txt`` in DIR lists them; ``wheelhouse.json`` records the target).

torch: ``--torch-spec "torch==2.13.0" --torch-index "--index-url https://download.pytorch.org/whl/cu128"``
downloads that build first (with its CUDA wheels), and the resolution is pinned to it; ``--torch-spec ""``
leaves torch and the packages only torch needs (nvidia-*, triton) out, for a cluster whose torch comes with
its module system or image (install with ``make install WHEELHOUSE=DIR TORCH_SPEC=``).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROJECT = "bloomstack"


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def project_requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The base dependencies, those of ``extras`` (``bloomstack[a,b]`` inside an extra expanded), and the build
    requirements, as requirement strings."""
    meta = tomllib.loads(pyproject.read_text())
    optional = meta["project"].get("optional-dependencies", {})
    reqs = list(meta["project"]["dependencies"]) + list(meta["build-system"]["requires"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"wheelhouse: no extra {extra!r} in {pyproject}; known: {', '.join(sorted(optional))}")
        seen.add(extra)
        for req in optional[extra]:
            if requirement_name(req) == PROJECT:  # "bloomstack[train,flows]": the extras it names
                todo += [e.strip() for e in req.split("[", 1)[1].split("]", 1)[0].split(",")]
            else:
                reqs.append(req)
    return list(dict.fromkeys(reqs))


def target_flags(python_version: str | None, platforms: list[str]) -> list[str]:
    flags = [f for p in platforms for f in ("--platform", p)]
    if python_version:
        flags += ["--python-version", python_version, "--implementation", "cp"]
    return flags


def pip(*args: str, quiet: bool = True) -> None:
    cmd = [sys.executable, "-m", "pip", *args, *(["-q"] if quiet else [])]
    print("wheelhouse: " + shlex.join(cmd[3:])[:300], flush=True)
    subprocess.run(cmd, check=True)


def resolve(reqs: list[str], flags: list[str], find_links: Path, binary_only: bool, work: Path) -> list[dict]:
    """pip's resolution of ``reqs`` for the target: the ``install`` items of its report."""
    (work / "reqs.txt").write_text("\n".join(reqs) + "\n")
    report = work / "report.json"
    binary = ["--only-binary=:all:"] if binary_only else ["--prefer-binary"]
    pip("install", "--dry-run", "--ignore-installed", "--target", str(work / "target"), "--report", str(report),
        *binary, *flags, "--find-links", str(find_links), "-r", str(work / "reqs.txt"))
    return json.loads(report.read_text())["install"]


def build_sdists(items: list[dict], out: Path, foreign: bool) -> None:
    """Wheels of the packages published only as source, built here; pure Python when the target is foreign."""
    for item in items:
        url = item["download_info"]["url"]
        if url.endswith(".whl"):
            continue
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        before = set(out.glob("*.whl"))
        pip("wheel", "--no-deps", "--prefer-binary", "-w", str(out), f"{name}=={version}")
        built = [p.name for p in set(out.glob("*.whl")) - before]
        if foreign and not all(n.endswith("-none-any.whl") for n in built):
            raise SystemExit(f"wheelhouse: {name} {version} is published as source only and builds a "
                             f"platform wheel here ({', '.join(built)}): build it on the target machine "
                             "(pip wheel --no-deps) and copy it into the wheelhouse")


def without_torch(items: list[dict], roots: list[str]) -> list[dict]:
    """``items`` less torch and what only torch needs: those reachable from ``roots`` without passing torch."""
    by_name = {canonical(i["metadata"]["name"]): i for i in items}
    keep, todo = set(), [requirement_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in keep or name == "torch" or name not in by_name:
            continue
        keep.add(name)
        todo += [requirement_name(r) for r in by_name[name]["metadata"].get("requires_dist") or []]
    return [i for n, i in by_name.items() if n in keep]


def torch_first(spec: str, index: str, flags: list[str], out: Path) -> str | None:
    """Download ``spec`` (and its dependencies) from ``index`` into ``out``; the pin the resolution then uses."""
    if not spec or not index:
        return spec or None
    before = set(out.glob("torch-*.whl"))
    pip("download", "--only-binary=:all:", *flags, *shlex.split(index), "-d", str(out), spec)
    got = sorted(set(out.glob("torch-*.whl")) - before) or sorted(out.glob("torch-*.whl"))
    if not got:
        raise SystemExit(f"wheelhouse: {index} gave no torch wheel for {spec!r}")
    return f"torch=={got[-1].name.split('-')[1]}"  # the exact build downloaded, local label included (+cu128)


def make(args: argparse.Namespace) -> dict:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    flags = target_flags(args.python_version, args.platform)
    extras = args.extras.split(",") if args.extras else list(tomllib.loads((ROOT / "pyproject.toml").read_text())
                                                               ["project"]["optional-dependencies"])
    reqs = project_requirements(ROOT / "pyproject.toml", [e for e in extras if e])
    torch_pin = torch_first(args.torch_spec.strip(), args.torch_index.strip(), flags, out)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # This machine's resolution first: it names the source-only packages, whose wheels are built here.
        items = resolve(reqs + ([torch_pin] if torch_pin else []), [], out, binary_only=False, work=work)
        build_sdists(items, out, foreign=bool(flags))
        if flags:  # the target's own resolution, wheels only (the built ones are found in `out`)
            items = resolve(reqs + ([torch_pin] if torch_pin else []), flags, out, binary_only=True, work=work)
    if not torch_pin:
        items = without_torch(items, reqs)
    pins = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items)
    (out / "requirements.txt").write_text("\n".join(pins) + "\n")
    pip("download", "--no-deps", "--only-binary=:all:", *flags, "--find-links", str(out), "-d", str(out),
        "-r", str(out / "requirements.txt"))
    wheels = sorted(out.glob("*.whl"))
    record = {"out": str(out),
              "python_version": args.python_version or f"{sys.version_info.major}.{sys.version_info.minor}",
              "platforms": args.platform or ["this machine's"], "extras": extras, "torch": torch_pin,
              "packages": len(pins), "wheels": len(wheels), "bytes": sum(p.stat().st_size for p in wheels),
              "seconds": round(time.monotonic() - started, 1)}
    (out / "wheelhouse.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the wheelhouse directory (created; wheels already there are kept)")
    p.add_argument("--extras", default=None, help="the project's extras to include, comma-separated (default: every "
                                                  "extra in pyproject.toml)")
    p.add_argument("--python-version", default=None, help="the target's Python, e.g. 3.11 (default: this one)")
    p.add_argument("--platform", action="append", default=[],
                   help="the target's wheel platform tag, e.g. manylinux_2_28_x86_64 (repeatable; default: this "
                        "machine's)")
    p.add_argument("--torch-spec", default="torch==2.13.0", help="the torch to include; empty: none")
    p.add_argument("--torch-index", default="", help="pip index options for torch, e.g. '--index-url URL'")
    record = make(p.parse_args(argv))
    print(f"wheelhouse: {record['wheels']} wheels, {record['bytes'] / 2**20:,.0f} MiB in {record['out']}, "
          f"{record['seconds']:.0f} s; install offline with: make install WHEELHOUSE={record['out']}"
          + ("" if record["torch"] else " TORCH_SPEC="))
    return 0


if __name__ == "__main__":
    sys.exit(main())
