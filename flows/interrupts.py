"""Ctrl-C and SIGTERM: the training saves, one line says where the run stopped, nothing is left running.

A terminal's Ctrl-C sends SIGINT to its whole foreground process group; a service manager sends SIGTERM to
the process. Either way, for ``python -m flows.demo`` / ``flows.rehearsal`` (and ``make demo``):

- the training job, in a session of its own (flows.launch), is stopped by the train stage: SIGTERM to its
  process group, which the trainer answers by saving at the end of its iteration (checkpoint.exit_signals),
  SIGKILL after ``launch.grace_s``;
- the stage that was running turns the interrupt into ``Interrupted`` (its name and, for the training, the
  checkpoint it saved), a KeyboardInterrupt that Prefect's engines record as Crashed and re-raise;
- ``run_entry_point`` prints one line (which stage, and that the same command resumes) and stops the
  temporary Prefect server it started (``temporary_server``) in a session of its own: Prefect's own
  temporary server shares the terminal's process group, died with the first Ctrl-C, and the flow then retried
  the dead API for minutes (271 lines of httpx tracebacks).

The first signal also silences the console (the runs' logs still go to the API: the UI keeps the whole
record): a Ctrl-C used to print a screen of crash reports. Later signals are ignored until the stop is done:
a second Ctrl-C would otherwise abandon the training before its save.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

from prefect.exceptions import TerminationSignal

from flows.launch import kill_group

INTERRUPTS = (KeyboardInterrupt, TerminationSignal)  # Ctrl-C; SIGTERM inside a Prefect flow run


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C or SIGTERM stopped a stage: which one, and the checkpoint its training saved (if it trains)."""

    def __init__(self, stage: str, checkpoint: str | None = None) -> None:
        super().__init__(stage)
        self.stage, self.checkpoint = stage, checkpoint

    def line(self, prog: str) -> str:
        saved = f" (the training saved {self.checkpoint})" if self.checkpoint else ""
        return f"{prog}: interrupted during the {self.stage} stage{saved}; run the same command again to resume there"


def quiet_console() -> None:
    """Stop every log handler that writes to the terminal (the API handlers keep the runs' record)."""
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (
                    sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                handler.setLevel(logging.CRITICAL + 1)


@contextlib.contextmanager
def stage_interrupts(stage: str, checkpoint: Callable[[], str | None] | None = None) -> Iterator[None]:
    """Turn a Ctrl-C inside ``stage`` into ``Interrupted`` (the innermost stage names it). A SIGTERM inside a
    flow run (Prefect's ``TerminationSignal``) goes on as it is, since Prefect tells a runner's cancel from a
    crash by it; it only carries the ``Interrupted`` along for ``run_entry_point``'s line."""
    try:
        yield
    except Interrupted:
        raise
    except TerminationSignal as exc:
        quiet_console()
        if not hasattr(exc, "bloomstack_interrupted"):
            exc.bloomstack_interrupted = Interrupted(stage, checkpoint() if checkpoint else None)  # type: ignore[attr-defined]
        raise
    except KeyboardInterrupt:
        quiet_console()
        raise Interrupted(stage, checkpoint() if checkpoint else None) from None


def interrupted_in(exc: BaseException | None) -> Interrupted | None:
    """The ``Interrupted`` an interrupt carries, also through the exceptions raised while handling it (Prefect
    re-sends a SIGTERM to the entry point's handler once its engines recorded the crash)."""
    while exc is not None:
        if isinstance(exc, Interrupted):
            return exc
        found: Interrupted | None = getattr(exc, "bloomstack_interrupted", None)
        if found is not None:
            return found
        exc = exc.__context__
    return None


def _stop_on_first_signal(received: list[int]) -> Callable[[int, object], None]:
    def handler(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
        received.append(signum)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # the stop in progress (the training's save) must not be cut short
        quiet_console()
        raise KeyboardInterrupt

    return handler


def start_server(port: int, env: dict[str, str], *, host: str = "127.0.0.1", log: Path | None = None,
                 timeout_s: float = 180.0) -> subprocess.Popen[bytes]:
    """A Prefect API server (uvicorn on Prefect's app) in a session of its own, once it answers; ``env`` holds
    its settings on top of this process's. Its output goes to ``log`` (None: inherited)."""
    import httpx  # noqa: PLC0415
    from prefect.settings import get_current_settings  # noqa: PLC0415

    env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True),
           # Prefect's telemetry heartbeat (analytics: a call home that offline clusters cannot make) printed an
           # ERROR traceback, 'sqlite3.OperationalError: database is locked', at a start of `python -m
           # flows.rehearsal`; make demo and the tests already turn it off. A user's own setting wins.
           "PREFECT_SERVER_ANALYTICS_ENABLED": os.environ.get("PREFECT_SERVER_ANALYTICS_ENABLED", "false"), **env}
    out = open(log, "ab") if log is not None else None  # noqa: SIM115 - the server's append-only log
    try:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
                                 "--host", host, "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                                env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    finally:
        if out is not None:
            out.close()
    url = f"http://{host}:{port}/api"
    deadline = time.monotonic() + timeout_s
    while not _healthy(httpx, url):
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_group(proc)
            where = f"; its log: {log}" if log is not None else ""
            raise RuntimeError(f"the Prefect server did not start within {timeout_s:.0f} s (exit {proc.poll()}"
                               f"{where}); start one with `prefect server start` and set PREFECT_API_URL")
        time.sleep(0.2)
    return proc


@contextlib.contextmanager
def temporary_server(database: Path | None = None) -> Iterator[None]:
    """Prefect's temporary API server (as Prefect starts one when ``PREFECT_API_URL`` is unset), but in a
    session of its own and stopped last, after the flow recorded how it ended. Nothing when an API is set.
    ``database``: the SQLite file that keeps the runs (``flows.ui`` serves the UI on it later); None: Prefect's
    own under PREFECT_HOME."""
    from prefect.server.api.server import SubprocessASGIServer  # noqa: PLC0415
    from prefect.settings import PREFECT_API_URL, temporary_settings  # noqa: PLC0415

    if PREFECT_API_URL.value():
        yield
        return
    port = SubprocessASGIServer().find_available_port()
    env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url(database)
    proc = start_server(port, env)
    try:
        with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):
            try:
                yield
            finally:
                _drain_prefect()  # the runs' last logs and events reach the server before it stops
    finally:
        kill_group(proc)  # the whole group, the server's own children too


def database_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{Path(path).resolve()}"


def _drain_prefect() -> None:
    from prefect.events.worker import EventsWorker  # noqa: PLC0415
    from prefect.logging.handlers import APILogWorker  # noqa: PLC0415

    with contextlib.suppress(RuntimeError):  # a worker that never started
        APILogWorker.instance().drain()
    EventsWorker.drain_all()


def _healthy(httpx: ModuleType, url: str) -> bool:
    try:
        return bool(httpx.get(f"{url}/health", timeout=2.0).status_code == 200)
    except httpx.HTTPError:
        return False


def exit_process(code: int) -> None:
    """``sys.exit(code)``, except after an interrupt (130): the runs are recorded, the logs drained and the
    server stopped, so the process ends at once (Python's teardown of torch and Prefect took 5-10 s more
    under load, past the 30 s a Ctrl-C may take)."""
    if code != 130:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_entry_point(prog: str, body: Callable[[], int], database: Path | None = None) -> int:
    """Run ``body`` (a command's work: flows) with the temporary server (its runs kept in ``database``, when
    given), stopping cleanly on SIGINT/SIGTERM: one line, exit 130. A body that handles the interrupt itself
    (``prefect.serve`` shuts its runner down and returns) still ends with the line."""
    received: list[int] = []
    handler = _stop_on_first_signal(received)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with temporary_server(database):
            code = body()
    except INTERRUPTS as exc:
        if (where := interrupted_in(exc)) is not None:
            print(where.line(prog), file=sys.stderr, flush=True)
            return 130
        received.append(signal.SIGINT)
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)
    if received:
        print(f"{prog}: interrupted ({signal.Signals(received[0]).name}); runs in progress stopped where they were (a "
              "training saves first): run them again to resume", file=sys.stderr, flush=True)
        return 130
    return code
