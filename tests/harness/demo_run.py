"""One ``make demo`` for the whole test run, at small sizes, on a terminal (a pty: progress bars draw as they do for
a user), shared by the tests that read its console, its Prefect UI, its model card and the docs' commands.

Small sizes: the demo corpus's 10 languages, the first ``DOCS_PER_LANG`` documents of each (every per-language
table keeps its 10 rows, so the console has the shape of a full run), ``TRAIN_ITERS`` iterations, and
everything else as ``make demo`` runs it (Makefile's environment, its own temporary Prefect server and database).
"""

from __future__ import annotations

import fcntl
import gzip
import os
import pty
import re
import struct
import subprocess
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO_CORPUS = ROOT / "flows" / "demo_corpus"
DOCS_PER_LANG = 24
TRAIN_ITERS = 12
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class DemoRun:
    out: Path  # DEMO_OUT
    returncode: int
    lines: list[str]  # what the terminal shows: one entry per line, colours removed
    seconds: float


def small_corpus(folder: Path) -> Path:
    """The first DOCS_PER_LANG documents of every demo language, one jsonl per language as the demo's (each row
    names its language)."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in sorted(DEMO_CORPUS.glob("*.jsonl.gz")):
        with gzip.open(source, "rt", encoding="utf-8") as f, \
                (folder / source.name.removesuffix(".gz")).open("w", encoding="utf-8") as out:
            out.writelines(line for _, line in zip(range(DOCS_PER_LANG), f))
    return folder


def terminal_lines(raw: bytes) -> list[str]:
    """The lines a terminal shows for ``raw``: a carriage return starts the line over (progress bars)."""
    text = ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r\n", "\n")
    lines = [next((seg for seg in reversed(line.split("\r")) if seg.strip()), "") for line in text.split("\n")]
    return lines[:-1] if lines and not lines[-1] else lines


def run_on_terminal(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> tuple[int, bytes]:
    """Run ``cmd`` with stdout and stderr on a pseudo-terminal of 160 columns; (exit code, what it printed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            os.killpg(proc.pid, 9)
        return proc.wait(timeout=60), b"".join(chunks)
    finally:
        os.close(master)


def run_demo(tmp: Path, timeout_s: float = 1200) -> DemoRun:
    out = tmp / "demo_out"
    corpus = small_corpus(tmp / "corpus")
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect-home"), "COLUMNS": "160"}
    env.pop("PREFECT_API_URL", None)  # the demo's own temporary server, as for a user
    make_args = [f"DEMO_OUT={out}", f"DEMO_ARGS=--corpus {corpus} --train-iters {TRAIN_ITERS}"]
    t0 = time.monotonic()
    code, raw = run_on_terminal(["make", "--no-print-directory", "demo", *make_args], env, ROOT, timeout_s)
    (tmp / "console.txt").write_bytes(raw)
    return DemoRun(out=out, returncode=code, lines=terminal_lines(raw), seconds=time.monotonic() - t0)
