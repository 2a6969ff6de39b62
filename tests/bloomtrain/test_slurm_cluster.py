"""``bloomtrain slurm`` jobs on a real Slurm cluster started on this machine (tests/harness/slurm_cluster.py: munged,
slurmctld, slurmd n1 and n2), training tiny-cpu with gloo exactly as a user's job would: the script as
``bloomtrain slurm`` writes it, sbatch, srun, bloomtrain.launcher on each node, the trainer's exit records and
``python -m bloomtrain.recovery`` deciding at the end.

Six jobs run side by side (the nodes offer 4 CPU slots each, so that they fit at once; each job's
``--exclusive`` is dropped for that), all with the same seeded fp32 run (dropout on: the RNG must resume too):

- two nodes x 1 rank, untouched: the same losses, bit for bit, as one node x 2 ranks;
- two nodes, rank 1 SIGKILLed after the checkpoint of iteration 3: both nodes announce the launcher's restart,
  in one line each naming the rank, its node and the checkpoint; no requeue; same losses;
- two nodes, rank 1 frozen (SIGSTOP) after the checkpoint of iteration 3, no launcher restart: rank 0's hang
  watchdog records the hang with its stacks, both nodes name rank 1 in one line, and the job requeues itself and
  resumes from global_step3; same losses;
- the same with rank 1 stuck in Python (a sleep) instead: its own watchdog records the hang with the sleep in its
  stack, and both nodes name it as behind (its last finished iteration 2, its peer's 3); same requeue, same losses;
- one node x 2 ranks whose first allocation runs out of time (the trainer's budget ends after iteration 1):
  it saves, the job requeues itself, the second attempt resumes; same losses;
- one node whose input disappeared after the job was written: exit 2, never requeued, never restarted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bloomtrain.cli.slurm import main as slurm_main
from bloomtrain.exit_record import read_attempt
from tests.bloomtrain.train_helpers import EXACT, TINY, losses_by_start
from tests.harness.slurm_cluster import INSTALL, missing_binaries, start_cluster

pytestmark = pytest.mark.integration  # tests/tiers.py

ROOT = Path(__file__).resolve().parents[2]
ITERS = 6
RUN = [*EXACT, f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "model.hidden_dropout=0.1",
       "model.attention_dropout=0.1", "logging.tensorboard=false", "model.kernels=torch"]
FAULT_JOB = "-m tests.bloomtrain.fault_job"  # bloomtrain train plus one injected fault (fault_job.py)


def _write_job(out: Path, name: str, nodes: int, procs: int, *overrides: str, fault: bool = False,
               max_restarts: int = 1) -> Path:
    run = out / name
    script = out / f"{name}.slurm"
    assert slurm_main(["--config", str(TINY), "--nodes", str(nodes), "--gpus-per-node", str(procs), "--cpus-per-task",
                       "1", "--time", "00:30:00", "--workdir", str(ROOT), "--python", sys.executable, "--max-requeues",
                       "2", "--max-restarts", str(max_restarts), "--job-name", name, "--out", str(script), *RUN,
                       f"checkpoint.dir={run / 'ckpt'}", f"logging.dir={run / 'logs'}", *overrides]) == 0
    text = script.read_text().replace("#SBATCH --exclusive\n", "")
    if fault:
        text = text.replace("-m bloomtrain.cli train", FAULT_JOB)
    script.write_text(text)
    return script


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Start the cluster, submit the jobs at once, wait for all; name -> (scontrol fields, output, run dir)."""
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: {INSTALL}")
    out = tmp_path_factory.mktemp("slurm-jobs")
    cluster = start_cluster(tmp_path_factory.mktemp("slurm-cluster"))
    try:
        bad = _write_job(out, "bad-input", 1, 1, "data.kind=blend", f"data.blend={_blend(out)}")
        Path(_blend(out)).unlink()  # the input is gone by the time the job runs
        submitted = {
            "two-nodes": (_write_job(out, "two-nodes", 2, 1), {}),
            "rank-killed": (_write_job(out, "rank-killed", 2, 1, fault=True),
                            {"FAULT_RANK": "1", "FAULT_AFTER": "3", "FAULT_MARKER": str(out / "killed-once")}),
            "time-budget": (_write_job(out, "time-budget", 1, 2, fault=True), {"FAULT_BUDGET_FIRST_ATTEMPT": "1e-6"}),
            "bad-input": (bad, {}),
            # last: its second node slot frees when bad-input ends, which keeps bad-input on n1
            "rank-hung": (_write_job(out, "rank-hung", 2, 1, "stability.hang_floor_s=3", fault=True, max_restarts=0),
                          {"FAULT_RANK": "1", "FAULT_AFTER": "3", "FAULT_HOW": "stop",
                           "FAULT_MARKER": str(out / "frozen-once")}),
            "rank-asleep": (_write_job(out, "rank-asleep", 2, 1, "stability.hang_floor_s=3", fault=True,
                                       max_restarts=0),
                            {"FAULT_RANK": "1", "FAULT_AFTER": "3", "FAULT_HOW": "sleep",
                             "FAULT_MARKER": str(out / "asleep-once")}),
        }
        ids = {name: cluster.sbatch(script, env, cwd=out) for name, (script, env) in submitted.items()}
        done = {name: cluster.wait(job, timeout_s=420) for name, job in ids.items()}
        yield {name: (done[name] | {"JobId": ids[name]}, (out / f"{name}-{ids[name]}.out").read_text(), out / name)
               for name in ids}
    finally:
        cluster.stop()


def _blend(out: Path) -> str:
    """A blend YAML with one (empty) dataset: enough for the job to be written; training never reads it."""
    blend = out / "blend.yaml"
    if not blend.exists():
        blend.write_text(f"seq_length: 32\nsplit: '90,10,0'\n"
                         f"datasets:\n- {{name: en, prefix: {out}/en, weight: 1.0}}\n")
        for suffix in (".bin", ".idx"):
            (out / f"en{suffix}").touch()
    return str(blend)


def _finished(job: dict[str, str], restarts: int = 0) -> None:
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", str(restarts)), job


def test_two_nodes_train_as_one(jobs):
    (job, output, run), (_, _, one_node) = jobs["two-nodes"], jobs["time-budget"]
    _finished(job)
    assert job["NodeList"] == "n[1-2]"
    losses, starts = losses_by_start(run / "logs")
    assert sorted(losses) == list(range(1, ITERS + 1)) and len(starts) == 1
    assert losses == losses_by_start(one_node / "logs")[0]  # bitwise: fp32, one node x 2 ranks
    lines = output.splitlines()
    # srun --label, then the rank: node ranks come from the rendezvous, so rank 0 runs on task 0 or task 1
    assert any(line.startswith(("0: [rank0]:iter 6/6 ", "1: [rank0]:iter 6/6 ")) for line in lines), output[-2000:]
    assert lines[-1].endswith(f"training finished at iteration {ITERS}; latest checkpoint: global_step{ITERS}")


def test_a_killed_rank_is_restarted_on_both_nodes_and_matches(jobs):
    (job, output, run), (_, _, reference) = jobs["rank-killed"], jobs["two-nodes"]
    _finished(job)
    victim = "n1" if "\n0: [rank1]:" in output else "n2"  # the rendezvous decides which node holds rank 1
    for task, node in (("0", "n1"), ("1", "n2")):  # every node announces the restart
        assert (f"{task}: bloomtrain: node {node}: rank 1 on {victim} killed by SIGKILL; restart 1 of 1 on the same "
                "nodes, resuming from global_step3") in output.splitlines(), output[-3000:]
    assert "Traceback" not in output
    losses, starts = losses_by_start(run / "logs")
    assert starts[1] == list(range(4, ITERS + 1))
    assert losses == losses_by_start(reference / "logs")[0]


def test_a_frozen_rank_is_named_and_the_job_requeues_and_matches(jobs):
    job, _, run = jobs["rank-hung"]
    hung = read_attempt(run / "ckpt" / "exits" / f"job{job['JobId']}-0", 0)
    assert (hung.ranks[0].kind, hung.ranks[0].iteration, hung.ranks[1].kind) == ("hang", 3, "running")
    # the first attempt's rendezvous placed the ranks (a requeued attempt may place them the other way round)
    victim, other = hung.ranks[1].node, hung.ranks[0].node
    assert {victim, other} == {"n1", "n2"}
    cause = (f"rank 1 on {victim} stopped making progress (its process is stopped (SIGSTOP, a debugger), no exit "
             f"record); rank 0 on {other}: no finished iteration for ")
    _hung_then_requeued(jobs, "rank-hung", cause)
    assert "Thread MainThread" in Path(hung.ranks[0].traceback or "").read_text()


def test_a_rank_stuck_in_python_is_named_and_the_job_requeues_and_matches(jobs):
    job, _, run = jobs["rank-asleep"]
    hung = read_attempt(run / "ckpt" / "exits" / f"job{job['JobId']}-0", 0)
    assert (hung.ranks[1].kind, hung.ranks[1].iteration) == ("hang", 2)
    victim = hung.ranks[1].node
    cause = (f"rank 1 on {victim} stopped making progress (behind: its last finished iteration is 2, its peers' 3); "
             f"rank 1 on {victim}: no finished iteration for ")
    _hung_then_requeued(jobs, "rank-asleep", cause)
    main = Path(hung.ranks[1].traceback or "").read_text().split("Thread MainThread", 1)[1].split("\nThread ", 1)[0]
    assert "fault_job.py" in main and "time.sleep(3600)" in main


def _hung_then_requeued(jobs, name: str, cause: str) -> None:
    """Job ``name``'s first attempt hung: every node that printed names ``cause`` in one line, the job requeued
    once and resumed from global_step3 with the losses of the undisturbed two-node job."""
    (job, output, run), (_, _, reference) = jobs[name], jobs["two-nodes"]
    _finished(job, restarts=1)
    ours = [line.split(": ", 1)[1] for line in output.splitlines() if "stopped making progress" in line
            and ": bloomtrain: node " in line]  # every node that printed before srun ended it: at least one
    assert ours and all(line.startswith("bloomtrain: node n") and cause in line and line.endswith(
        "; no torchrun restart left (max_restarts=0); the next attempt resumes from global_step3") for line in ours), \
        output[-3000:]
    decided = [line for line in output.splitlines() if "requeuing (1 of 2)" in line]
    assert len(decided) == 1 and f"training failed ({cause}" in decided[0] and decided[0].endswith(
        "after saving global_step3; requeuing (1 of 2): the next attempt resumes from global_step3"), decided
    assert "Traceback" not in output
    losses, starts = losses_by_start(run / "logs")
    assert starts[1] == list(range(4, ITERS + 1))
    assert losses == losses_by_start(reference / "logs")[0]


def test_a_time_budget_requeues_the_job_and_the_run_matches(jobs):
    (job, output, run), (_, _, reference) = jobs["time-budget"], jobs["two-nodes"]
    _finished(job, restarts=1)
    assert ("the trainer stopped at its time budget at iteration 1 and saved global_step1; requeuing (1 of 2): "
            "the next attempt resumes from global_step1") in output
    assert "attempt 2 of at most 3 on n" in output
    losses, starts = losses_by_start(run / "logs")
    assert [s[0] for s in starts] == [1, 2] and starts[-1][-1] == ITERS
    assert losses == losses_by_start(reference / "logs")[0]


def test_a_bad_input_exits_2_without_requeue(jobs):
    job, output, _ = jobs["bad-input"]
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("FAILED", "2:0", "0"), job
    ours = [line for line in output.splitlines() if "bloomtrain" in line]
    assert len(ours) == 3, output  # the attempt, the node agent's line, the job's decision
    assert ours[1].startswith("0: bloomtrain: node n1: rank 0 on n1: config or input error, not retried: data.blend: "
                              "blend file ")
    assert "rank 0 on n1: config or input error, not requeued: data.blend: blend file " in ours[2]
    assert "Traceback" not in output
