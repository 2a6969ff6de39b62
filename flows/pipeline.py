"""``bloom_pipeline``: corpus -> clean -> tokenizer -> per-language datasets -> blend -> training -> HF export ->
evaluation.

One typed ``PipelineConfig`` drives every stage (it is the deployment's parameter schema). The pipeline
only wires outputs to inputs and chains the stage hashes: each stage is a subflow that skips itself
when its marker matches (``flows.stages``), so re-running a failed pipeline resumes at the failed stage,
and changing one stage's config re-runs that stage and everything downstream of it, nothing upstream.
The clean stage (on unless ``config.clean`` is None) writes the cleaned shards the tokenizer and the build
read instead of the corpus; their keys fold in its key. A stage that does not complete ends the pipeline
Failed (Cancelled for a cancelled training) with "<stage> stage <state>: <its message>" (``flows.failures``).
The training stage also gets one named validation set per language (each language dataset's validation
split, ``language_valid_sets``) and the tokenizer, so the run logs every language's loss, perplexity and
bits per byte at each evaluation, and its summary shows them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import split_range
from bloomdata.mixture.spec import load_blend_spec
from bloomdata.readers import SourceConfig
from bloomtrain.config import VALID_SET_NAME
from bloomtrain.evaluation.config import ModelSpec
from flows.blend import blend_flow
from flows.clean import clean_flow, cleaned_sources
from flows.config import PipelineConfig, TrainStageConfig
from flows.data import dataset_flow, tokenizer_flow
from flows.evaluate import bpb_table, evaluate_flow
from flows.export import export_flow
from flows.failures import stage_result, user_errors
from flows.report import training_markdown
from flows.train import train_flow


def training_tokens(train: TrainStageConfig) -> int:
    """Tokens the run consumes: samples x sequence length (the blend's budget when none is given)."""
    s = train.train.schedule
    samples = s.train_samples if s.train_samples is not None else s.train_iters * s.global_batch_size
    return samples * train.train.model.seq_length


def language_valid_sets(blend_yaml: str, seq_length: int, compat: str) -> tuple[dict[str, str], list[str]]:
    """One validation set per dataset of the blend (a language here): ``{name: prefix}`` for those whose
    validation split (the blend's ``split``/``valid_range``, with the trainer's ``compat`` arithmetic) holds at
    least one sample of ``seq_length + 1`` tokens, and the names left out (too little held-out text)."""
    spec = load_blend_spec(blend_yaml)
    split = spec.split if spec.split is not None else spec.valid_range
    sets: dict[str, str] = {}
    left_out: list[str] = []
    for d in spec.datasets:
        tokens = 0
        if split is not None and VALID_SET_NAME.fullmatch(d.name):
            ds = IndexedDataset(d.prefix)
            begin, end = split_range(split, "valid", len(ds), compat)
            tokens = int(ds.sizes[begin:end].sum(dtype=np.int64))
        if tokens > seq_length:
            sets[d.name] = d.prefix
        else:
            left_out.append(d.name)
    return sets, left_out


def wire_training(train: TrainStageConfig, vocab_size: int, blend_yaml: str, out_dir: Path, *,
                  tokenizer: str | None = None, valid_sets: dict[str, str] | None = None) -> TrainStageConfig:
    """The training stage reading this pipeline's blend, with the model's vocabulary = the tokenizer's, the
    tokenizer (bits per byte) and ``valid_sets`` (one per language) beside any sets the config names itself
    (which win on a name clash)."""
    tree = train.train.model_dump()
    # Megatron padding (multiple of 128 x tp) instead of BLOOM's fixed 250880 rows.
    tree["model"].update(vocab_size=vocab_size, pad_vocab_size_to=None)
    tree["data"].update(kind="blend", blend=blend_yaml)
    if tokenizer is not None:
        tree["data"]["tokenizer"] = tokenizer
    if valid_sets:
        tree["data"]["valid_sets"] = {**valid_sets, **tree["data"]["valid_sets"]}
    return train.model_copy(update={"train": type(train.train).model_validate(tree), "out_dir": str(out_dir)})


def summary_markdown(result: dict[str, Any]) -> str:
    """The run's front page: the training summary (numbers, loss curve) with every stage's output path."""
    t, e = result["train"], result["export"]
    clean = result.get("clean")
    paths = {
        **({"cleaned corpus": f"{clean['data_dir']} ({clean['summary']['documents_kept']:,} of "
                              f"{clean['summary']['documents_in']:,} documents kept)"} if clean else {}),
        "tokenizer": f"{result['tokenizer']['tokenizer_dir']} ({result['tokenizer']['vocab_size']} tokens)",
        "datasets": f"{result['dataset']['out_dir']} ({result['dataset']['tokens']:,} tokens)",
        "blend": result["blend"]["blend_yaml"],
        **t["paths"],
        "HF export": e["hf_dir"],
        "evaluation": result["evaluate"]["eval_json"],
    }
    md = training_markdown(t, paths=paths, png=t.get("loss_png"))
    md = md.replace("# Training summary", "# bloom_pipeline: training summary", 1)
    if e.get("evaluation"):
        md += (f"\nThe exported model (transformers) on the same validation samples: loss "
               f"{e['evaluation']['loss']:.4f}.\n")
    md += "\n## Samples (greedy, exported model)\n\n" + "\n".join(f"> {s}" for s in e["samples"]) + "\n"
    return md + "\n## Bits per byte on held-out text\n\n```\n" + bpb_table(result["evaluate"]["models"]) + "\n```\n"


def corpus_stage(config: PipelineConfig, root: Path) -> tuple[list[SourceConfig], list[str], dict[str, Any] | None]:
    """The clean stage when it is on: the sources the tokenizer and the build read (the cleaned shards, else the
    corpus), the stage keys they fold in, and the stage's result (None when off)."""
    if config.clean is None:
        return config.corpus, [], None
    clean_cfg = config.clean.model_copy(update={"sources": config.corpus, "out_dir": str(root / "clean")})
    clean = stage_result("clean", clean_flow(clean_cfg, return_state=True))
    return cleaned_sources(clean), [clean["hash"]], clean


@flow(name="bloom-pipeline")
@user_errors
def bloom_pipeline(config: PipelineConfig = PipelineConfig()) -> dict[str, Any]:
    """Run every stage, skipping the ones already done with the same config; returns where everything is."""
    log = get_run_logger()
    root = Path(config.out_dir).resolve()
    # A stage that does not complete ends the pipeline in the same kind of state, its message naming the stage
    # (stage_result raises StageEnded; user_errors turns it into the state): a rerun resumes there.
    sources, cleaned, clean = corpus_stage(config, root)
    tok_cfg = config.tokenizer.model_copy(update={"sources": sources, "out_dir": str(root / "tokenizer")})
    tok = stage_result("tokenizer", tokenizer_flow(tok_cfg, fertility_docs_per_lang=config.fertility_docs_per_lang,
                                                   upstream=cleaned, return_state=True))

    build_cfg = config.dataset.model_copy(update={"sources": sources, "tokenizer": tok["tokenizer_dir"],
                                                  "out_dir": str(root / "data")})
    data = stage_result("dataset", dataset_flow(build_cfg, upstream=[tok["hash"], *cleaned], return_state=True))

    prefixes = {name: o["prefix"] for name, o in data["outputs"].items() if o["tokens"] > 0}
    blend_cfg = config.blend.model_copy(update={
        "token_budget": config.blend.token_budget or training_tokens(config.train),
        "seq_length": config.blend.seq_length or config.train.train.model.seq_length,
        "seed": config.blend.seed if config.blend.seed is not None else config.train.train.data.seed,
        "out_dir": str(root / "blend")})
    blend = stage_result("blend", blend_flow(prefixes, blend_cfg, upstream=[data["hash"]], return_state=True))

    # One validation set per language (its dataset's validation split): valid/<lang>/loss, ppl, bpb.
    t0 = config.train.train
    sets, left_out = language_valid_sets(blend["blend_yaml"], t0.model.seq_length, t0.data.compat) \
        if t0.logging.eval_interval else ({}, [])
    if left_out:
        log.warning("bloom_pipeline: no per-language validation for %s: the validation split holds less than one "
                    "sample of %d tokens", ", ".join(left_out), t0.model.seq_length + 1)
    train_cfg = wire_training(config.train, tok["vocab_size"], blend["blend_yaml"], root / "train",
                              tokenizer=tok["tokenizer_dir"], valid_sets=sets)
    # Failed or Cancelled, the message quoting the job's last lines
    train = stage_result("train", train_flow(train_cfg, upstream=[blend["hash"]], return_state=True))

    t = train_cfg.train
    export_cfg = config.export.model_copy(update={"checkpoint": train["paths"]["checkpoints"],
                                                  "tokenizer": tok["tokenizer_dir"], "out_dir": str(root / "hf")})
    export = stage_result("export", export_flow(
        export_cfg, eval_blend=blend["blend_yaml"] if t.logging.eval_interval else None,
        eval_samples=t.logging.eval_iters * t.schedule.global_batch_size,  # the trainer's own
        eval_compat=t.data.compat, eval_cache_dir=t.data.cache_dir, upstream=[train["hash"]], return_state=True))
    # The export scored on each language's validation documents (beside any reference models), at the
    # training's sequence length unless the stage sets a context.
    eval_cfg = config.evaluate.model_copy(update={
        "models": [ModelSpec(path=export["hf_dir"], name="exported")], "blend": blend["blend_yaml"],
        "tokenizer": tok["tokenizer_dir"], "compat": t.data.compat,
        "context": config.evaluate.context or t.model.seq_length, "out_dir": str(root / "eval")})
    evaluation = stage_result("evaluate", evaluate_flow(eval_cfg, upstream=[export["hash"]], return_state=True))
    result = {"out_dir": str(root), "clean": clean, "tokenizer": tok, "dataset": data, "blend": blend,
              "train": train, "export": export, "evaluate": evaluation}
    create_markdown_artifact(summary_markdown(result), key="pipeline-summary", description="where everything is")
    return result
