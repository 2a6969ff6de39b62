"""train_flow against the shared Prefect test server, with torchrun launching a dummy job on 2 ranks.

The dummy (tests/flows/dummy_job.py) stands in for ``bloomtrain train``: it prints loss lines, forks
grandchildren, and writes metrics.jsonl. So these tests exercise the real launch path (torchrun agent,
ranks, process group) in seconds: a run that completes with its summary, one that is skipped on rerun,
one that fails and quotes the job's last lines, one cancelled through the API leaving no process, and
restarts: a rank that fails at first is restarted by torchrun, then the job is relaunched by the flow from
its checkpoint and completes; a rank that keeps failing ends the run after every restart, with the count
and the root cause. The real trainer's restarts are in tests/bloomtrain/test_recovery.py.
"""

from __future__ import annotations

import contextvars
import os
import re
import threading
import time
from pathlib import Path

import pytest

from bloomdata.config_loader import derive
from bloomtrain.exit_record import node_name
from flows.config import TrainStageConfig
from flows.launch_config import LaunchConfig
from flows.train import train_flow
from tests.flows.prefect_api import alive, artifact, run_logs

pytestmark = pytest.mark.integration  # tests/tiers.py

HERE = Path(__file__).parent
NODE = node_name()  # bloomtrain.launcher's name for this machine


def _config(tmp_path: Path, max_restarts: int = 0, retries: int = 0, **env: str) -> TrainStageConfig:
    launch = LaunchConfig(module="dummy_job", module_args=[], nproc_per_node=2, grace_s=5, tail_lines=6,
                          max_restarts=max_restarts, retry_delay_s=0,
                          env={"PYTHONPATH": str(HERE), "DUMMY_JOB_PIDFILE": str(tmp_path / "pids"), **env})
    return TrainStageConfig(launch=launch, retries=retries, out_dir=str(tmp_path / "run"))


def _all_pids(tmp_path: Path) -> list[int]:
    return [int(p) for f in sorted(tmp_path.glob("pids.[0-9]")) for p in f.read_text().split()]


def test_train_completes_publishes_and_skips_on_rerun(prefect_harness, tmp_path):
    cfg = _config(tmp_path, DUMMY_JOB_LINES="4")
    state = train_flow(cfg, return_state=True)
    assert state.is_completed(), state.message
    run = state.result().result
    assert run.summary.iterations == 4 and run.summary.final_loss == pytest.approx(2.5)
    assert run.summary.valid_loss == pytest.approx(1.5)
    assert Path(run.loss_png).stat().st_size > 1000
    assert (tmp_path / "run" / "train.yaml").exists()
    # Each rank's output reached the run's logs (sent to the API in batches: allow a few seconds).
    deadline = time.monotonic() + 15
    while True:
        logs = run_logs(state.state_details.flow_run_id)
        if any("step 3 loss 2.500" in line for line in logs):
            break
        assert time.monotonic() < deadline, logs[-10:]
        time.sleep(0.5)
    run_id = state.state_details.flow_run_id
    md = artifact("training-summary", run_id)
    assert md is not None and "| final training loss | 2.5000 |" in md.data
    assert artifact("training-progress", run_id).data == 100.0
    assert not any(alive(p) for p in _all_pids(tmp_path))

    launched = (tmp_path / "run" / "launch.log").read_text()
    again = train_flow(cfg, return_state=True)
    assert again.is_completed() and again.result().skipped
    assert again.result().result.summary.final_loss == pytest.approx(2.5)
    assert (tmp_path / "run" / "launch.log").read_text() == launched  # skipped: nothing was launched


def test_train_failure_ends_failed_quoting_last_lines(prefect_harness, tmp_path):
    state = train_flow(_config(tmp_path, DUMMY_JOB_EXIT_CODE="3", DUMMY_JOB_LINES="30"), return_state=True)
    assert state.is_failed()
    # The decision (bloomtrain.recovery) and the job's last lines: the ranks' last words and the agent's line.
    # dummy_job keeps no exit records: a rank that exits 3 without one is the root cause.
    assert re.match(f"training failed after 1 launch and 0 torchrun restarts \\(see the training-restarts artifact\\): "
                    f"training failed \\(rank [01] on {NODE} exited with code 3 without an exit record\\) after saving "
                    f"global_step30; not relaunched \\(relaunches are off: max 0\\)", state.message), state.message
    assert "diverged (exit 3)" in state.message and "step 29 loss" in state.message
    assert "step 10 loss" not in state.message and "launcher/api.py" not in state.message
    assert not (tmp_path / "run" / "_stage.json").exists()  # a failed stage is never marked done


def test_exit_zero_without_training_is_a_failure(prefect_harness, tmp_path):
    state = train_flow(_config(tmp_path, DUMMY_JOB_LINES="0"), return_state=True)  # logs no iteration
    assert state.is_failed() and "logged no training iteration" in state.message
    assert not (tmp_path / "run" / "_stage.json").exists()


def test_a_config_the_trainer_would_reject_is_not_launched(prefect_harness, tmp_path):
    cfg = _config(tmp_path, max_restarts=3, retries=3)
    cfg.overrides = ["schedule.train_iters=oops"]  # torchrun would restart the trainer's exit 2 three times
    state = train_flow(cfg, return_state=True)
    assert state.is_failed() and "nothing was launched: override schedule.train_iters=oops" in state.message
    assert not (tmp_path / "run" / "launch.log").exists() and not list(tmp_path.glob("pids*"))


def test_cancelled_training_leaves_no_process(prefect_harness, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.states import Cancelling

    cfg = _config(tmp_path, DUMMY_JOB_HANG="1", DUMMY_JOB_GRANDCHILDREN="2")
    name = f"cancel-{tmp_path.name}"
    box: dict = {}
    ctx = contextvars.copy_context()  # the harness API URL lives in a context variable
    runner = threading.Thread(target=ctx.run, args=(lambda: box.update(
        state=train_flow.with_options(flow_run_name=name)(cfg, return_state=True)),))
    runner.start()
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("pids.[0-9]"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = _all_pids(tmp_path)
    assert len(pids) >= 2 * 4 and all(alive(p) for p in pids)  # agent, 2 ranks, 2x(bash, sleep) each
    with get_client(sync_client=True) as client:
        run = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))[0]
        client.set_flow_run_state(run.id, Cancelling(), force=True)
    runner.join(timeout=60)
    assert not runner.is_alive()
    assert box["state"].is_cancelled(), box["state"]
    assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]


def test_deepspeed_launcher_runs_the_job(prefect_harness, tmp_path):
    cfg = _config(tmp_path, DUMMY_JOB_LINES="3")
    cfg.launch = derive(cfg.launch, launcher="deepspeed")
    state = train_flow(cfg, return_state=True)
    assert state.is_completed(), state.message
    assert state.result().result.summary.iterations == 3
    assert "WORLD INFO DICT: {'localhost': [0, 1]}" in (tmp_path / "run" / "launch.log").read_text()
    assert sorted(p.name for p in tmp_path.glob("pids.[0-9]")) == ["pids.0", "pids.1"]  # both ranks ran
    assert not any(alive(p) for p in _all_pids(tmp_path))


def test_sbatch_job_is_scancelled_when_the_run_times_out(prefect_harness, tmp_path):
    # A fake Slurm: sbatch --wait prints the job id and blocks; scancel records which job it was asked to stop.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'Submitted batch job 4242'\nexec sleep 300\n")
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'scancelled'}\n")
    for tool in ("sbatch", "scancel"):
        (bin_dir / tool).chmod(0o755)
    cfg = _config(tmp_path)
    cfg.launch = derive(cfg.launch, launcher="sbatch", sbatch_script=str(tmp_path / "job.sh"), timeout_s=3, grace_s=2,
                        env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}:{old_path}"  # scancel runs from the flow process
    try:
        state = train_flow(cfg, return_state=True)
    finally:
        os.environ["PATH"] = old_path
    assert state.is_failed() and "timed out" in state.message and "Submitted batch job 4242" in state.message
    assert (tmp_path / "scancelled").read_text().strip() == "4242"


def _restart_rows(run_id) -> list[list[str]]:
    """The training-restarts artifact's table: [#, when, by, why, resumed from] per restart."""
    md = artifact("training-restarts", run_id)
    assert md is not None
    rows = [line for line in md.data.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_failed_ranks_are_restarted_by_torchrun_then_relaunched_from_the_checkpoint(prefect_harness, tmp_path):
    # rank 1 fails its first 2 starts: torchrun restarts it once, gives up, and the flow's relaunch completes
    cfg = _config(tmp_path, max_restarts=1, retries=2, DUMMY_JOB_LINES="4", DUMMY_JOB_FAIL_STARTS="2",
                  DUMMY_JOB_COUNTER=str(tmp_path / "starts"))
    state = train_flow(cfg, return_state=True)
    assert state.is_completed(), state.message
    assert (tmp_path / "starts").read_text() == "3"
    cause = f"rank 1 on {NODE} exited with code 3 without an exit record"
    restarts = state.result().result.restarts
    assert [(r.by, r.cause) for r in restarts] == [
        ("torchrun", cause), ("flow", f"training failed ({cause}) after saving global_step4")]
    assert restarts[1].resumed_from == "global_step4"  # `latest` when the flow relaunched
    assert "RuntimeError: rank 1 diverged (exit 3)" in restarts[1].last_lines
    rows = _restart_rows(state.state_details.flow_run_id)
    # dummy_job keeps no exit records, so the launcher's agent cannot tell which checkpoint its restart loaded
    assert [(r[0], r[2], r[4]) for r in rows] == [("1", "torchrun", "not reported"), ("2", "flow", "global_step4")]
    assert (tmp_path / "run" / "_stage.json").exists()


def test_a_hang_is_restarted_then_relaunched_with_the_rank_that_stopped_named(prefect_harness, tmp_path):
    # rank 1 records a hang (behind rank 0) on its first 2 starts, as the trainer's watchdog would
    cfg = _config(tmp_path, max_restarts=1, retries=2, DUMMY_JOB_LINES="4", DUMMY_JOB_HANG_STARTS="2",
                  DUMMY_JOB_COUNTER=str(tmp_path / "starts"))
    state = train_flow(cfg, return_state=True)
    assert state.is_completed(), state.message
    cause = (rf"rank 1 on {NODE} stopped making progress \(behind: its last finished iteration is 3, its peers' 4\); "
             rf"rank 1 on {NODE}: no finished iteration for 9.0 s after iteration 3 \(stability.hang_timeout_s=auto: "
             rf"8.5 s\); stacks in {tmp_path}/run/exits/launch-1-[^/]+/attempt-")
    restarts = state.result().result.restarts
    assert [r.by for r in restarts] == ["torchrun", "flow"]
    assert re.fullmatch(f"{cause}0", restarts[0].cause), restarts[0].cause  # torchrun's restart after attempt 0
    assert re.fullmatch(rf"training failed \({cause}1\) after saving global_step4", restarts[1].cause)
    rows = _restart_rows(state.state_details.flow_run_id)
    assert [(r[0], r[2], r[4]) for r in rows] == [("1", "torchrun", "global_step4"), ("2", "flow", "global_step4")]


def test_a_rank_that_keeps_failing_ends_the_run_after_every_restart(prefect_harness, tmp_path):
    cfg = _config(tmp_path, max_restarts=1, retries=1, DUMMY_JOB_LINES="2", DUMMY_JOB_FAIL_STARTS="100",
                  DUMMY_JOB_COUNTER=str(tmp_path / "starts"))
    state = train_flow(cfg, return_state=True)
    assert state.is_failed()
    assert (tmp_path / "starts").read_text() == "4"  # 2 launches x (1 start + 1 torchrun restart)
    head = state.message.splitlines()[0]
    # the second launch saved nothing new: bloomtrain.recovery stops before train.retries would
    assert head.startswith(f"training failed after 2 launches and 2 torchrun restarts (see the training-restarts "
                           f"artifact): training failed (rank 1 on {NODE} exited with code 3 without an exit record) "
                           f"without a new checkpoint in this attempt (latest: global_step2); not relaunched: a retry "
                           f"would likely fail the same way. `"), head
    rows = _restart_rows(state.state_details.flow_run_id)
    assert [r[2] for r in rows] == ["torchrun", "flow", "torchrun"]
    assert not (tmp_path / "run" / "_stage.json").exists()
