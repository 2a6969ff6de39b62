"""The command blocks of README.md and docs/*.md run as written on a fresh clone after ``make install``.

Every fenced block says what it is (docs/README.md, "Command blocks"): ``sh`` runs as written; ``sh needs-gpu``,
``needs-cluster``, ``needs-data``, ``needs-network`` say what it needs that a CPU machine's fresh clone lacks;
``text``, ``python``, ``yaml`` are not commands. ``test_every_block_says_what_it_is`` checks that, and that the
docs index links every page.

``test_the_sh_blocks_run`` runs every ``sh`` block of each page in order, then every example of the commands'
``--help`` (``help_examples``: an indented command line; one marked ``# needs-data`` only has its flags parsed),
one command at a time, in a scratch
copy of the clone (links to the repository's files; ``demo_out`` is the session's ``make demo``,
tests/harness/demo_run.py), with ``.venv/bin`` first on the PATH and small sizes (``SMALL``: a few training iterations,
a few documents, a few generated tokens). A command that another test runs end to end at small sizes
(``ELSEWHERE``: the demo, the Prefect UI, the rehearsal, the mixture search, make test itself) is checked here
for its flags, through the command's own parser, and not run again.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = {"needs-gpu", "needs-cluster", "needs-data", "needs-network"}
NOT_COMMANDS = {"text", "python", "yaml"}
FENCE = re.compile(r"^```(?P<info>[^`\n]*)\n(?P<body>.*?)^```$", re.M | re.S)

# (a command's start, what is appended to it): small sizes, so that every block runs in seconds to a minute
SMALL = (
    ("bloomtrain train ", " schedule.train_iters=3"),
    ("torchrun ", " schedule.train_iters=3"),
    ("bloomtrain evaluate ", " --max-docs-per-lang 3"),
    ("bloomtrain generate ", " --max-new-tokens 8"),
)
# (a command's start, the test that runs it end to end at small sizes, the module whose parser() checks its flags)
ELSEWHERE = (
    ("make demo", "tests/harness/demo_run.py (the session's make demo)", None),
    ("make ui", "tests/flows/test_ui.py", None),
    ("make test", ".ci/run (CI runs make test)", None),
    ("python -m flows.demo", "tests/harness/demo_run.py (the session's make demo)", "flows.demo"),
    ("python -m flows.ui", "tests/flows/test_ui.py", "flows.ui"),
    ("python -m flows.rehearsal", "tests/flows/test_rehearsal.py", "flows.rehearsal"),
    ("bloomtrain mixture-search", "tests/bloomtrain/test_mixture_search.py", "bloomtrain.cli.mixture_search"),
)


@dataclass
class Block:
    page: Path
    line: int
    info: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """One entry per command: continuation lines joined, comment lines and blank lines left out."""
        text = re.sub(r"\\\n\s*", " ", self.body)
        return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m["info"].strip(), m["body"]) for m in FENCE.finditer(text)]


def test_every_block_says_what_it_is():
    found = [b for page in PAGES for b in blocks(page)]
    assert len(found) > 20
    wrong = [(b.where, b.info) for b in found if not (
        b.info in NOT_COMMANDS or b.info == "sh" or (b.info.startswith("sh ") and set(b.info.split()[1:]) <= NEEDS))]
    assert not wrong, f"blocks that do not say what they are (docs/README.md, 'Command blocks'): {wrong}"
    index = (ROOT / "docs" / "README.md").read_text()
    assert not [p.name for p in PAGES[1:] if p.name != "README.md" and f"]({p.name})" not in index]
    readme = (ROOT / "README.md").read_text()
    assert all(f"](docs/{name})" in readme for name in ("README.md", "install.md", "cleaning.md", "flows.md"))


def _sandbox(tmp_path: Path, demo_out: Path) -> Path:
    """A scratch clone: the repository's top-level entries as links, and the session demo's output as demo_out."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("demo_out", "runs", ".git", "test-artifacts"):
            (clone / entry.name).symlink_to(entry)
    (clone / "demo_out").symlink_to(demo_out)
    return clone


def _elsewhere(command: str, where: str, module: str | None, clone: Path, env: dict[str, str]) -> None:
    """The flags of a command another test runs: its own parser accepts them (make: the target exists)."""
    argv = shlex.split(command.split(" #")[0])
    if argv[0] == "make":
        proc = subprocess.run(["make", "-n", *argv[1:]], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (command, proc.stderr)
    else:
        prefix = len(next(p for p, _, m in ELSEWHERE if m == module).split())
        importlib.import_module(module).parser().parse(argv[prefix:])  # type: ignore[union-attr]
    print(f"  (run by {where}) {command}")


def help_examples() -> list[tuple[str, str, str | None]]:
    """(where, command, its module if only its flags are checked) for every command line in the ``--help`` of
    every ``bloomdata`` and ``bloomtrain`` subcommand, continuation lines joined."""
    from bloomdata.cli import COMMANDS as DATA  # noqa: PLC0415
    from bloomtrain.cli import COMMANDS as TRAIN  # noqa: PLC0415

    found = []
    for prog, commands in (("bloomdata", DATA), ("bloomtrain", TRAIN)):
        for name, (module, _) in commands.items():
            parser = importlib.import_module(module).parser()
            text = re.sub(r"\\\n\s*", " ", getattr(parser, "parser", parser).format_help())  # argparse: verbatim
            for line in text.splitlines():
                if re.match(r"\s{4}(bloomdata|bloomtrain|torchrun) ", line):
                    command = line.strip()
                    needs_data = re.search(r" #\s*needs-data", command) is not None
                    found.append((f"{prog} {name} --help", command, module if needs_data else None))
    return found


def test_the_help_examples_are_commands_that_run_here():
    found = help_examples()
    assert len(found) >= 15
    assert not [c for _, c, _ in found if "../" in c or re.search(r"\[--|\.\.\.", c.split(" #")[0])], found


@pytest.mark.integration
def test_the_sh_blocks_run(demo_run, tmp_path):
    clone = _sandbox(tmp_path, demo_run.out)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PREFECT_HOME": str(tmp_path / "prefect-home"),
           # a flow run by a page starts Prefect's temporary server: its 20 s default is short on 2 busy cores
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    env.pop("PREFECT_API_URL", None)
    ran = 0
    for page in PAGES:
        for block in (b for b in blocks(page) if b.info == "sh"):
            for command in block.commands():
                other = next(((w, m) for start, w, m in ELSEWHERE if command.startswith(start)), None)
                if other is not None:
                    _elsewhere(command, *other, clone, env)
                    continue
                small = command.split(" #")[0].rstrip() + "".join(
                    extra for start, extra in SMALL if command.startswith(start))
                t0 = time.monotonic()
                proc = subprocess.run(["bash", "-c", small], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, timeout=600)
                assert proc.returncode == 0, f"{block.where}: {small}\n{(proc.stdout + proc.stderr)[-3000:]}"
                print(f"  {time.monotonic() - t0:5.1f} s  {block.where}: {small}")
                ran += 1
    for where, command, module in help_examples():
        if module is not None:  # needs the user's data: its flags only
            argv = shlex.split(command.split(" #")[0])
            importlib.import_module(module).parser().parse(argv[2:])
            continue
        other = next(((w, m) for start, w, m in ELSEWHERE if command.startswith(start)), None)
        if other is not None:
            _elsewhere(command, *other, clone, env)
            continue
        t0 = time.monotonic()
        proc = subprocess.run(["bash", "-c", command.split(" #")[0]], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{where}: {command}\n{(proc.stdout + proc.stderr)[-3000:]}"
        print(f"  {time.monotonic() - t0:5.1f} s  {where}: {command}")
        ran += 1
    assert ran >= 25
