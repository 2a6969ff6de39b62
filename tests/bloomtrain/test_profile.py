"""``logging.profile_iters``: torch.profiler around chosen iterations of a real run, and the summary of where the
time went (bloomtrain.callbacks.profile). On a CPU the rows are operators: a tiny BLOOM step is mostly matmuls."""

from __future__ import annotations

import gzip
import json

import pytest

from bloomtrain.callbacks.profile import ProfileSummary, group_of
from bloomtrain.config import load_config
from bloomtrain.metrics import read_metrics
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.harness.gloo_harness import run_distributed


def _run(tmp_path, iters: int, profile: str) -> dict:
    overrides = [*EXACT, f"schedule.train_iters={iters}", f"logging.dir={tmp_path / 'logs'}",
                 f"logging.profile_iters={profile}"]
    return run_distributed(train_rank, 1, overrides, timeout_s=300)[0]


@pytest.mark.integration
def test_the_profile_covers_the_chosen_iterations_and_says_where_their_time_went(tmp_path):
    run = _run(tmp_path, 4, "[2, 3]")
    assert run["error"] is None, run["error"]
    out = tmp_path / "logs" / "profile"
    assert sorted(p.name for p in out.iterdir()) == [
        "rank0-iters2-3.summary.json", "rank0-iters2-3.trace.json.gz", "rank0-iters2-3.txt"]
    summary = ProfileSummary.model_validate_json((out / "rank0-iters2-3.summary.json").read_text())
    train, _ = read_metrics(tmp_path / "logs" / "metrics.jsonl")
    steps = {r["iteration"]: r["step_time_s"] for r in train}
    assert summary.iterations == (2, 3) and summary.device == "cpu" and summary.busy is None
    assert summary.wall_ms == pytest.approx(1000 * (steps[2] + steps[3]), rel=1e-6, abs=1e-3)
    # the operators' self times add up, and they happened inside the two steps
    assert sum(summary.groups.values()) == pytest.approx(summary.total_ms, rel=1e-3)
    assert 0 < summary.total_ms <= summary.wall_ms * 2  # two threads of intra-op work at most
    assert summary.groups["matmul"] > 0 and summary.groups["attention"] > 0
    assert any(r.name in ("aten::mm", "aten::addmm") for r in summary.top)
    assert [r.ms for r in summary.top] == sorted((r.ms for r in summary.top), reverse=True)
    # the trace is Chrome's format, with the training step's operators in it
    trace = json.loads(gzip.decompress((out / "rank0-iters2-3.trace.json.gz").read_bytes()))
    assert any(e.get("name") == "aten::addmm" for e in trace["traceEvents"])
    assert "Self CPU" in (out / "rank0-iters2-3.txt").read_text()
    logged = [json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["profile_iters"] for r in logged if "profile" in r] == [[2, 3]]


@pytest.mark.integration
def test_a_run_that_ends_inside_the_range_writes_what_it_profiled(tmp_path):
    run = _run(tmp_path, 2, "[2, 9]")
    assert run["error"] is None, run["error"]
    summary = ProfileSummary.model_validate_json(
        (tmp_path / "logs" / "profile" / "rank0-iters2-2.summary.json").read_text())
    assert summary.iterations == (2, 2) and summary.total_ms > 0


@pytest.mark.integration
def test_a_profile_that_cannot_be_written_is_one_line_and_the_run_goes_on(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "profile").write_text("a file where the profile folder would go")
    run = _run(tmp_path, 2, "[1, 1]")
    assert run["error"] is None and sorted(run["losses"]) == [1, 2], run["error"]
    logged = [json.loads(line) for line in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    errors = [r["profile_error"] for r in logged if "profile_error" in r]
    assert len(errors) == 1 and errors[0].startswith(("FileExistsError", "NotADirectoryError")), errors


@pytest.mark.parametrize(("overrides", "message"), [
    (["logging.profile_iters=[3, 2]"], "1 <= first <= last"),
    (["logging.profile_iters=[0, 2]"], "1 <= first <= last"),
    (["logging.profile_iters=[1, 2]", "logging.dir=null"], "profile_iters needs logging.dir=PATH"),
])
def test_a_profile_range_that_cannot_run_is_refused_before_training(overrides, message):
    with pytest.raises(Exception, match=message.replace("[", r"\[")):
        load_config(TINY, [*EXACT, "logging.dir=/tmp/x", *overrides])


@pytest.mark.parametrize(("name", "group"), [
    ("attention_fwd_kernel", "attention"), ("attention_bwd_dkdv_kernel", "attention"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_hsh_128x256_64x4_1x2_h_bz_TNN", "matmul"),
    ("aten::addmm", "matmul"), ("triton_per_fused_add_native_layer_norm_0", "compiled"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>", "optimizer"),
    ("Memcpy HtoD (Pinned -> Device)", "copy"), ("aten::copy_", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "elementwise"),
    ("aten::gelu", "elementwise"), ("BlockCausalAttentionFunctionBackward", "attention"), ("aten::view", "other"),
    ("FusedAlibiSoftmaxFunctionBackward", "attention"), ("aten::addmm_", "matmul"), ("aten::add_", "elementwise"),
    ("_FusedHeadLoss", "loss"), ("void at::native::cunn_SoftMaxForward<8, float>", "elementwise"),
    ("cudaLaunchKernel", "other"),
])
def test_profile_rows_are_grouped_by_their_names(name, group):
    assert group_of(name) == group
