"""``python -m flows.ui --out demo_out`` (``make ui``): the Prefect UI on the runs a demo recorded, after it ended.

``python -m flows.demo`` (and ``flows.rehearsal``) keep their Prefect database in their output folder,
``<out>/prefect/prefect.db`` (``database``), when no ``PREFECT_API_URL`` is set: the temporary server that
records the runs is gone when the command ends, the database is not. This command serves Prefect's API and UI
on that database (a webserver only: no scheduler or other services; its log in ``<out>/logs/ui.log``), prints
the UI's address and the link to the last ``bloom-pipeline`` run, and runs until Ctrl-C.
"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError

DATABASE = Path("prefect") / "prefect.db"  # under the output folder
PIPELINE_FLOW = "bloom-pipeline"
DEFAULT_PORT = 4200  # Prefect's own default


class UiConfig(BaseModel):
    """What ``python -m flows.ui`` serves, and where (flags generated from it)."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str = Field("demo_out", description="the output folder of `python -m flows.demo` (or flows.rehearsal) "
                                                 "whose runs to show",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    host: str = Field("127.0.0.1", description="address to serve on")
    port: int = Field(DEFAULT_PORT, ge=1, le=65535, description="port to serve on")


def parser() -> ConfigParser[UiConfig]:
    return ConfigParser(UiConfig, "python -m flows.ui", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def database(out_dir: str | Path) -> Path:
    """Where a demo run from ``out_dir`` keeps its Prefect database."""
    return Path(out_dir).resolve() / DATABASE


def base_url(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> str:
    return f"http://{host}:{port}"


def run_link(flow_run_id: object, url: str | None = None) -> str:
    """The UI page of a flow run, as ``flows.ui`` serves it (default address) or on the UI at ``url``."""
    return f"{(url or base_url()).rstrip('/')}/runs/flow-run/{flow_run_id}"


def ui_command(out_dir: str) -> str:
    """The command that serves the UI on ``out_dir``'s runs, as a user types it."""
    return "make ui" if out_dir == UiConfig.model_fields["out_dir"].default else f"python -m flows.ui --out {out_dir}"


def _check_port(host: str, port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise BloomstackError(f"--port {port}: cannot serve on {host}:{port} ({exc.strerror}; another Prefect "
                                  "server?); choose another port with --port") from None


def last_pipeline_run(api_url: str) -> str | None:
    """The id of the most recent ``bloom-pipeline`` flow run the server at ``api_url`` knows, if any."""
    import httpx  # noqa: PLC0415

    body = {"flows": {"name": {"any_": [PIPELINE_FLOW]}}, "sort": "START_TIME_DESC", "limit": 1}
    runs = httpx.post(f"{api_url}/flow_runs/filter", json=body, timeout=30.0).json()
    return str(runs[0]["id"]) if runs else None


def serve(config: UiConfig) -> int:
    from flows.interrupts import database_url, start_server  # noqa: PLC0415 - prefect when serving
    from flows.launch import kill_group  # noqa: PLC0415

    db = database(config.out_dir)
    if not db.is_file():
        raise BloomstackError(f"--out {config.out_dir}: no Prefect database at {db}; run `make demo` (python -m "
                              f"flows.demo --out {config.out_dir}) first")
    _check_port(config.host, config.port)
    url = base_url(config.host, config.port)
    log = Path(config.out_dir).resolve() / "logs" / "ui.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"flows.ui: starting the Prefect UI on {db} (20-40 s) ...", flush=True)
    env = {"PREFECT_API_DATABASE_CONNECTION_URL": database_url(db), "PREFECT_UI_ENABLED": "1",
           "PREFECT_UI_API_URL": f"{url}/api", "PREFECT__SERVER_FINAL": "1", "PREFECT__SERVER_WEBSERVER_ONLY": "1"}
    proc = start_server(config.port, env, host=config.host, log=log)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run = last_pipeline_run(f"{url}/api")
        print(f"flows.ui: the Prefect UI on the runs in {config.out_dir}: {url}", flush=True)
        if run is not None:
            print(f"flows.ui: the pipeline's last run: {run_link(run, url)}", flush=True)
        print("flows.ui: Ctrl-C stops it", flush=True)
        proc.wait()
        print(f"flows.ui: the server stopped (exit {proc.returncode}); see {log}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        kill_group(proc)


def _interrupt(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    try:
        config, _ = parser().parse(sys.argv[1:] if argv is None else argv)
        return serve(config)
    except BloomstackError as exc:
        print(f"flows.ui: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
