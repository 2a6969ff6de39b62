"""A user error ends every flow Failed with exactly its one line (not retried); the pipeline's message names the
stage; a bug keeps its exception and traceback."""

from __future__ import annotations

import pytest

from bloomdata.build import BuildConfig, plan_build
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from flows.blend import blend_flow
from flows.clean import clean_flow
from flows.config import BlendStageConfig, CleanStageConfig, PipelineConfig
from flows.data import dataset_flow
from flows.failures import ended_unfinished, stage_result
from flows.pipeline import bloom_pipeline
from flows.results import BlendResult


def _task_run_counts(flow_run_id) -> list[int]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return [r.run_count for r in runs]


@pytest.mark.integration
def test_user_errors_end_the_flows_failed_with_their_one_line(prefect_harness, tmp_path):
    missing = str(tmp_path / "no-such-corpus" / "en.jsonl")
    sources = [SourceConfig(paths=[missing], lang="en")]
    build = BuildConfig(sources=sources, tokenizer=str(tmp_path), out_dir=str(tmp_path / "data"), workers=0)
    with pytest.raises(BloomstackError) as raised:  # the library's own message, as the CLI prints it
        plan_build(build)
    line = str(raised.value)
    assert "\n" not in line and missing in line

    state = dataset_flow(build, return_state=True)
    assert state.is_failed() and state.message == line
    # build-dataset has retries=2, but a user error is not transient: it ran once
    assert _task_run_counts(state.state_details.flow_run_id) == [1]
    state = clean_flow(CleanStageConfig(sources=sources, out_dir=str(tmp_path / "clean"), workers=0), return_state=True)
    assert state.is_failed() and state.message == line

    # The pipeline ends in the first stage that fails, named; nothing after it ran.
    state = bloom_pipeline(PipelineConfig(out_dir=str(tmp_path / "run"), corpus=sources), return_state=True)
    assert state.is_failed() and state.message == f"clean stage Failed: {line}"
    state = bloom_pipeline(PipelineConfig(out_dir=str(tmp_path / "raw"), corpus=sources, clean=None),
                           return_state=True)  # no clean stage: the tokenizer reads the corpus
    assert state.is_failed() and state.message == f"tokenizer stage Failed: {line}"
    assert not (tmp_path / "raw" / "data").exists() and not (tmp_path / "raw" / "clean").exists()


@pytest.mark.integration
def test_a_bug_keeps_its_exception(prefect_harness, tmp_path, monkeypatch):
    def broken(config):
        raise ZeroDivisionError("a bug in the blend")

    monkeypatch.setattr("flows.blend.tune_blend", broken)
    config = BlendStageConfig(token_budget=1000, seq_length=8, out_dir=str(tmp_path / "blend"))
    state = blend_flow({"en": str(tmp_path / "en")}, config, return_state=True)
    assert state.is_failed() and "ZeroDivisionError: a bug in the blend" in state.message
    with pytest.raises(ZeroDivisionError, match="a bug in the blend") as raised:  # what the pipeline does with it
        stage_result("blend", state, BlendResult)
    assert any(entry.name == "broken" for entry in raised.traceback)  # raised where the bug is


def test_commands_say_how_an_unfinished_run_ended_and_what_to_do(capsys):
    from prefect.states import Completed, Failed

    assert not ended_unfinished("flows.demo", Completed(), "the pipeline")
    assert capsys.readouterr().err == ""
    assert ended_unfinished("flows.demo", Failed(message="tokenizer stage Failed: x.jsonl:3: bad row"), "the pipeline")
    assert capsys.readouterr().err.splitlines() == [
        "flows.demo: the pipeline ended Failed: tokenizer stage Failed: x.jsonl:3: bad row",
        "flows.demo: fix the cause and run the same command again: finished stages are skipped"]
