"""The offline install: ``make install WHEELHOUSE=dir`` into a fresh venv with pip's index switched off.

Tests have no network, so the wheelhouse here is made on the spot from what this test environment has installed:
each distribution the base package needs (``[project].dependencies`` and their dependencies, markers and extras
applied) and the build requirements (setuptools, pybind11: setup.py compiles the C++ index helpers at install)
packed back into a wheel from its installed files (``RECORD``; its ``WHEEL`` tags kept). The subset is the base
package without extras: the extras add torch, DeepSpeed, Prefect and lm-eval, minutes of unpacking that test the
same mechanism again. The full round trip (``make wheelhouse`` from the registry, 204 wheels, then ``make install
WHEELHOUSE=...``) was measured by hand (docs/install.md). ``wheelhouse.py``'s requirement handling is tested
directly.

pip is pointed at a dead index (127.0.0.1:9) and no other find-links, so an install step that forgot
``--no-index`` or a wheel missing from the wheelhouse fails here.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import wheelhouse  # noqa: E402


def closure(requirements: list[str]) -> set[str]:
    """Installed distributions needed by ``requirements`` here (markers evaluated, extras followed)."""
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(r), "") for r in requirements]
    names: set[str] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        for wanted in ["", *sorted(req.extras)]:
            if (name, wanted) in seen:
                continue
            seen.add((name, wanted))
            names.add(name)
            todo += [(Requirement(r), wanted) for r in md.distribution(name).requires or []]
    return names


def pack_installed(name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``name``: its files under site-packages (scripts, data and
    bytecode outside it left out: pip regenerates entry points), a fresh RECORD, its own WHEEL tags."""
    dist = md.distribution(name)
    info = next(f for f in dist.files if f.parts[0].endswith(".dist-info"))
    wheel_meta = (Path(dist.locate_file(info.parts[0])) / "WHEEL").read_text()
    tags = [line.split(":", 1)[1].strip().split("-") for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))  # py2.py3-none-any
    stem = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}"
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    path = out / f"{stem}-{tag}.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for f in dist.files:
            if f.parts[0] == ".." or "__pycache__" in f.parts or (f.parts[0] == info.parts[0] and f.name in skip):
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            whl.writestr(f.as_posix(), data)
            record.append(f"{f.as_posix()},sha256={digest},{len(data)}")
        record.append(f"{info.parts[0]}/RECORD,,")
        whl.writestr(f"{info.parts[0]}/RECORD", "\n".join(record) + "\n")
    return path


def test_the_project_requirements_follow_the_extras_it_names():
    reqs = wheelhouse.project_requirements(ROOT / "pyproject.toml", ["all"])
    names = {wheelhouse.requirement_name(r) for r in reqs}
    assert {"numpy", "torch", "deepspeed", "prefect", "setuptools", "pybind11"} <= names  # all = train + flows
    assert "bloomstack" not in names and "lm-eval" not in names and "pytest" not in names
    with pytest.raises(SystemExit, match="no extra 'gpu'"):
        wheelhouse.project_requirements(ROOT / "pyproject.toml", ["gpu"])


def test_kenlm_comes_only_with_its_extra_and_dev():
    """kenlm has no wheels (pip compiles it): in no extra a user installs by default, in dev for its tests."""
    def names(extras: list[str]) -> set[str]:
        return {wheelhouse.requirement_name(r)
                for r in wheelhouse.project_requirements(ROOT / "pyproject.toml", extras)}

    assert "kenlm" not in names(["all"]) | names(["clean"]) | names([])
    assert "kenlm" in names(["kenlm"]) and "kenlm" in names(["dev"]) and "sentencepiece" in names(["dev"])


def test_leaving_torch_out_drops_what_only_torch_needs():
    def item(name, *requires):
        return {"metadata": {"name": name, "version": "1", "requires_dist": list(requires)}}

    items = [item("deepspeed", "torch", "numpy"), item("torch", "nvidia-cublas-cu12==12.8; platform_system == 'Linux'",
                                                       "sympy", "filelock"),
             item("nvidia-cublas-cu12"), item("sympy", "mpmath"), item("mpmath"), item("numpy"), item("filelock"),
             item("transformers", "filelock")]
    kept = {i["metadata"]["name"] for i in wheelhouse.without_torch(items, ["deepspeed>=0.16", "transformers"])}
    assert kept == {"deepspeed", "numpy", "transformers", "filelock"}


@pytest.mark.integration
@pytest.mark.slow
def test_make_install_from_a_wheelhouse_with_no_index(tmp_path):
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = closure(meta["project"]["dependencies"] + meta["build-system"]["requires"])
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name in sorted(needed):
        pack_installed(name, house)
    # the project's source as a clone has it (an editable install builds the extension into its tree)
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        if rel.split("/")[0] in {"bloomdata", "bloomtrain", "flows", "csrc", "setup.py", "pyproject.toml",
                                 "MANIFEST.in", "Makefile", "README.md", "wheelhouse.py"}:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_CONFIG_FILE=os.devnull,
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    run = subprocess.run(["make", "install", f"VENV={venv}", f"WHEELHOUSE={house}", "TORCH_SPEC=", "EXTRAS=",
                          "BYTECODE=0"],
                         cwd=src, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "127.0.0.1" not in run.stdout + run.stderr  # no index was asked
    check = ("import bloomdata, bloomdata._index_helpers, bloomdata._bpe_learner, bloomdata._bpe_encoder, numpy, "
             "pyarrow, dask.distributed, importlib.util; "
             "assert numpy.__file__.startswith(__import__('sys').prefix), numpy.__file__; "
             "assert importlib.util.find_spec('torch') is None; print(bloomdata.__file__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)  # not the repository: `-c` puts the working directory on sys.path
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == str(src / "bloomdata" / "__init__.py")  # the editable install of this source
    cli = subprocess.run([str(venv / "bin" / "bloomdata"), "--help"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and "build" in cli.stdout
