"""bloomtrain.recovery's rules on exit records written the way the trainer writes them (bloomtrain.exit_record):
what the torchrun restart hook decides after a failed worker group, and what the Slurm job and the flows
decide after a launch. The engines that produce these records are exercised in test_recovery.py (torchrun),
test_torchrun_nodes.py (two agents) and test_slurm_cluster.py (a Slurm cluster)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bloomdata.config_loader import derive
from bloomtrain.checkpoint.tags import commit_tag
from bloomtrain.exit_record import ExitKind, ExitRecord, Recorder, read_attempt, write_record
from bloomtrain.recovery import (
    AFTER_KIND,
    LaunchOutcome,
    NodeView,
    after_launch,
    after_worker_failure,
    node_view,
    root_cause,
)


def _record(root, rank, kind, *, node="n1", attempt=0, message="", ended=None, ckpt=None, iteration=3):
    record = ExitRecord(kind=kind, rank=rank, node=node, pid=100 + rank, attempt=attempt, started=1.0, ended=ended,
                        message=message, checkpoint_dir=str(ckpt) if ckpt else None, iteration=iteration)
    write_record(root, record)
    return record


def test_the_recorder_writes_running_then_the_ending(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.setenv("BLOOMTRAIN_NODE", "n7")
    monkeypatch.delenv("BLOOMTRAIN_EXIT_DIR", raising=False)
    monkeypatch.delenv("BLOOMTRAIN_AGENT", raising=False)
    Recorder.from_env().end("config_error", "nothing written: no directory yet")
    assert not list(tmp_path.iterdir())
    recorder = Recorder.from_env()
    assert not recorder.quiet
    recorder.open(str(tmp_path), "global_step4")  # <checkpoint.dir>/exits without BLOOMTRAIN_EXIT_DIR
    [rank] = read_attempt(tmp_path / "exits", 2).ranks.values()
    assert (rank.kind, rank.rank, rank.node, rank.resumed_from, rank.checkpoint_dir) == \
        ("running", 3, "n7", "global_step4", str(tmp_path))
    recorder.progress(6, "global_step6")
    try:
        raise ValueError("bad\nvalue")
    except ValueError as exc:
        recorder.fail(exc)
    [rank] = read_attempt(tmp_path / "exits", 2).ranks.values()
    assert (rank.kind, rank.iteration, rank.checkpoint, rank.message) == ("failure", 6, "global_step6",
                                                                          "ValueError: bad value")
    assert 'raise ValueError("bad\\nvalue")' in open(rank.traceback).read()
    monkeypatch.setenv("BLOOMTRAIN_AGENT", "1")
    assert recorder.quiet  # under bloomtrain.launcher its agent reports the failure


def test_a_rank_killed_is_the_root_cause_before_its_peers_errors(tmp_path):
    """Rank 1 SIGKILLed (its record still says running): rank 0, which the agent then stopped with SIGTERM, or
    which recorded the gloo error the kill caused, is a consequence."""
    _record(tmp_path, 0, "running")  # stopped by its agent (SIGTERM) before it could record anything
    _record(tmp_path, 1, "running", node="n2")
    attempt = read_attempt(tmp_path, 0)
    views = [node_view("n1", [0], {0: -signal.SIGTERM}, attempt), node_view("n2", [1], {1: -signal.SIGKILL}, attempt)]
    assert views[1].deaths == [(False, 1, "killed by SIGKILL")]
    assert root_cause(views) == "rank 1 on n2 killed by SIGKILL"
    assert after_worker_failure(views, {}, restarts_left=2, max_restarts=3).line == \
        "rank 1 on n2 killed by SIGKILL; restart 2 of 3 on the same nodes, resuming from its latest checkpoint, if any"
    views[0] = node_view("n1", [0], {0: 1}, derive(attempt, ranks={0: _record(
        tmp_path, 0, "failure", message="RuntimeError: Connection closed by peer", ended=5.0)}))
    assert root_cause(views) == "rank 1 on n2 killed by SIGKILL"
    # without a death, the failure recorded first
    views = [NodeView(node="n1", ranks=[0, 1], failures=[(9.0, 1, "B"), (4.0, 0, "A")])]
    assert root_cause(views) == "rank 0 on n1 failed: A"


def test_a_hang_names_the_rank_that_stopped_making_progress(tmp_path):
    """A hang record says a rank saw no finished iteration; the rank to name is the one that stopped: a stopped
    (frozen) process, else the one whose last iteration is behind, else one still running without a record after
    its peers gave up, else the first to time out. A frozen rank's kill (by its agent) is not a death."""
    said = "no finished iteration for 9.1 s after iteration 3 (stability.hang_timeout_s=auto: 9.0 s)"

    def hang(rank, iteration, ended, node="n1"):
        record = _record(tmp_path, rank, "hang", node=node, message=said, ended=ended, iteration=iteration)
        return derive(record, traceback=str(tmp_path / f"attempt-0/stacks-rank-{rank}.txt"))

    running = _record(tmp_path, 1, "running", node="n2", iteration=None)
    frozen = derive(read_attempt(tmp_path, 0), ranks={0: hang(0, 3, 5.0), 1: running})
    views = [node_view("n1", [0], {0: 1}, frozen), node_view("n2", [1], {1: -signal.SIGKILL}, frozen, {1: "stopped"})]
    assert views[1].deaths == [] and views[1].alive == [(1, "stopped")]
    cause = (f"rank 1 on n2 stopped making progress (its process is stopped (SIGSTOP, a debugger), no exit record); "
             f"rank 0 on n1: {said}; stacks in {tmp_path}/attempt-0")
    assert root_cause(views) == cause
    assert after_worker_failure(views, {}, 1, 1).line == f"{cause}; restart 1 of 1 on the same nodes, resuming from " \
                                                        "its latest checkpoint, if any"
    # stuck in Python: its own watchdog saw iteration 2 last, its peer 3 (a failure: the gloo error its exit caused)
    peer = _record(tmp_path, 0, "failure", message="RuntimeError: Connection closed by peer", ended=9.0)
    behind = derive(frozen, ranks={0: peer, 1: hang(1, 2, 8.0, node="n2")})
    views = [node_view("n1", [0], {0: 1}, behind, {0: "sleeping"}), node_view("n2", [1], {1: 1}, behind)]
    assert root_cause(views).startswith("rank 1 on n2 stopped making progress (behind: its last finished iteration "
                                        "is 2, its peers' 3); rank 1 on n2: no finished iteration for 9.1 s")
    # stuck where its watchdog cannot run (native code holding the GIL): killed without a record after the grace
    silent = derive(frozen, ranks={0: hang(0, 3, 5.0), 1: running})
    views = [node_view("n1", [0], {0: 1}, silent), node_view("n2", [1], {1: -signal.SIGKILL}, silent, {1: "running"})]
    assert root_cause(views) == "rank 1 on n2 killed by SIGKILL"  # a kill by anyone but its agent comes first
    views[1] = node_view("n2", [1], {1: -signal.SIGTERM}, silent, {1: "running"})
    assert root_cause(views).startswith("rank 1 on n2 stopped making progress (still running without an exit record "
                                        "after its peers gave up: stuck outside Python?); rank 0 on n1: ")
    both = derive(frozen, ranks={0: hang(0, 3, 5.0), 1: hang(1, 3, 4.0, node="n2")})
    views = [node_view("n1", [0], {0: 1}, both), node_view("n2", [1], {1: 1}, both)]
    assert root_cause(views).startswith("rank 1 on n2 stopped making progress (the first to time out); rank 1 on n2")


def test_the_restart_hook_never_retries_a_config_error_nor_a_lost_node(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    commit_tag(ckpt, "global_step4")
    _record(tmp_path, 0, "config_error", message="data.blend: x not found", ckpt=ckpt)
    _record(tmp_path, 1, "failure", message="RuntimeError: peer", ckpt=ckpt)
    attempt = read_attempt(tmp_path, 0)
    views = [node_view("n1", [0, 1], {0: 2, 1: 1}, attempt)]
    decision = after_worker_failure(views, {}, restarts_left=3, max_restarts=3)
    assert (decision.action, decision.exit_code) == ("stop", 2)
    assert decision.line == "rank 0 on n1: config or input error, not retried: data.blend: x not found"

    views = [node_view("n1", [0], {0: 1}, read_attempt(tmp_path, 0))]
    views[0].user_error = None
    decision = after_worker_failure(views, {"n2": [2, 3]}, restarts_left=3, max_restarts=3)
    assert (decision.action, decision.exit_code) == ("stop", 1)
    assert decision.line == ("lost node n2 (ranks 2, 3): its agent stopped answering, so no restart on these nodes; "
                             "the next attempt resumes from global_step4")
    decision = after_worker_failure(views, {}, restarts_left=0, max_restarts=3)
    assert decision.action == "stop" and decision.line.endswith("no torchrun restart left (max_restarts=3); the next "
                                                                "attempt resumes from global_step4")
    assert decision.checkpoint == "global_step4"


@pytest.mark.parametrize(("kind", "what"), [("disk_full", "disk full"), ("corrupt_checkpoint", "damaged checkpoint")])
def test_a_full_disk_or_a_damaged_checkpoint_is_never_retried(tmp_path, kind, what):
    """A restart would fill the same disk or read the same damaged files: stop, exit 2, whatever its peers say."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    commit_tag(ckpt, "global_step4")
    _record(tmp_path, 0, "failure", message="RuntimeError: peer", ckpt=ckpt, ended=1.0)
    _record(tmp_path, 1, kind, node="n2", message="the line", ckpt=ckpt, ended=2.0)
    attempt = read_attempt(tmp_path, 0)
    views = [node_view("n1", [0], {0: 1}, attempt), node_view("n2", [1], {1: 2}, attempt)]
    decision = after_worker_failure(views, {}, restarts_left=3, max_restarts=3)
    assert (decision.action, decision.exit_code, decision.line) == ("stop", 2, f"rank 1 on n2: {what}, not retried: "
                                                                               "the line")
    decision = after_launch(LaunchOutcome(exit_dir=str(tmp_path), returncode=2, checkpoint_dir=str(ckpt),
                                          before="global_step2", max_requeues=3))  # progress: would requeue otherwise
    assert (decision.action, decision.exit_code, decision.line) == ("stop", 2, f"rank 1 on n2: {what}, not requeued: "
                                                                               "the line")


@pytest.fixture
def launch(tmp_path):
    """Write one attempt's rank records and a checkpoint, then decide as after a launch."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()

    def decide(kinds, *, rc=0, saved=None, before="global_step2", requeues=0, max_requeues=2, **kw):
        exits = tmp_path / f"exits-{len(list(tmp_path.iterdir()))}"
        for rank, kind in enumerate(kinds):
            _record(exits, rank, kind, node=f"n{rank}", message="E" if kind != "running" else "", ended=float(rank))
        commit_tag(ckpt, saved or before)
        return after_launch(LaunchOutcome(exit_dir=str(exits), returncode=rc, checkpoint_dir=str(ckpt), before=before,
                                          requeues=requeues, max_requeues=max_requeues, **kw))

    return decide


def test_after_a_launch_stops_when_it_ended_on_purpose_or_on_a_user_error(launch):
    for kind, what in [("finished", "training finished"), ("kill_switch", "stopped by the kill switch"),
                       ("signal", "stopped by a signal")]:
        d = launch([kind, kind], saved="global_step5")
        assert (d.action, d.exit_code, d.line) == ("stop", 0, f"{what} at iteration 3; latest checkpoint: global_step5")
    d = launch(["config_error", "failure"], rc=1, saved="global_step5")  # never requeued, even after progress
    assert (d.action, d.exit_code, d.line) == ("stop", 2, "rank 0 on n0: config or input error, not requeued: E")


def test_after_a_launch_continues_only_after_progress_and_within_the_limit(launch):
    d = launch(["time_budget", "time_budget"], saved="global_step5")
    assert (d.action, d.line) == ("requeue", "the trainer stopped at its time budget at iteration 3 and saved "
                                             "global_step5; requeuing (1 of 2): "
                                             "the next attempt resumes from global_step5")
    d = launch(["time_budget", "time_budget"])
    assert (d.action, d.exit_code) == ("stop", 1) and "without a new checkpoint (latest: global_step2)" in d.line
    d = launch(["failure", "running"], rc=1, saved="global_step5", again="relaunch", requeues=1)
    assert (d.action, d.line) == ("requeue", "training failed (rank 1 on n1 died without an exit record) after saving "
                                             "global_step5; relaunching (2 of 2): the next attempt resumes from "
                                             "global_step5")
    d = launch(["failure", "running"], rc=1, saved="global_step5", requeues=2)
    assert (d.action, d.exit_code) == ("stop", 1) and d.line.endswith(
        "; not requeued: requeued 2 times already (max 2); run it again to continue from global_step5")
    d = launch(["time_budget"], saved="global_step5", max_requeues=0)
    assert (d.action, d.exit_code) == ("stop", 1) and d.line.endswith(
        "; not requeued (requeues are off: max 0); run it again to continue from global_step5")
    d = launch(["failure", "failure"], rc=1)
    assert (d.action, d.exit_code) == ("stop", 1) and d.line == (
        "training failed (rank 0 on n0 failed: E) without a new checkpoint in this attempt (latest: global_step2); "
        "not requeued: a retry would likely fail the same way")
    d = launch([], rc=1)
    assert "the launch exited with code 1 before any rank started" in d.line and d.action == "stop"
    d = launch(["failure"], rc=1, saved="global_step5", timed_out=True)
    assert (d.action, d.exit_code) == ("stop", 1) and "killed at its time limit" in d.line


# What an attempt leads to when every rank ended with one kind, after a new checkpoint and with requeues left:
# (action, exit code), for the exit code a rank of that kind exits with. A new ExitKind needs its line here and
# its rule in bloomtrain.recovery.AFTER_KIND.
AFTER_EVERY_KIND = {
    ExitKind.RUNNING: (1, ("requeue", 0)),  # died without a word: a failure
    ExitKind.FINISHED: (0, ("stop", 0)),
    ExitKind.TIME_BUDGET: (0, ("requeue", 0)),
    ExitKind.SIGNAL: (0, ("stop", 0)),
    ExitKind.KILL_SWITCH: (0, ("stop", 0)),
    ExitKind.CONFIG_ERROR: (2, ("stop", 2)),
    ExitKind.DISK_FULL: (2, ("stop", 2)),  # the same disk is full on a retry
    ExitKind.CORRUPT_CHECKPOINT: (2, ("stop", 2)),  # the same damaged files (checkpoint.on_corrupt=fail)
    ExitKind.FAILURE: (1, ("requeue", 0)),
    ExitKind.HANG: (1, ("requeue", 0)),  # no finished iteration for stability.hang_timeout_s: a failure
}


@pytest.mark.parametrize("kind", list(ExitKind), ids=str)
def test_recovery_has_a_rule_for_every_exit_kind(launch, kind):
    assert set(AFTER_KIND) == set(ExitKind) == set(AFTER_EVERY_KIND)
    rc, expected = AFTER_EVERY_KIND[kind]
    d = launch([kind, kind], rc=rc, saved="global_step5")
    assert (d.action, d.exit_code) == expected, d.line
    assert AFTER_KIND[kind].said in d.line or kind == ExitKind.FAILURE  # a failure is named by its message


def test_the_exit_kind_is_typed_end_to_end():
    """mypy rejects a string where an ExitKind goes: the trainer's stop request, the exit record's ending."""
    from mypy import api

    root = Path(__file__).resolve().parents[2]
    source = root / "bloomtrain" / "_kind_probe.py"  # inside the package: mypy reads the project's config for it
    source.write_text(
        "from bloomtrain.callbacks.base import TrainerView\nfrom bloomtrain.exit_record import ExitKind, Recorder\n\n\n"
        "def stop(trainer: TrainerView, recorder: Recorder) -> None:\n"
        "    trainer.request_stop('why', ExitKind.SIGNAL)\n    recorder.end(ExitKind.FINISHED)\n"
        "    trainer.request_stop('why', 'signal')\n    recorder.end('finished')\n")
    try:
        out, _, status = api.run(["--config-file", str(root / "pyproject.toml"), "--cache-dir",
                                  str(root / ".mypy_cache"), str(source)])
    finally:
        source.unlink()
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and [line.split(":")[1] for line in errors] == ["8", "9"], out
    assert all('incompatible type "str"; expected "ExitKind"' in line for line in errors), out
