"""The tr11 mixture (configs/data/bloom-tr11-mixture.yaml) against BigScience's JSON (a verbatim copy in
tests/data/tr11), the model card's shares, matching datasets to groups, and `bloomdata blend --mixture`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from bloomdata import cli
from bloomdata.blend.mixture import Mixture, load_mixture
from bloomdata.blend.spec import load_blend_spec
from bloomdata.blend.tune import BlendConfig, tune_blend
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.blend import blend_from_spec
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import parse_range, range_to_documents
from tests.bloomdata.megatron_oracle import write_dataset

ROOT = Path(__file__).resolve().parents[2]
MIXTURE = ROOT / "configs" / "data" / "bloom-tr11-mixture.yaml"
SOURCE = ROOT / "tests" / "data" / "tr11" / "training_dataset_ratios_merged_nigercongo_v3.json"
INDIC = ["as", "bn", "gu", "hi", "kn", "ml", "mr", "ne", "or", "pa", "ta", "te", "ur"]


def _source_ratios() -> dict[str, float]:
    """The JSON's entries as {directory name: ratio} (the names are the last part of each dataset_path)."""
    entries = json.loads(SOURCE.read_text())
    assert all(set(e) == {"dataset_path", "ratio"} for e in entries)
    return {e["dataset_path"].rsplit("/", 1)[1]: e["ratio"] for e in entries}


def test_the_ratios_are_the_source_files():
    mixture = load_mixture(str(MIXTURE))
    source = _source_ratios()
    assert len(source) == len(mixture.groups) == 28
    by_source = {g.source: g.ratio for g in mixture.groups.values()}
    assert set(by_source) == set(source)
    for name, ratio in source.items():
        assert by_source[name] == ratio, name  # the same double, not merely close
    assert math.fsum(g.ratio for g in mixture.groups.values()) == 1.0
    assert (mixture.source.path, mixture.source.commit) == (
        "data/catalogue/training_dataset_ratios_merged_nigercongo_v3.json", "0ab8e50aada8a0c5cd0d7c86e876ee2fe3591015")
    # load_ratios_meg_ds_format.py's TOKEN_RANGES, as the scripts used them
    assert (mixture.train_range, mixture.valid_range) == ("0:0.950", "0.950:1.0")


def test_the_groups_are_tr11s():
    groups = load_mixture(str(MIXTURE)).groups
    assert {k: groups[k].source for k in INDIC} == {k: f"indic-{k}" for k in INDIC}  # one per Indic language
    assert {k: g.source for k, g in groups.items() if k.startswith(("en", "zh"))} == {
        "en": "en", "en-oscar": "oscar-en", "zh-Hans": "zhs", "zh-Hant": "zht", "zh-oscar": "oscar-zh"}
    assert groups["code"].source == "code" and groups["nic"].source == "nigercongo-all"
    assert [k for k, g in groups.items() if g.languages] == ["nic"]  # the one merged group


def test_the_model_card_shares():
    groups = load_mixture(str(MIXTURE)).groups
    # Indic: the card gives each ratio in percent, truncated to one significant digit (hi 0.7799 -> 0.7)
    for key in INDIC:
        percent = 100 * groups[key].ratio
        unit = 10 ** math.floor(math.log10(percent))
        assert groups[key].card_percent == pytest.approx(math.floor(percent / unit) * unit, abs=1e-12), key
    assert sum(groups[k].card_percent for k in INDIC) == pytest.approx(2.01)
    # Niger-Congo: the card's 21 rows (0.03531%) plus the tr11 README's Twi (0.0001%)
    nic = groups["nic"]
    assert set(nic.languages) == {"tum", "ki", "bm", "ak", "ts", "st", "ny", "tw", "tn", "ln", "nso", "fon", "rn",
                                  "wo", "lg", "sn", "zu", "ig", "xh", "rw", "yo", "sw"}
    assert math.fsum(v for k, v in nic.languages.items() if k != "tw") == pytest.approx(0.03531, abs=1e-12)
    parts = nic.member_ratios()
    assert math.fsum(parts.values()) == pytest.approx(nic.ratio, rel=1e-15)  # the split adds up to the group
    assert parts["sw"] / parts["yo"] == pytest.approx(0.02 / 0.006)


def test_select_renormalizes_and_reports():
    mixture = load_mixture(str(MIXTURE))
    sel = mixture.select(["fr", "indic-hi", "zh", "sw", "yo", "de"])
    ratios = {g.source: g.ratio for g in mixture.groups.values()}
    nic = mixture.groups["nic"]
    assert sel.groups == {"zh": "zh-Hans", "fr": "fr", "indic-hi": "hi", "yo": "nic", "sw": "nic"}
    assert sel.ratios["sw"] == nic.ratio * 0.02 / math.fsum(nic.languages.values())
    present = ratios["fr"] + ratios["zhs"] + ratios["indic-hi"] + sel.ratios["sw"] + sel.ratios["yo"]
    weights = sel.weights()
    assert weights["fr"] == pytest.approx(ratios["fr"] / present, rel=1e-14)
    assert math.fsum(weights.values()) == pytest.approx(1.0, abs=1e-15)
    assert sel.unmatched == ["de"]
    assert "en" in sel.missing and "nic/ig" in sel.missing and "nic" not in sel.missing and "fr" not in sel.missing
    # everything the mixture has is either present or missing, nothing twice
    assert math.fsum([*sel.ratios.values(), *sel.missing.values()]) == pytest.approx(1.0, abs=1e-15)
    assert mixture.select(["nigercongo-all"]).groups == {"nigercongo-all": "nic"}


@pytest.mark.parametrize("names,needle", [
    (["zh", "zhs"], "datasets zhs and zh both match mixture group zh-Hans; keep one"),
    (["nic", "sw"], "dataset nic is all of mixture group nic, and sw are parts of it"),
])
def test_select_refuses_ambiguity(names, needle):
    with pytest.raises(BloomstackError, match=needle):
        load_mixture(str(MIXTURE)).select(names)


def test_a_bad_mixture_names_the_file(tmp_path):
    bad = tmp_path / "mix.yaml"
    bad.write_text("groups:\n  en: {ratio: 0.6}\n  fr: {ratio: 0.3}\n")
    with pytest.raises(BloomstackError, match=r"mix\.yaml:1: groups: the ratios sum to 0\.9, not 1"):
        load_mixture(str(bad))
    bad.write_text("groups:\n  en: {ratio: 0.5, aliases: [fr]}\n  fr: {ratio: 0.5}\n")
    with pytest.raises(BloomstackError, match="dataset name 'fr' would match both group en and group fr"):
        load_mixture(str(bad))
    bad.write_text("groups:\n  en: {ratio: 1.5}\n")
    with pytest.raises(BloomstackError, match=r"mix\.yaml:2: groups\.en\.ratio: Input should be less than or equal"):
        load_mixture(str(bad))
    bad.write_text("valid_range: 0.95-1\ngroups:\n  en: {ratio: 1}\n")
    with pytest.raises(BloomstackError, match=r"mix\.yaml:1: valid_range: range '0\.95-1': expected START:END"):
        load_mixture(str(bad))
    assert Mixture(groups={"en": {"ratio": 0.75}, "fr": {"ratio": 0.25}}).select(["fr"]).weights() == {"fr": 1.0}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tr11")
    for k, name in enumerate(["en", "oscar-en", "hi", "sw", "yo", "de"]):
        write_dataset(root / name, num_docs=60 + 20 * k, seed=k, max_len=50)
    return root


def test_cli_blend_from_the_mixture(data_dir, tmp_path, capsys):
    out = tmp_path / "tr11"
    assert cli.main(["blend", "--mixture", str(MIXTURE), "--datasets-dir", str(data_dir), "--seq-length", "16",
                     "--seed", "42", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    mixture = load_mixture(str(MIXTURE))
    sel = mixture.select(["en", "oscar-en", "hi", "sw", "yo", "de"])
    spec = load_blend_spec(str(out / "blend.yaml"))
    # mixture order: en, en-oscar, ..., hi, ..., nic's members in its order (yo before sw)
    assert [d.name for d in spec.datasets] == ["en", "oscar-en", "hi", "yo", "sw"]
    total = math.fsum(sel.ratios.values())
    for d in spec.datasets:
        assert d.weight == pytest.approx(sel.ratios[d.name] / total, rel=1e-14)
        ds = IndexedDataset(data_dir / d.name)
        begin, end = range_to_documents(*parse_range("0:0.950"), len(ds))
        assert d.tokens == int(ds.sizes[begin:end].sum())  # counted on the mixture's train range
        assert d.tokens_drawn is None and d.epochs is None  # no --budget
    assert (spec.mixture, spec.train_range, spec.valid_range) == (str(MIXTURE), "0:0.950", "0.950:1.0")
    assert spec.alpha is None and spec.unmatched == ["de"]
    assert spec.missing == sel.missing and "code" in spec.missing
    table = json.loads((out / "blend.json").read_text())
    assert table["missing"]["code"] == mixture.groups["code"].ratio and table["unmatched"] == ["de"]
    md = (out / "blend.md").read_text()
    assert "Missing from the datasets (their mixture ratio): en-oscar" not in md  # en-oscar is there (oscar-en)
    assert "code 13%" in md and "Left out (no group of the mixture): de." in md
    assert "| hi |" in captured.out and "Missing from the datasets" in captured.out
    assert "warning: no dataset for" in captured.err and "code" in captured.err
    raw = yaml.safe_load((out / "blend.yaml").read_text())
    assert raw["seed"] == 42 and raw["datasets"][0]["name"] == "en"
    # per-language validation sets (the trainer's data.valid_sets): every dataset on the blend's valid range; the
    # comment holds no shell syntax, so "data.valid_sets=$(cat valid_sets.yaml)" survives any quoting
    text = (out / "valid_sets.yaml").read_text()
    assert yaml.safe_load(text) == {d.name: d.prefix for d in spec.datasets}
    assert "0.950:1.0" in text and not set("\"'$`\\") & set(text.replace(str(data_dir), ""))
    # the trainer's reader builds both splits from it with BLOOM's rules
    assert len(blend_from_spec(spec, 40, "train", compat="bloom")) >= 40
    assert len(blend_from_spec(spec, 4, "valid", compat="bloom")) >= 4


def test_mixture_with_budget_floor_and_errors(data_dir, tmp_path, capsys):
    config = BlendConfig(mixture=str(MIXTURE), datasets={"en": str(data_dir / "en"), "sw": str(data_dir / "sw")},
                         token_budget="1e4", floor=0.1, out_dir=str(tmp_path))
    spec = tune_blend(config)
    assert [d.weight for d in spec.datasets] == pytest.approx([0.9, 0.1])  # sw's tiny share lifted to the floor
    assert spec.datasets[0].tokens_drawn == 9000
    assert spec.datasets[0].epochs == pytest.approx(9000 / spec.datasets[0].tokens)
    # an explicit split replaces the mixture's ranges
    assert tune_blend(derive(config, split="90,10,0")).train_range is None
    one = write_dataset(tmp_path / "one", num_docs=1)
    with pytest.raises(BloomstackError, match="dataset.s. en hold no training tokens"):  # round(0.6 x 1) = 1 = end
        tune_blend(BlendConfig(mixture=str(MIXTURE), datasets={"en": one}, train_range="0.6:1", out_dir=str(tmp_path)))
    out = str(tmp_path / "o")
    assert cli.main(["blend", "--mixture", str(MIXTURE), "--dataset", f"de={data_dir / 'de'}", "--out", out]) == 2
    assert "no dataset name (de) matches a group of" in capsys.readouterr().err
    assert cli.main(["blend", "--mixture", str(MIXTURE), "--datasets-dir", str(data_dir), "--alpha", "0.5",
                     "--out", out]) == 2
    assert "--alpha does not apply with --mixture" in capsys.readouterr().err
    assert cli.main(["blend", "--mixture", str(tmp_path / "nope.yaml"), "--datasets-dir", str(data_dir),
                     "--out", out]) == 2
    assert "nope.yaml: cannot read config file" in capsys.readouterr().err
