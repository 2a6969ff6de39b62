"""Deployments: prefect.yaml registers through `prefect deploy --all`, `python -m flows.serve` serves the
same ten, a run started through the API with JSON parameters reaches Completed, and a served training run
cancelled through the API ends Cancelled with none of its processes left. `python -m flows.deploy` writes the
chosen pull steps, and a `prefect worker start` in another directory runs a deployment through them.

Both subprocesses get the shared test server's URL explicitly: the harness keeps it in a context variable
that child processes do not inherit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.config import DEMO_CORPUS
from flows.launch import kill_group
from flows.serve import PARTIAL_PARAMETERS
from tests.flows.prefect_api import alive

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def _env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
            "PYTHONPATH": str(REPO)}


def _yaml_names() -> list[str]:
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    return [f"{load_flow_from_entrypoint(str(REPO / d['entrypoint'])).name}/{d['name']}" for d in spec["deployments"]]


def test_prefect_yaml_matches_serve():
    """The same ten flows either way, each deployment named after what it runs; distinct names ("-served"), so
    serving never overwrites a pool deployment (a served copy of one inherits its pull steps and cannot load)."""
    from flows.serve import DEPLOYMENTS, SERVED, deployment_names

    flows = {f"bloom-{name}" for name in ("pipeline", "clean", "tokenizer", "dataset", "blend", "mixture-search",
                                          "train", "export", "evaluate", "rehearsal")}
    assert set(DEPLOYMENTS) == flows and len(set(DEPLOYMENTS.values())) == len(flows)
    assert sorted(_yaml_names()) == sorted(f"{f}/{DEPLOYMENTS[f]}" for f in flows)
    assert sorted(deployment_names()) == sorted(f"{f}/{DEPLOYMENTS[f]}{SERVED}" for f in flows)
    assert "bloom-train/launch-training" in _yaml_names()


def test_pull_steps_for_a_worker_elsewhere(monkeypatch):
    """prefect.yaml's pull clones and installs (values from the worker's environment); flows.deploy writes the
    chosen set's values in: git (this checkout's remote and branch by default) or shared (an absolute path)."""
    from bloomdata.errors import BloomstackError
    from flows.deploy import DeployConfig, deploy_spec

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    clone, install = spec["pull"]
    assert clone["prefect.deployments.steps.git_clone"]["repository"] == "{{ $BLOOMSTACK_REPOSITORY }}"
    assert install["prefect.deployments.steps.pip_install_requirements"] == {
        "directory": "{{ clone.directory }}", "requirements_file": "requirements-worker.txt"}
    assert "-e .[train,flows]" in (REPO / "requirements-worker.txt").read_text().splitlines()

    git = deploy_spec(DeployConfig(repository="https://git.lab/bloomstack.git", branch="exp", pool="gpus"))
    assert git["pull"][0] == {"prefect.deployments.steps.git_clone": {
        "id": "clone", "repository": "https://git.lab/bloomstack.git", "branch": "exp"}}
    assert git["pull"][1] == install  # the clone's directory is the step output, filled in on the worker
    assert {d["work_pool"]["name"] for d in git["deployments"]} == {"gpus"}
    assert {d["work_pool"]["job_variables"]["env"]["TOKENIZERS_PARALLELISM"] for d in git["deployments"]} == {"false"}

    shared = deploy_spec(DeployConfig(pull="shared", shared_dir=Path("/nfs/bloomstack")))
    assert shared["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": "/nfs/bloomstack"}}]
    assert deploy_spec(DeployConfig(pull="shared"))["pull"][0][
        "prefect.deployments.steps.set_working_directory"]["directory"] == str(REPO)
    with pytest.raises(BloomstackError, match="absolute path"):
        deploy_spec(DeployConfig(pull="shared", shared_dir=Path("bloomstack")))
    spec = deploy_spec(DeployConfig(pull="shared", name=["bloom-train/launch-training", "bits-per-byte"]))
    assert [d["name"] for d in spec["deployments"]] == ["launch-training", "bits-per-byte"]
    with pytest.raises(BloomstackError, match="name train: no such deployment"):
        deploy_spec(DeployConfig(pull="shared", name=["bloom-train/train"]))
    monkeypatch.setattr("flows.deploy._git", lambda *args: None)  # a checkout without an origin remote
    with pytest.raises(BloomstackError, match="no git remote `origin`"):
        deploy_spec(DeployConfig())


@pytest.mark.integration
def test_a_worker_in_another_directory_runs_a_deployment(prefect_harness, tmp_path):
    """`python -m flows.deploy --pull shared` onto a process pool, then a real `prefect worker start` whose
    directory (and import path) is elsewhere runs the tokenizer deployment: only the pull step, set to this
    checkout, lets it find `flows/data.py`."""
    from prefect import get_client
    from prefect.deployments import run_deployment

    pool, elsewhere = "bloomstack-elsewhere", tmp_path / "worker"
    elsewhere.mkdir()
    deployed = subprocess.run([sys.executable, "-m", "flows.deploy", "--pull", "shared", "--pool", pool,
                               "--name", "bloom-tokenizer/train-tokenizer"], cwd=elsewhere, env=_env(),
                              capture_output=True, text=True, timeout=240)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("bloom-tokenizer/train-tokenizer")
    assert deployment.work_pool_name == pool
    assert deployment.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]

    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 - closed in the finally below
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--limit", "1"],
                              cwd=elsewhere, env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1"},
                              start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    try:
        out = tmp_path / "tok"
        config = {"sources": [{"paths": [str(DEMO_CORPUS / "yo.jsonl.gz")], "lang": "yo"}], "out_dir": str(out),
                  "vocab_size": 300, "byte_budget": 50_000, "show_progress": False}
        run = run_deployment("bloom-tokenizer/train-tokenizer", timeout=240,
                             parameters={"config": config, "fertility_docs_per_lang": 5})
        assert run.state.is_completed(), (run.state, (tmp_path / "worker.log").read_text()[-4000:])
        assert (out / "tokenizer.json").exists() and (out / "_stage.json").exists()
    finally:
        os.killpg(worker.pid, signal.SIGINT)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_group(worker, grace_s=5)
        log.close()


@pytest.mark.integration
def test_deploy_serve_and_run_through_the_api(prefect_harness, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="bloomstack", type="process"))
    deployed = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"], cwd=REPO,
                              env=_env(), capture_output=True, text=True, timeout=240)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    with get_client(sync_client=True) as client:
        for name in _yaml_names():
            deployment = client.read_deployment_by_name(name)
            assert deployment.work_pool_name == "bloomstack"
            assert deployment.enforce_parameter_schema == (name.split("/")[0] not in PARTIAL_PARAMETERS)

    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed in the finally below
    server = subprocess.Popen([sys.executable, "-m", "flows.serve"], cwd=REPO, env=_env(), start_new_session=True,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                try:
                    # the last one registered
                    served = client.read_deployment_by_name("bloom-rehearsal/tr11-on-cpu-served")
                    break
                except ObjectNotFound:
                    assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                    time.sleep(1)
        assert served.work_pool_name is None  # run by the serve process itself
        out = tmp_path / "tok"
        config = {"sources": [{"paths": [str(DEMO_CORPUS / "yo.jsonl.gz")], "lang": "yo"}], "out_dir": str(out),
                  "vocab_size": 300, "byte_budget": 50_000, "show_progress": False}
        run = run_deployment("bloom-tokenizer/train-tokenizer-served",
                             parameters={"config": config, "fertility_docs_per_lang": 5}, timeout=180)
        assert run.state.is_completed(), (run.state, (tmp_path / "serve.log").read_text()[-4000:])
        assert (out / "tokenizer.json").exists() and (out / "_stage.json").exists()

        # Cancel a served training run (the UI's Cancel button): the job's ranks and their children die.
        pidfile = tmp_path / "pids"
        launch = {"module": "dummy_job", "module_args": [], "nproc_per_node": 2, "grace_s": 5,
                  "env": {"PYTHONPATH": str(HERE), "DUMMY_JOB_PIDFILE": str(pidfile), "DUMMY_JOB_HANG": "1",
                          "DUMMY_JOB_GRANDCHILDREN": "1"}}
        # A partial config, completed from the demo's defaults (the server's schema would call it incomplete).
        partial = {"train": {"schedule": {"train_iters": 5}}, "launch": launch, "retries": 0,
                   "out_dir": str(tmp_path / "train")}
        run = run_deployment("bloom-train/launch-training-served", parameters={"config": partial}, timeout=0)
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pids.[0-9]"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        pids = [int(p) for f in tmp_path.glob("pids.[0-9]") for p in f.read_text().split()]
        assert len(pids) >= 2 * 3 and all(alive(p) for p in pids), (tmp_path / "serve.log").read_text()[-3000:]
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(run.id, Cancelling(), force=True)
            deadline = time.monotonic() + 90
            while not (state := client.read_flow_run(run.id).state).is_final() and time.monotonic() < deadline:
                time.sleep(1)
        assert state.is_cancelled(), state
        assert "train_iters: 5" in (tmp_path / "train" / "train.yaml").read_text()
        deadline = time.monotonic() + 30
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]
    finally:
        os.killpg(server.pid, signal.SIGINT)  # serve pauses its schedules on a clean stop
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_group(server, grace_s=5)
        log.close()


@pytest.mark.integration
def test_the_git_pull_step_clones_this_commit(prefect_harness, tmp_path, monkeypatch):
    """The git pull as flows.deploy writes it, run by Prefect's own step runner in a worker's directory: a clone
    of this commit (pushed to a local bare repository, as a remote) with the files the next steps need. (The
    step runner reports its steps as events: to the shared test server, not a temporary one of its own.)"""
    import asyncio

    from prefect.deployments.steps.core import run_steps

    from flows.deploy import DeployConfig, deploy_spec

    bare, worker = tmp_path / "bloomstack.git", tmp_path / "worker"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(REPO), "push", "-q", str(bare), "HEAD:refs/heads/deployed"], check=True)
    clone, install = deploy_spec(DeployConfig(repository=str(bare), branch="deployed"))["pull"]
    worker.mkdir()
    monkeypatch.chdir(worker)
    outputs = asyncio.run(run_steps([clone]))
    directory = worker / outputs["directory"]  # relative to the worker's directory: the flow run goes there next
    assert directory.resolve().parent == worker.resolve() and (directory / "flows" / "data.py").is_file()
    requirements = install["prefect.deployments.steps.pip_install_requirements"]["requirements_file"]
    assert (directory / requirements).is_file() and (directory / "prefect.yaml").is_file()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout == head
