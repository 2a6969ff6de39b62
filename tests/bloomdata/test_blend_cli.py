"""`bloomdata blend`: alpha sampling with floor/cap/overrides, the four output files, warnings, errors; the
same BlendConfig -> tune_blend without a command line (the flows' path), and the one water-fill."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from bloomdata import cli
from bloomdata.blend.spec import load_blend_spec
from bloomdata.blend.tune import BlendConfig, tune_blend
from bloomdata.blend.weights import alpha_weights, constrain, water_fill
from bloomdata.errors import BloomstackError
from bloomdata.megatron.blend import blend_from_spec
from bloomdata.megatron.indexed import IndexedDataset
from tests.bloomdata.megatron_oracle import write_dataset


def test_alpha_weights_follow_the_power_law():
    tokens = {"en": 1_000_000, "fr": 100_000, "yo": 1_000}
    for alpha in (0.0, 0.3, 1.0):
        w = alpha_weights(tokens, alpha)
        expected = np.array([1e6, 1e5, 1e3]) ** alpha
        np.testing.assert_allclose(list(w.values()), expected / expected.sum(), rtol=1e-12)
    with pytest.raises(BloomstackError, match="alpha"):
        alpha_weights(tokens, -1)
    with pytest.raises(BloomstackError, match="yo"):
        alpha_weights({"en": 5, "yo": 0}, 0.3)


def test_floor_cap_and_overrides():
    base = alpha_weights({"en": 10**9, "fr": 10**8, "sw": 10**6, "yo": 10**4}, 0.5)
    w = constrain(base, floor=0.05, cap=0.5)
    assert abs(sum(w.values()) - 1) < 1e-12
    assert all(0.05 - 1e-12 <= x <= 0.5 + 1e-12 for x in w.values())
    # en is capped; of the 0.5 left, sw and yo fall under the floor; fr takes the rest
    assert (w["en"], w["fr"], w["sw"], w["yo"]) == pytest.approx((0.5, 0.4, 0.05, 0.05))
    o = constrain(base, overrides={"en": 0.25})
    assert o["en"] == 0.25 and abs(sum(o.values()) - 1) < 1e-12
    assert o["fr"] / o["sw"] == pytest.approx(base["fr"] / base["sw"])
    with pytest.raises(BloomstackError, match="floor"):
        constrain(base, floor=0.3)
    with pytest.raises(BloomstackError, match="unknown"):
        constrain(base, overrides={"de": 0.1})
    with pytest.raises(BloomstackError, match="overrides sum"):
        constrain(base, overrides={"en": 0.7, "fr": 0.6})


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("langs")
    for k, (name, docs) in enumerate({"en": 400, "fr": 120, "yo": 20}.items()):
        write_dataset(root / name, num_docs=docs, seed=k, max_len=60)
    return root


def test_cli_writes_table_chart_yaml_and_warns(data_dir, tmp_path, capsys):
    out = tmp_path / "blend"
    argv = ["blend", "--datasets-dir", str(data_dir), "--budget", "20000", "--alpha", "0.3", "--floor", "0.05",
            "--max-epochs", "3", "--seq-length", "16", "--seed", "7", "--split", "90,8,2", "--out", str(out)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "| language | tokens | weight | tokens drawn | effective epochs |" in captured.out
    assert "warning: yo would be repeated" in captured.err
    table = json.loads((out / "blend.json").read_text())
    tokens = {d["name"]: d["tokens"] for d in table["datasets"]}
    for name in ("en", "fr", "yo"):
        ds = IndexedDataset(data_dir / name)
        train_end = int(round(0.9 * len(ds)))
        assert tokens[name] == int(ds.sizes[:train_end].sum())
    expected = constrain(alpha_weights(tokens, 0.3), floor=0.05)
    for d in table["datasets"]:
        assert d["weight"] == pytest.approx(expected[d["name"]], rel=1e-12)
        assert d["tokens_drawn"] == round(d["weight"] * 20000)
        assert d["epochs"] == pytest.approx(d["tokens_drawn"] / d["tokens"])
    assert (out / "blend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "blend.md").read_text().startswith("| language |")
    raw = yaml.safe_load((out / "blend.yaml").read_text())
    assert raw["seq_length"] == 16 and raw["split"] == "90,8,2" and len(raw["datasets"]) == 3
    spec = load_blend_spec(str(out / "blend.yaml"))
    blend = blend_from_spec(spec, 300, "train")
    assert len(blend) >= 300 and len(blend[0]) == 17


def test_cli_override_and_errors(data_dir, tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["blend", "--dataset", f"en={data_dir / 'en'}", "--dataset", f"fr={data_dir / 'fr'}", "--budget", "1e4",
            "--override", "en=0.6", "--train-range", "0:0.95", "--valid-range", "0.95:1", "--out", str(out)]
    assert cli.main(argv) == 0
    spec = load_blend_spec(str(out / "blend.yaml"))
    assert [d.weight for d in spec.datasets] == pytest.approx([0.6, 0.4])
    assert spec.weighted_split("train").startswith("train: 0.6 0:0.95 ")
    capsys.readouterr()
    assert cli.main(["blend", "--dataset", f"xx={tmp_path / 'nope'}", "--budget", "10", "--out", str(out)]) == 2
    assert "nope.idx" in capsys.readouterr().err
    assert cli.main(["blend", "--datasets-dir", str(data_dir), "--budget", "lots", "--out", str(out)]) == 2
    assert "--budget" in capsys.readouterr().err
    assert cli.main(["blend", "--datasets-dir", str(data_dir), "--budget", "1e4", "--split", "90,10,0",
                     "--train-range", "0:0.9", "--out", str(out)]) == 2
    assert "give either split or train_range/valid_range" in capsys.readouterr().err
    assert cli.main(["blend", "--datasets-dir", str(data_dir), "--out", str(out)]) == 2
    assert "--budget is not set: give --budget in tokens" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("seq_length: 8\ndatasets:\n  - {name: en, prefix: x, weight: -1}\n")
    with pytest.raises(BloomstackError, match=r"bad\.yaml:3: datasets\.0\.weight: Input should be greater than 0 "
                                              r"\(got -1\); fix: change datasets\.0\.weight: fraction of the blend"):
        load_blend_spec(str(tmp_path / "bad.yaml"))


def test_tune_blend_takes_the_config_directly(data_dir, tmp_path):
    """What the flows call: the same weights as the command line, datasets in the order given."""
    config = BlendConfig(datasets={"yo": str(data_dir / "yo"), "en": str(data_dir / "en")}, token_budget="5e3",
                         alpha=0.0, floor={"yo": 0.6}, out_dir=str(tmp_path))
    spec = tune_blend(config)
    assert [d.name for d in spec.datasets] == ["yo", "en"] and spec.token_budget == 5000
    assert [d.weight for d in spec.datasets] == pytest.approx([0.6, 0.4])
    assert spec.datasets[0].tokens == int(IndexedDataset(data_dir / "yo").sizes.sum())


def test_water_fill_keeps_units_and_exact_bounds():
    # bytes: a language smaller than its share gives all it has, exactly (an int stays an int)
    quotas = water_fill({"a": 0.5, "b": 0.3, "c": 0.2}, 1000, hi={"a": 10**6, "b": 100, "c": 10**6})
    assert quotas["b"] == 100 and isinstance(quotas["b"], int)
    assert quotas["a"] == pytest.approx(900 * 0.5 / 0.7) and quotas["c"] == pytest.approx(900 * 0.2 / 0.7)
    # a floor lifts the small one; what it takes comes from the others in proportion
    w = water_fill({"x": 0.9, "y": 0.1}, 1.0, lo={"y": 0.25})
    assert w == pytest.approx({"x": 0.75, "y": 0.25})


# --- bloomdata blend --eval: bits per byte beside the weights ----------------------------------------------


def _eval_json(path, scores: dict[str, dict[str, tuple[int, float]]]):
    """An eval.json written by bloomtrain's own report model: model -> language -> (bytes, summed NLL in nats)."""
    from bloomtrain.evaluation.report import DataSummary, EvalReport, ModelResult, Score

    models = {}
    for name, langs in scores.items():
        languages = {lang: Score.of(3, nbytes, nbytes // 2, nll) for lang, (nbytes, nll) in langs.items()}
        overall = Score.of(3 * len(langs), sum(b for b, _ in langs.values()), sum(b // 2 for b, _ in langs.values()),
                           sum(n for _, n in langs.values()))
        models[name] = ModelResult(path=f"/models/{name}", start_token="</s>", start_id=2, languages=languages,
                                   overall=overall)
    data = DataSummary(sources=[], rows_read=0, documents=0, rejects={}, rejects_total=0)
    path.write_text(EvalReport(models=models, data=data).model_dump_json(indent=1))
    return str(path)


def _bpb(nbytes: int, nll: float) -> float:
    return nll / (math.log(2) * nbytes)


def _blend_argv(data_dir, out) -> list[str]:
    return ["blend", "--datasets-dir", str(data_dir), "--budget", "20000", "--split", "90,8,2", "--out", str(out)]


def test_eval_adds_bits_per_byte_to_table_json_and_chart(data_dir, tmp_path, capsys):
    report = _eval_json(tmp_path / "eval.json", {
        "exported": {"en": (1000, 1500.0), "fr": (800, 1400.0), "de": (500, 600.0)},  # no yo; de is not in the blend
        "bloom-560m": {"en": (1000, 700.0), "fr": (800, 650.0)}})
    assert cli.main(_blend_argv(data_dir, tmp_path / "plain")) == 0
    capsys.readouterr()
    assert cli.main([*_blend_argv(data_dir, tmp_path / "b"), "--eval", report]) == 0
    printed = capsys.readouterr().out
    assert "| language | tokens | weight | tokens drawn | effective epochs | bits per byte |" in printed
    rows = {line.split("|")[1].strip(): line for line in printed.splitlines() if line.startswith("| ")}
    assert rows["en"].endswith(f"| {_bpb(1000, 1500.0):.4f} |") and rows["fr"].endswith(f"| {_bpb(800, 1400.0):.4f} |")
    assert rows["yo"].endswith("| - |") and rows["**total**"].endswith("| - |")
    assert f"exported in {report}" in printed and "Evaluated but not in the blend: de." in printed
    assert (tmp_path / "b" / "blend.md").read_text() == printed  # the table printed is blend.md

    table = json.loads((tmp_path / "b" / "blend.json").read_text())
    bpb = {d["name"]: d["bpb"] for d in table["datasets"]}
    assert bpb == {"en": pytest.approx(_bpb(1000, 1500.0), rel=1e-12),
                   "fr": pytest.approx(_bpb(800, 1400.0), rel=1e-12), "yo": None}
    assert table["evaluation"] == {"reports": [{"path": report, "model": "exported"}], "unmatched_languages": ["de"]}
    # The blend itself does not depend on the report; the chart gains a bits-per-byte panel (a taller image).
    assert (tmp_path / "b" / "blend.yaml").read_text() == (tmp_path / "plain" / "blend.yaml").read_text()
    plain_json = json.loads((tmp_path / "plain" / "blend.json").read_text())
    assert "evaluation" not in plain_json and "bpb" not in plain_json["datasets"][0]

    def png_height(path) -> int:
        return int.from_bytes(path.read_bytes()[20:24], "big")  # IHDR: width, then height

    assert png_height(tmp_path / "b" / "blend.png") > png_height(tmp_path / "plain" / "blend.png")


def test_two_reports_show_the_change_per_language(data_dir, tmp_path, capsys):
    before = _eval_json(tmp_path / "before.json",
                        {"exported": {"en": (1000, 1500.0), "fr": (800, 1400.0), "yo": (90, 300.0)},
                         "ref": {"en": (1000, 1.0)}})
    after = _eval_json(tmp_path / "after.json", {"exported": {"en": (1000, 1300.0), "fr": (800, 1450.0)},
                                                "ref": {"en": (1000, 2.0)}})
    assert cli.main([*_blend_argv(data_dir, tmp_path / "b"), "--eval", before, "--eval", after]) == 0
    printed = capsys.readouterr().out
    assert "| bits per byte before | bits per byte after | change |" in printed
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[6:9]] for line in printed.splitlines()
            if line.startswith("| ")}
    en_change = _bpb(1000, 1300.0) - _bpb(1000, 1500.0)
    assert rows["en"] == [f"{_bpb(1000, 1500.0):.4f}", f"{_bpb(1000, 1300.0):.4f}", f"{en_change:+.4f}"]
    assert rows["fr"][2] == f"{_bpb(800, 1450.0) - _bpb(800, 1400.0):+.4f}" and rows["fr"][2].startswith("+")
    assert rows["yo"] == [f"{_bpb(90, 300.0):.4f}", "-", "-"]  # not evaluated after: no change to show
    table = {d["name"]: d for d in json.loads((tmp_path / "b" / "blend.json").read_text())["datasets"]}
    assert table["en"]["bpb"] == pytest.approx(_bpb(1000, 1300.0)) and table["en"]["bpb_before"] == pytest.approx(
        _bpb(1000, 1500.0)) and table["en"]["bpb_change"] == pytest.approx(en_change)
    assert table["yo"]["bpb"] is None and table["yo"]["bpb_change"] is None

    # --eval-model picks another model of both reports
    assert cli.main([*_blend_argv(data_dir, tmp_path / "r"), "--eval", before, "--eval", after, "--eval-model",
                     "ref"]) == 0
    table = {d["name"]: d for d in json.loads((tmp_path / "r" / "blend.json").read_text())["datasets"]}
    assert table["en"]["bpb_change"] == pytest.approx(_bpb(1000, 1.0))  # (2 - 1) nats over 1000 bytes
    assert table["fr"]["bpb"] is None


def test_eval_errors_are_one_line(data_dir, tmp_path, capsys):
    good = _eval_json(tmp_path / "eval.json", {"exported": {"en": (1000, 1500.0)}})
    other = _eval_json(tmp_path / "other.json", {"exported": {"de": (1000, 1500.0)}})
    (tmp_path / "bad.json").write_text('{"models": {"m": {"languages": {"en": {"docs": 1}}}}}')
    (tmp_path / "text.json").write_text("not json")
    cases = [
        (["--eval", good, "--eval-model", "nope"], f"--eval-model nope: {good} has no such model (it has exported)"),
        (["--eval", good, "--eval", good, "--eval", good], "--eval: give one eval.json, or two to compare"),
        (["--eval", other], f"--eval {other}: none of its languages (de) is a dataset of the blend (en, fr, yo)"),
        (["--eval", str(tmp_path / "bad.json")], "not an eval.json (models.m.languages.en.bytes: Field required)"),
        (["--eval", str(tmp_path / "text.json")], "not a JSON file"),
        (["--eval", str(tmp_path / "missing.json")], "no such file"),
    ]
    for extra, message in cases:
        assert cli.main([*_blend_argv(data_dir, tmp_path / "o"), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()  # nothing written when the report is wrong
