"""The one sharded-job runner (bloomdata.jobs.runner): what build and clean share, on a tiny job of its own."""

from __future__ import annotations

import os

import pytest
from pydantic import BaseModel

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomdata.jobs.placement import Placement
from bloomdata.jobs.runner import JobFiles, JobPlan, ShardedJob, strict_error
from bloomdata.readers import Reject, Shard


class _Summary(BaseModel):
    out: str
    rejects_total: int = 0
    up_to_date: bool = False


class _Copied(BaseModel):
    text: str


class _Job(ShardedJob[_Summary, _Copied]):
    files = JobFiles(writer="copy", lock=".copy.lock", summary="summary.json")
    summary_type = _Summary

    def __init__(self, out_dir, shards, fingerprint="f1", *, strict=False, rejects=0, fail=False):
        keys = [f"k-{os.path.basename(s.path)}" for s in shards]
        super().__init__(JobPlan(str(out_dir), shards, keys, fingerprint, Placement(workers=0, progress=False), strict))
        self.rejects, self.fail, self.calls = rejects, fail, 0

    def load_marker(self, shard: Shard, key: str) -> _Copied | None:
        return durable.read_manifest(_marker(self.plan.out_dir, shard), key, _Copied)

    def intact(self, summary: _Summary) -> bool:
        return os.path.isfile(summary.out)

    def work(self) -> _Summary:
        self.calls += 1
        out = os.path.join(self.plan.out_dir, "out.txt")
        results = self.plan.where.map("copy", _read, self.plan.shards)
        if self.fail:
            raise RuntimeError("a bug")
        durable.write_text(out, "".join(results))
        return _Summary(out=out, rejects_total=self.rejects)


def _read(shard: Shard) -> str:
    with open(shard.path) as f:
        return f.read()


def _marker(out_dir: str, shard: Shard) -> str:
    return os.path.join(out_dir, f"{os.path.basename(shard.path)}.done.json")


def _copy(shard: Shard, out_dir: str, key: str) -> _Copied:
    """A first stage: the shard's text, with its completion marker."""
    copied = _Copied(text=_read(shard))
    durable.write_marker(_marker(out_dir, shard), key, copied)
    return copied


def test_the_first_stage_runs_the_shards_without_a_marker_and_reuses_the_others(tmp_path):
    out, shards = tmp_path / "out", _shards(tmp_path)
    out.mkdir()
    job = _Job(out, shards)
    _copy(shards[1], str(out), job.plan.keys[1])  # b done by an earlier run
    ran: list[str] = []
    counted: list[str] = []

    def step(shard: Shard) -> _Copied:
        ran.append(os.path.basename(shard.path))
        return _copy(shard, str(out), job.plan.keys[0])

    manifests, pending = job.first_stage("copy", step, lambda m: counted.append(m.text))
    assert [m.text for m in manifests] == ["a", "b"] and pending == [0] and ran == ["a.txt"]
    assert counted == ["b", "a"]  # the reused one first, then each as it comes
    assert job.marked() == 2
    assert job.first_stage("copy", step) == (manifests, []) and ran == ["a.txt"]  # all marked: nothing runs
    assert _Job(out, shards[:1]).marked() == 1 and _Job(tmp_path / "elsewhere", shards).marked() == 0


def _shards(tmp_path):
    (tmp_path / "in").mkdir(exist_ok=True)
    for name in ("a", "b"):
        (tmp_path / "in" / f"{name}.txt").write_text(name)
    return [Shard(path=str(tmp_path / "in" / f"{n}.txt"), format="txt", text_field="text", lang=None,
                  lang_field="lang") for n in ("a", "b")]


def test_runs_once_then_is_up_to_date_until_the_fingerprint_or_an_output_changes(tmp_path):
    out, shards = tmp_path / "out", _shards(tmp_path)
    job = _Job(out, shards)
    first = job.run()
    assert (out / "out.txt").read_text() == "ab" and not first.up_to_date and job.calls == 1
    assert durable.read_manifest(out / "summary.json", "f1", _Summary) == first  # the job's marker, keyed
    again = _Job(out, shards)
    assert again.run().up_to_date and again.calls == 0
    assert _Job(out, shards, "f2").run().up_to_date is False  # another fingerprint: the work runs
    (out / "out.txt").unlink()
    assert _Job(out, shards, "f2").run().up_to_date is False  # an output gone: not intact


def test_strict_reruns_a_lenient_run_that_skipped_rejects(tmp_path):
    out, shards = tmp_path / "out", _shards(tmp_path)
    _Job(out, shards, rejects=3).run()
    assert _Job(out, shards, rejects=3).run().up_to_date
    strict = _Job(out, shards, strict=True)
    assert not strict.run().up_to_date and strict.calls == 1


def test_an_output_directory_holding_an_input_is_refused_before_anything_is_written(tmp_path):
    shards = _shards(tmp_path)
    with pytest.raises(BloomstackError, match=r"holds an input .*a\.txt.*choose an out_dir outside the inputs"):
        _Job(tmp_path / "in", shards)
    assert not (tmp_path / "in" / ".copy.lock").exists()


def test_one_writer_at_a_time_and_stray_temps_swept(tmp_path):
    out, shards = tmp_path / "out", _shards(tmp_path)
    job = _Job(out, shards)
    with durable.owned_directory(out, ".copy.lock", "copy"):
        with pytest.raises(BloomstackError, match="another copy is writing there"):
            job.run()
    (out / "deep").mkdir()
    stray = out / "deep" / f"x{durable.TEMP_INFIX}123"
    stray.write_text("torn")
    failing = _Job(out, shards, fail=True)
    with pytest.raises(RuntimeError, match="a bug"):
        failing.run()
    assert not stray.exists() and not (out / "summary.json").exists()  # swept; a failed job marks nothing


def test_the_strict_message_names_file_line_and_fix():
    message = str(strict_error(Reject("empty_text", "/c/en.jsonl", 7, "")))
    assert message == ("/c/en.jsonl:7: empty_text (no detail); fix or drop that row, or turn strict off to skip "
                       "and count it")  # the key: `bloomdata build` prints it as --strict


def _slow_square(x: int) -> int:
    import time

    time.sleep(0.01)
    return x * x


def _not_yet_run(dask_scheduler) -> int:
    """Tasks of ``_slow_square`` the scheduler holds that have not run yet."""
    return sum(1 for key, task in dask_scheduler.tasks.items()
               if str(key).startswith("_slow_square")
               and task.state in ("waiting", "queued", "no-worker", "processing"))


def test_run_shards_keeps_at_most_a_window_of_tasks_submitted(client, monkeypatch):
    """The driver submits tasks a window ahead of the results it takes, not every shard at once (the scheduler
    holds ~8-12 KB per submitted task: ~1 GB at 100,000 shards); results stay in item order."""
    from bloomdata.jobs import executor

    monkeypatch.setattr(executor, "SUBMIT_WINDOW", 4)
    bound = max(executor.SUBMIT_WINDOW, 4 * sum(client.nthreads().values()))
    held: list[int] = []
    items = list(range(12 * bound))
    results = executor.run_shards(_slow_square, items, client=client,
                                  on_result=lambda i, r: held.append(client.run_on_scheduler(_not_yet_run)))
    assert results == [x * x for x in items]
    assert len(held) == len(items)
    assert 0 < max(held) <= bound, f"tasks not yet run while results were taken: {max(held)} (window {bound})"


def test_dashboard_is_served_when_asked_and_its_link_printed_once(capsys, monkeypatch):
    """`--dashboard` (``dashboard=True``): the LocalCluster serves Dask's dashboard, whose page answers over HTTP at
    the one link printed; by default the page is not there (the scheduler's HTTP server only answers /health)."""
    import urllib.error
    import urllib.request

    from bloomdata.jobs import executor

    pytest.importorskip("bokeh", reason="the dashboard extra (bokeh) is not installed")
    with Placement(workers=1, progress=False, dashboard=True) as where:
        assert where.map("square", _square, [2, 3]) == [4, 9]
        link = where.client.dashboard_link
        with urllib.request.urlopen(link, timeout=60) as page:
            assert page.status == 200 and b"Dask" in page.read()
    printed = [line for line in capsys.readouterr().err.splitlines() if "dashboard" in line]
    assert printed == [f"Dask dashboard: {link}"]

    with executor.dask_client(n_workers=1) as client:
        with pytest.raises(urllib.error.HTTPError) as missing:  # no dashboard: its routes are not served
            urllib.request.urlopen(client.dashboard_link, timeout=60)
        assert missing.value.code == 404
    assert "dashboard" not in capsys.readouterr().err

    monkeypatch.setattr(executor.importlib.util, "find_spec", lambda name: None)  # an install without bokeh
    with pytest.raises(BloomstackError, match=r"dashboard: Dask's dashboard needs bokeh; install it with"):
        executor._dashboard_address(True)


def _square(x: int) -> int:
    return x * x
