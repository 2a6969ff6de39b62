"""The training artifact's per-set validation: records merged per iteration, the table, the two-panel plot.

The metrics file is written here in the trainer's format (one record per named set and evaluation, beside
the overall ``valid_loss`` record), including a resumed run that logs an evaluation again.
"""

from __future__ import annotations

import json
import math

from bloomtrain.metrics import SetPoint, read_metrics, set_curves, summarize
from flows.report import plot_loss, training_markdown


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _set(it: int, name: str, loss: float, bpb: float) -> dict:
    return {"iteration": it, f"valid/{name}/loss": loss, f"valid/{name}/ppl": math.exp(loss),
            f"valid/{name}/bpb": bpb}


def test_per_set_validation_in_the_summary_table_and_plot(tmp_path):
    records = [{"iteration": i, "loss": 6.0 - i, "tokens_per_s": 10.0} for i in range(1, 5)]
    records += [{"iteration": 2, "valid_loss": 4.5, "valid_ppl": math.exp(4.5)}, _set(2, "fr", 4.0, 1.9),
                _set(2, "yo", 5.0, 2.6),
                {"iteration": 4, "valid_loss": 3.5, "valid_ppl": math.exp(3.5)}, _set(4, "fr", 3.0, 1.4),
                _set(4, "yo", 4.5, 2.2),
                _set(4, "yo", 4.25, 2.1)]  # a resumed run evaluates iteration 4 again: the later record wins
    _write(tmp_path / "metrics.jsonl", records)
    train, evals = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in train] == [1, 2, 3, 4]
    assert [r["iteration"] for r in evals] == [2, 4]
    assert evals[1]["valid_loss"] == 3.5 and evals[1]["valid/fr/bpb"] == 1.4 and evals[1]["valid/yo/loss"] == 4.25
    curves = set_curves(evals)
    assert [p.bpb for p in curves["yo"]] == [2.6, 2.1] and [p.iteration for p in curves["fr"]] == [2, 4]

    s = summarize(train, evals)
    assert s.valid_loss == 3.5
    assert s.valid_sets == {"fr": SetPoint(iteration=4, loss=3.0, ppl=math.exp(3.0), bpb=1.4),
                            "yo": SetPoint(iteration=4, loss=4.25, ppl=math.exp(4.25), bpb=2.1)}
    assert type(s).model_validate_json(s.model_dump_json()) == s  # the stage marker stores it as JSON

    png = plot_loss(train, evals, tmp_path / "loss.png")
    import matplotlib.image as mpimg

    assert mpimg.imread(png).shape[1] == 1100  # two panels: the loss curves and the per-set bpb
    md = training_markdown(s, paths={"metrics": "m"}, png=png, embed_png=False)
    assert "| fr | 4 | 3.0000 | 20.09 | 1.4000 |" in md and "| yo | 4 | 4.2500 | 70.11 | 2.1000 |" in md
    assert "each set's validation bits per byte" in md


def test_runs_without_named_sets_keep_the_one_panel_report(tmp_path):
    _write(tmp_path / "metrics.jsonl", [{"iteration": 1, "loss": 5.0}, {"iteration": 1, "valid_loss": 4.0}])
    train, evals = read_metrics(tmp_path / "metrics.jsonl")
    s = summarize(train, evals)
    assert s.valid_sets == {} and s.valid_loss == 4.0
    import matplotlib.image as mpimg

    assert mpimg.imread(plot_loss(train, evals, tmp_path / "loss.png")).shape[1] == 600
    assert "Validation per set" not in training_markdown(s, paths={})
    # per-set records alone (no overall validation split) still make the table
    _write(tmp_path / "sets.jsonl", [{"iteration": 1, "loss": 5.0}, _set(1, "fr", 4.0, 2.0)])
    s = summarize(*read_metrics(tmp_path / "sets.jsonl"))
    assert s.valid_loss is None and s.valid_sets["fr"].bpb == 2.0
