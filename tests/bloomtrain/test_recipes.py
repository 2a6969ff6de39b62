"""The BLOOM recipes (configs/train/bloom-*.yaml) against BigScience's published tr11 scripts, value by value.

The tables below are the scripts' values (bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm
and smaller_models/tr11{b,c,d,e,f}-*-ml.slurm; each recipe names its file and commit), with this project's
departures marked where they are. Any change to a recipe must change a table, deliberately. Each recipe's
``bloomtrain slurm`` script is rendered for its published node count and checked against the layout and
batch arithmetic done by hand, and each recipe's blend either exists or its recipe says how to make it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from bloomdata import cli as bloomdata_cli
from bloomdata.blend.spec import load_blend_spec
from bloomdata.cli.blend import parser as blend_parser
from bloomdata.errors import BloomstackError
from bloomdata.megatron.blend import blend_from_spec
from bloomdata.megatron.indexed import IndexedDataset
from bloomtrain.cli.slurm import main as slurm_main
from bloomtrain.config import load_config
from bloomtrain.data import build_valid_sets
from tests.bloomdata.megatron_oracle import write_dataset

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "train"

# In every tr11 script, all sizes (the tr11 README: "The default Megatron-LM dropout settings are inherited").
COMMON = {
    "model.seq_length": 2048,  # SEQ_LEN=2048
    "model.init_std": 0.0048,  # --init-method-std 0.0048
    "model.hidden_dropout": 0.1,  # Megatron-DeepSpeed's default; no script passes --hidden-dropout
    "model.attention_dropout": 0.1,  # likewise --attention-dropout
    "model.vocab_size": 250_680,
    "model.pad_vocab_size_to": 250_880,  # --pad-vocab-size-to 250880
    "model.layernorm_eps": 1e-5,  # Megatron's default --layernorm-epsilon, never overridden
    "model.kernels": "auto",  # departure: --abort-on-unmet-fused-kernel-constraints would be "fused"
    "parallel.partition_method": "type:transformer|embedding",  # --pp-partition-method
    "optim.precision": "bf16",  # departure for the V100 sizes (fp16); tr11-176B: --bf16
    "optim.beta1": 0.9,
    "optim.beta2": 0.95,
    "optim.eps": 1e-8,
    "optim.weight_decay": 0.1,
    "optim.clip_grad": 1.0,
    "optim.grad_reduce_dtype": "fp32",  # departure: tr11 reduced in bf16 (176B) or fp16 (the V100 sizes)
    "schedule.train_samples": 220_000_000,
    "schedule.warmup_samples": 183_105,
    "schedule.decay_samples": 200_000_000,
    "schedule.decay_style": "cosine",
    "data.kind": "blend",
    "data.blend": "data/tr11/blend.yaml",  # every script reads the same catalogue JSON
    "data.compat": "bloom",
    "checkpoint.keep_last": None,  # Megatron keeps every checkpoint
    "checkpoint.exit_duration_in_mins": 5990,  # --exit-duration-in-mins 5990
    "logging.log_interval": 1,
    "logging.eval_interval": 1000,
    "logging.eval_iters": 1,
    "seed": 42,
}

# recipe -> the values that differ between scripts (layers/hidden/heads, TP/PP, batches, lr, saving)
SIZES = {
    "bloom-560m": {  # tr11e-350M-ml.slurm @ 1e8c57d (+ continuation @ 2ec7c95)
        "model.num_layers": 24, "model.hidden_size": 1024, "model.num_heads": 16,
        "parallel.tp": 1, "parallel.pp": 1, "parallel.activation_checkpointing": False,
        "schedule.micro_batch_size": 1, "schedule.global_batch_size": 256,
        "schedule.rampup_batch_size": (192, 32, 9_765_625),  # the continuation's; the main script's 192 16 cannot run
        "optim.lr": 3.0e-4, "optim.min_lr": 1e-5, "checkpoint.save_interval": 250,
        "checkpoint.dir": "checkpoints/bloom-560m", "logging.dir": "runs/bloom-560m",
    },
    "bloom-1b1": {  # tr11d-760M-ml.slurm @ 1e8c57d
        "model.num_layers": 24, "model.hidden_size": 1536, "model.num_heads": 16,
        "parallel.tp": 1, "parallel.pp": 2, "parallel.activation_checkpointing": False,
        "schedule.micro_batch_size": 1, "schedule.global_batch_size": 256,
        "schedule.rampup_batch_size": (192, 16, 9_765_625),
        "optim.lr": 2.5e-4, "optim.min_lr": 1e-5, "checkpoint.save_interval": 250,
        "checkpoint.dir": "checkpoints/bloom-1b1", "logging.dir": "runs/bloom-1b1",
    },
    "bloom-1b7": {  # tr11b-1B3-ml.slurm @ 104124f
        "model.num_layers": 24, "model.hidden_size": 2048, "model.num_heads": 16,
        "parallel.tp": 2,  # departure: TP_SIZE=1, with MICRO_BATCH_SIZE=4 (4 x DP 32 divides neither 192 nor 16)
        "parallel.pp": 2, "parallel.activation_checkpointing": True,
        "schedule.micro_batch_size": 1,  # departure: 4
        "schedule.global_batch_size": 512,
        "schedule.rampup_batch_size": (192, 16, 9_765_625),
        "optim.lr": 2e-4, "optim.min_lr": 1e-5, "checkpoint.save_interval": 250,
        "checkpoint.dir": "checkpoints/bloom-1b7", "logging.dir": "runs/bloom-1b7",
    },
    "bloom-3b": {  # tr11c-2B5-ml.slurm @ 1e8c57d
        "model.num_layers": 30, "model.hidden_size": 2560, "model.num_heads": 32,
        "parallel.tp": 4, "parallel.pp": 4, "parallel.activation_checkpointing": True,
        "schedule.micro_batch_size": 1, "schedule.global_batch_size": 512,
        "schedule.rampup_batch_size": (192, 32, 9_765_625),
        "optim.lr": 1.6e-4, "optim.min_lr": 1e-5, "checkpoint.save_interval": 250,
        "checkpoint.dir": "checkpoints/bloom-3b", "logging.dir": "runs/bloom-3b",
    },
    "bloom-7b1": {  # tr11f-6B3-ml.slurm @ 08f504f
        "model.num_layers": 30, "model.hidden_size": 4096, "model.num_heads": 32,
        "parallel.tp": 4, "parallel.pp": 4, "parallel.activation_checkpointing": True,
        "schedule.micro_batch_size": 1, "schedule.global_batch_size": 512,
        "schedule.rampup_batch_size": (192, 32, 9_765_625),
        "optim.lr": 1.2e-4, "optim.min_lr": 1e-5, "checkpoint.save_interval": 250,
        "checkpoint.dir": "checkpoints/bloom-7b1", "logging.dir": "runs/bloom-7b1",
    },
    "bloom-176b-tr11": {  # tr11-176B-ml.slurm @ 003b250 (48 nodes)
        "model.num_layers": 70, "model.hidden_size": 14336, "model.num_heads": 112,
        "parallel.tp": 4, "parallel.pp": 12, "parallel.activation_checkpointing": True,
        "schedule.micro_batch_size": 2, "schedule.global_batch_size": 2048,
        "schedule.rampup_batch_size": (192, 16, 9_765_625),
        "optim.lr": 6e-5, "optim.min_lr": 6e-6, "checkpoint.save_interval": 100,
        "checkpoint.dir": "checkpoints/tr11-176B-ml", "logging.dir": "runs/tr11-176B-ml",
        "checkpoint.kill_switch_path": "checkpoints/tr11-176B-ml/kill-switch-tr11-176B-exp1",
        "logging.peak_tflops": 312,
    },
}

# recipe -> (nodes, GPUs per node) published, DP there, and gradient-accumulation steps at the ramp-up's start
# and at the full batch, by hand: DP = nodes x GPUs / (TP x PP); GAS = batch / (micro batch x DP).
LAYOUTS = {
    "bloom-560m": ((8, 4), 32, (6, 8)),  # 32 / (1 x 1) = 32; 192 / 32 = 6, 256 / 32 = 8
    "bloom-1b1": ((8, 4), 16, (12, 16)),  # 32 / (1 x 2) = 16; 192 / 16 = 12, 256 / 16 = 16
    "bloom-1b7": ((16, 4), 16, (12, 32)),  # 64 / (2 x 2) = 16; 192 / 16 = 12, 512 / 16 = 32
    "bloom-3b": ((32, 4), 8, (24, 64)),  # 128 / (4 x 4) = 8; 192 / 8 = 24, 512 / 8 = 64
    "bloom-7b1": ((32, 4), 8, (24, 64)),  # 128 / (4 x 4) = 8; 192 / 8 = 24, 512 / 8 = 64
    "bloom-176b-tr11": ((48, 8), 8, (12, 128)),  # 384 / (4 x 12) = 8; 192 / (2 x 8) = 12, 2048 / 16 = 128
}


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        out.update(_flat(value, dotted + ".") if isinstance(value, dict) else {dotted: value})
    return out


def test_one_recipe_per_bloom_size():
    recipes = sorted(p.stem for p in CONFIGS.glob("bloom-*.yaml"))
    assert recipes == sorted(SIZES)
    sizes = {re.match(r"bloom-(\d+[mb]\d*)", name).group(1) for name in recipes}
    assert sizes == {"560m", "1b1", "1b7", "3b", "7b1", "176b"}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_recipe_values_are_the_published_ones(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    values = _flat(cfg.model_dump())
    expected = {**COMMON, **SIZES[name]}
    assert {k: values[k] for k in expected} == expected
    # and every value the recipe file sets is one of the table's (a preset stands for its shape)
    written = set(_flat(yaml.safe_load((CONFIGS / f"{name}.yaml").read_text()))) - {"model.preset"}
    assert written - set(expected) == set()


@pytest.mark.parametrize("name", sorted(SIZES))
def test_slurm_script_at_the_published_node_count(name, tr11_dir, capsys):
    (nodes, gpus), dp, (gas_start, gas_full) = LAYOUTS[name]
    assert slurm_main(["--config", str(CONFIGS / f"{name}.yaml"), "--nodes", str(nodes),
                       "--gpus-per-node", str(gpus), "--workdir", str(tr11_dir)]) == 0
    script = capsys.readouterr().out
    assert re.search(r"^#SBATCH --nodes=(\d+)", script, re.M).group(1) == str(nodes)
    assert re.search(r"^#SBATCH --gres=gpu:(\d+)", script, re.M).group(1) == str(gpus)
    assert re.search(r"--nproc-per-node (\d+)", script).group(1) == str(gpus)
    tp, pp, got_dp = map(int, re.search(r"TP (\d+) x PP (\d+) x DP (\d+)", script).groups())
    assert (tp, pp, got_dp) == (SIZES[name]["parallel.tp"], SIZES[name]["parallel.pp"], dp)
    assert tp * pp * got_dp == nodes * gpus
    cfg = load_config(CONFIGS / f"{name}.yaml")
    mbs = cfg.schedule.micro_batch_size
    for batch, gas in ((cfg.schedule.rampup_batch_size[0], gas_start), (cfg.schedule.global_batch_size, gas_full)):
        ds = cfg.to_deepspeed_config(nodes * gpus, train_batch_size=batch)
        assert ds["gradient_accumulation_steps"] == gas
        assert mbs * gas * got_dp == batch == ds["train_batch_size"]


@pytest.mark.parametrize("name,world,overrides,needle", [
    # why bloom-560m takes its continuation's ramp-up: the main script's increment 16 at DP 32
    ("bloom-560m", 32, ["schedule.rampup_batch_size=[192,16,9765625]"],
     "rampup_batch_size increment=16 is not a multiple of micro_batch_size 1 x data-parallel size 32"),
    # why bloom-1b7 departs from micro batch 4 at TP 1 x PP 2 x DP 32: 4 x 32 = 128 does not divide 192
    ("bloom-1b7", 64, ["parallel.tp=1", "schedule.micro_batch_size=4"],
     "rampup_batch_size start=192 is not a multiple of micro_batch_size 4 x data-parallel size 32"),
])
def test_the_published_values_that_cannot_run(name, world, overrides, needle):
    with pytest.raises(BloomstackError, match=needle):
        load_config(CONFIGS / f"{name}.yaml", overrides).dp_size(world)


def _blend_command(path: Path) -> list[str] | None:
    """The `bloomdata blend ...` command a recipe's comment gives for its blend, as argv after `blend`."""
    for line in path.read_text().splitlines():
        text = line.strip().lstrip("#").strip()
        if text.startswith("bloomdata blend "):
            return shlex.split(text)[2:]
    return None


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_blend_exists_or_its_recipe_says_how_to_make_it(path):
    cfg = load_config(path)
    if cfg.data.kind != "blend":
        return
    blend = Path(cfg.data.blend) if Path(cfg.data.blend).is_absolute() else ROOT / cfg.data.blend
    if blend.exists():
        return
    argv = _blend_command(path)
    assert argv, f"{path.name}: data.blend {cfg.data.blend} does not exist and no comment says how to make it"
    made, _ = blend_parser().parse(argv)
    assert (ROOT / made.mixture).exists()
    assert Path(made.out_dir) / "blend.yaml" == Path(cfg.data.blend)
    assert (made.seq_length, made.seed) == (cfg.model.seq_length, cfg.seed)


def test_the_recipe_blend_command_makes_the_blend_and_the_valid_sets(tmp_path, monkeypatch, capsys):
    """The 176B recipe's command, run as written (DATA = three built languages), writes the blend it names, and
    the recipe's valid_sets line gives the trainer tr11's per-language validation sets: each on the last 5% of
    its dataset's documents."""
    data = tmp_path / "DATA"
    data.mkdir()
    for k, name in enumerate(["en", "fr", "yo"]):  # ~100k tokens each: a few 2049-token samples in the last 5%
        write_dataset(data / name, num_docs=2000, seed=k, max_len=100)
    (tmp_path / "configs/data").mkdir(parents=True)
    (tmp_path / "configs/data/bloom-tr11-mixture.yaml").write_bytes(
        (ROOT / "configs/data/bloom-tr11-mixture.yaml").read_bytes())
    monkeypatch.chdir(tmp_path)  # the command's paths are relative to the repository root
    recipe = CONFIGS / "bloom-176b-tr11.yaml"
    assert bloomdata_cli.main(["blend", *_blend_command(recipe)]) == 0
    spec = load_blend_spec("data/tr11/blend.yaml")
    assert [d.name for d in spec.datasets] == ["en", "fr", "yo"]
    assert (spec.train_range, spec.valid_range, spec.seed, spec.seq_length) == ("0:0.950", "0.950:1.0", 42, 2048)
    assert "warning: no dataset for" in capsys.readouterr().err
    assert len(blend_from_spec(spec, 10, "train", compat="bloom")) >= 10

    valid_file = re.search(r'"data\.valid_sets=\$\(cat (\S+)\)"', recipe.read_text()).group(1)
    cfg = load_config(recipe, [f"data.valid_sets={Path(valid_file).read_text()}", "data.tokenizer=tokenizer.json"])
    assert {name: vs.path for name, vs in cfg.data.valid_sets.items()} == {d.name: d.prefix for d in spec.datasets}
    sets = build_valid_sets(cfg)
    assert list(sets) == ["en", "fr", "yo"]
    for name, samples in sets.items():
        # a sample is a stretch of the shuffled held-out documents: its 8-grams inside a document are held-out
        # text, none is training text (random tokens: an 8-gram matches by chance with odds ~1e-24)
        ds = IndexedDataset(data / name)
        begin = round(0.95 * len(ds))  # tr11's 0.950:1.0 of the documents
        train, held_out = _ngrams(ds[i] for i in range(begin)), _ngrams(ds[i] for i in range(begin, len(ds)))
        assert len(samples) >= 1
        for k in range(len(samples)):
            grams = list(_ngrams([samples[k].astype(ds[0].dtype)]))
            assert not train.intersection(grams), (name, k)
            assert sum(g in held_out for g in grams) > len(grams) / 2, (name, k)  # the rest straddle documents


def _ngrams(docs, n: int = 8) -> set[bytes]:
    return {doc[i:i + n].tobytes() for doc in docs for i in range(len(doc) - n + 1)}
