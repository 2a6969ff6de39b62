"""``python -m flows.deploy``: register prefect.yaml's deployments on a process work pool, with the pull steps that
let a worker on another machine run them.

A worker runs each flow run in a fresh process, which first runs the deployment's pull steps to find the code.
prefect.yaml keeps two sets (``definitions.pulls``), chosen here by ``--pull``:

- ``git``: ``git_clone`` of ``--repository`` at ``--branch`` (default: this checkout's ``origin`` and current
  branch; workers clone the pushed branch, not this checkout's unpushed commits), then
  ``pip_install_requirements`` (requirements-worker.txt: the clone, editable, its C++ extensions built). A worker
  needs git and the project's Python environment (``make install`` once).
- ``shared``: ``set_working_directory`` to ``--shared-dir`` (default: this checkout), one checkout that every
  worker sees at that path (NFS, Lustre) and that runs as it is there.

The chosen steps, with those values written in, replace prefect.yaml's ``pull`` in a temporary copy, and
``prefect --no-prompt deploy --all`` registers from it (``--name`` keeps only the deployments named). The work pool
(``--pool``, created as a process pool when missing) replaces prefect.yaml's. Needs ``PREFECT_API_URL``: the
server the workers poll.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.errors import BloomstackError

REPO = Path(__file__).resolve().parents[1]
PREFECT_YAML = REPO / "prefect.yaml"


class DeployConfig(BaseModel):
    """Where the deployments go and how their workers get the code (flags generated from it)."""

    model_config = ConfigDict(extra="forbid")

    pull: Literal["git", "shared"] = Field("git", description="how a worker gets the code: git (clone and "
                                           "pip-install it, any machine) or shared (run in --shared-dir)")
    repository: str | None = Field(None, description="git: the URL workers clone (default: this checkout's "
                                   "`origin` remote)")
    branch: str | None = Field(None, description="git: the branch workers clone (default: this checkout's)")
    shared_dir: Path | None = Field(None, description="shared: the checkout's absolute path on every worker "
                                    "(default: this checkout's)")
    pool: str = Field("bloomstack", description="process work pool (created when missing)")
    name: list[str] = Field([], description="deployments to register, e.g. launch-training or "
                            "bloom-train/launch-training (repeatable; default: all)")


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def variables(config: DeployConfig) -> dict[str, str]:
    """The values of the chosen pull steps' ``{{ $BLOOMSTACK_... }}`` placeholders."""
    if config.pull == "shared":
        shared = config.shared_dir or REPO
        if not shared.is_absolute():
            raise BloomstackError(f"shared_dir {shared}: a worker resolves it in its own directory; give the "
                                  "checkout's absolute path on the workers", keys=["shared_dir"])
        return {"BLOOMSTACK_SHARED_DIR": str(shared)}
    repository = config.repository or _git("remote", "get-url", "origin")
    if repository is None:
        raise BloomstackError(f"{REPO}: no git remote `origin` to clone on the workers; pass repository URL "
                              "(a URL every worker can clone) or pull shared", keys=["repository", "pull"])
    branch = config.branch or _git("rev-parse", "--abbrev-ref", "HEAD")
    if branch in (None, "HEAD"):
        raise BloomstackError(f"{REPO}: no current branch (detached HEAD); pass branch NAME", keys=["branch"])
    return {"BLOOMSTACK_REPOSITORY": repository, "BLOOMSTACK_BRANCH": str(branch)}


def _filled(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, text in values.items():
            value = value.replace("{{ $" + name + " }}", text)
        return value
    if isinstance(value, dict):
        return {k: _filled(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, values) for v in value]
    return value


def deploy_spec(config: DeployConfig, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """prefect.yaml (or ``spec``) with the chosen pull steps, their values written in, and the work pool; only the
    deployments named, when some are."""
    spec = spec if spec is not None else yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))
    spec["pull"] = _filled(spec["definitions"]["pulls"][config.pull], variables(config))
    if config.name:
        # a deployment's own name is unique here; prefect deploy's FLOW/NAME would mean the function's name
        wanted = {name.split("/")[-1] for name in config.name}
        known = [d["name"] for d in spec["deployments"]]
        if unknown := sorted(wanted - set(known)):
            raise BloomstackError(f"name {', '.join(unknown)}: no such deployment in {PREFECT_YAML}; "
                                  f"choose among {', '.join(known)}", keys=["name"])
        spec["deployments"] = [d for d in spec["deployments"] if d["name"] in wanted]
    for deployment in spec["deployments"]:
        deployment["work_pool"] = {**deployment["work_pool"], "name": config.pool}
    return spec


def _ensure_pool(name: str) -> None:
    from prefect import get_client  # noqa: PLC0415 - keep `--help` fast
    from prefect.client.schemas.actions import WorkPoolCreate  # noqa: PLC0415
    from prefect.exceptions import ObjectNotFound  # noqa: PLC0415

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            print(f"flows.deploy: created the process work pool {name}")


def deploy(config: DeployConfig) -> int:
    from prefect.settings import PREFECT_API_URL  # noqa: PLC0415

    if not PREFECT_API_URL.value():
        raise BloomstackError("PREFECT_API_URL is not set: workers poll a Prefect server; start one and point "
                              "PREFECT_API_URL at it (docs/flows.md, 'A local Prefect server')")
    spec = deploy_spec(config)
    _ensure_pool(config.pool)
    with tempfile.TemporaryDirectory(prefix="bloomstack-deploy-") as tmp:
        path = Path(tmp) / "prefect.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", str(path),
                               "--all"], cwd=REPO, check=False)
    if done.returncode == 0:
        where = spec["pull"][0]
        print(f"flows.deploy: workers of pool {config.pool} get the code by {config.pull}: {where}")
    return done.returncode


def parser() -> ConfigParser[DeployConfig]:
    return ConfigParser(DeployConfig, "python -m flows.deploy", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    try:
        config, _ = cli.parse(sys.argv[1:] if argv is None else argv)
        return deploy(config)
    except BloomstackError as exc:
        print(f"flows.deploy: error: {cli.message(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
