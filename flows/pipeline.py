"""``bloom_pipeline``: corpus -> clean -> tokenizer -> per-language datasets -> [mixture search] -> blend ->
training -> HF export -> evaluation.

One typed ``PipelineConfig`` drives every stage (it is the deployment's parameter schema). The pipeline
only wires outputs to inputs and chains the stage hashes: each stage is a subflow that skips itself
when its marker matches (``flows.stages``), so re-running a failed pipeline resumes at the failed stage,
and changing one stage's config re-runs that stage and everything downstream of it, nothing upstream.
The clean stage (on unless ``config.clean`` is None) writes the cleaned shards the tokenizer and the build
read instead of the corpus; their keys fold in its key. With ``mixture_search`` set, a mixture search
(``flows.mixture_search``) runs on the built datasets with the blend stage's prior, bounds, split and budget,
and its chosen blend becomes the blend's weights (the blend's key folds in the search's). A stage that does not
complete ends the pipeline Failed (Cancelled for a cancelled training) with "<stage> stage <state>: <its
message>" (``flows.failures``).
The training stage also gets one named validation set per language (each language dataset's validation
split, ``language_valid_sets``) and the tokenizer, so the run logs every language's loss, perplexity and
bits per byte at each evaluation, and its summary shows them. The export's model card (README.md) is built
from the run's records with the clean summary and the tokenizer's fertility table (``card_records``), named
``export.name`` or else the pipeline's ``name``, and rebuilt after the evaluation with its eval.json.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from bloomdata.clean import SUMMARY_FILE
from bloomdata.config_loader import derive
from bloomdata.readers import SourceConfig
from bloomtrain.config import CardConfig
from bloomtrain.data import per_dataset_valid_sets
from bloomtrain.evaluation.config import ModelSpec
from flows.blend import blend_flow
from flows.clean import clean_flow, cleaned_sources
from flows.config import ExportCheck, PipelineConfig, TrainStageConfig
from flows.data import dataset_flow, tokenizer_flow
from flows.evaluate import bpb_table, evaluate_flow
from flows.export import export_flow, model_card_task
from flows.failures import stage_result, user_errors
from flows.mixture_search import mixture_search_flow
from flows.report import training_markdown
from flows.results import (
    BlendResult,
    CleanResult,
    DatasetResult,
    EvaluateResult,
    ExportResult,
    MixtureSearchResult,
    PipelineResult,
    TokenizerResult,
    TrainResult,
)
from flows.train import train_flow


def training_tokens(train: TrainStageConfig) -> int:
    """Tokens the run consumes: samples x sequence length (the blend's budget when none is given)."""
    s = train.train.schedule
    samples = s.train_samples if s.train_samples is not None else (s.train_iters or 0) * s.global_batch_size
    return samples * train.train.model.seq_length


def wire_training(train: TrainStageConfig, vocab_size: int, blend_yaml: str, out_dir: Path, *, tokenizer: str,
                  valid_sets: dict[str, str]) -> TrainStageConfig:
    """The training stage reading this pipeline's blend, with the model's vocabulary = the tokenizer's, the
    tokenizer (bits per byte) and ``valid_sets`` (one per language) beside any sets the config names itself
    (which win on a name clash)."""
    t = train.train
    # Megatron padding (multiple of 128 x tp) instead of BLOOM's fixed 250880 rows.
    model = derive(t.model, vocab_size=vocab_size, pad_vocab_size_to=None)
    data = derive(t.data, kind="blend", blend=blend_yaml, tokenizer=tokenizer,
                  valid_sets={**valid_sets, **t.data.valid_sets})
    return derive(train, train=derive(t, model=model, data=data), out_dir=str(out_dir))


def summary_markdown(result: PipelineResult) -> str:
    """The run's front page: the training summary (numbers, loss curve) with every stage's output path."""
    run, exported = result.train.result, result.export.result
    c = result.clean.result if result.clean else None
    paths = {
        **({"cleaned corpus": f"{c.data_dir} ({c.documents_kept:,} of {c.documents_in:,} documents kept)"}
           if c else {}),
        "tokenizer": f"{result.tokenizer.result.tokenizer_dir} ({result.tokenizer.result.report.vocab_size} tokens)",
        "datasets": f"{result.dataset.result.out_dir} ({result.dataset.result.tokens:,} tokens)",
        "blend": result.blend.result.blend_yaml,
        **run.paths.model_dump(),
        "HF export": exported.hf_dir,
        "evaluation": result.evaluate.result.eval_json,
    }
    md = training_markdown(run.summary, paths=paths, png=run.loss_png)
    md = md.replace("# Training summary", "# bloom_pipeline: training summary", 1)
    if exported.evaluation is not None:
        md += (f"\nThe exported model (transformers) on the same validation samples: loss "
               f"{exported.evaluation.loss:.4f}.\n")
    md += "\n## Samples (greedy, exported model)\n\n" + "\n".join(f"> {s}" for s in exported.samples) + "\n"
    return md + "\n## Bits per byte on held-out text\n\n```\n" + bpb_table(result.evaluate.result.models) + "\n```\n"


def corpus_stage(config: PipelineConfig, root: Path) -> tuple[list[SourceConfig], list[str], CleanResult | None]:
    """The clean stage when it is on: the sources the tokenizer and the build read (the cleaned shards, else the
    corpus), the stage keys they fold in, and the stage's result (None when off)."""
    if config.clean is None:
        return config.corpus, [], None
    clean_cfg = derive(config.clean, sources=config.corpus, out_dir=str(root / "clean"))
    clean = stage_result("clean", clean_flow(clean_cfg, return_state=True), CleanResult)
    return cleaned_sources(clean), [clean.key], clean


def data_stages(config: PipelineConfig, root: Path) -> tuple[CleanResult | None, TokenizerResult, DatasetResult]:
    """Clean (when on), tokenizer and the per-language datasets."""
    sources, cleaned, clean = corpus_stage(config, root)
    tok_cfg = derive(config.tokenizer, sources=sources, out_dir=str(root / "tokenizer"))
    tok = stage_result("tokenizer", tokenizer_flow(tok_cfg, fertility_docs_per_lang=config.fertility_docs_per_lang,
                                                   upstream=cleaned, return_state=True), TokenizerResult)
    build_cfg = derive(config.dataset, sources=sources, tokenizer=tok.result.tokenizer_dir, out_dir=str(root / "data"))
    data = stage_result("dataset", dataset_flow(build_cfg, upstream=[tok.key, *cleaned], return_state=True),
                        DatasetResult)
    return clean, tok, data


def search_stage(config: PipelineConfig, tok: TokenizerResult, data: DatasetResult,
                 root: Path) -> MixtureSearchResult | None:
    """The mixture search over every non-empty dataset when ``config.mixture_search`` is set (None otherwise),
    with the blend stage's prior, bounds, split and token budget, so that its proposal can be the blend."""
    if config.mixture_search is None:
        return None
    b = config.blend
    search_cfg = derive(config.mixture_search, datasets=prefixes_of(data), datasets_dir=None,
                        tokenizer=tok.result.tokenizer_dir, out_dir=str(root / "search"), prior_alpha=b.alpha,
                        prior_mixture=b.mixture, floor=b.floor, cap=b.cap, max_epochs=b.max_epochs,
                        token_budget=blend_budget(config), split=b.split,
                        train_range=b.train_range, valid_range=b.valid_range, compat=b.compat)
    return stage_result("mixture-search", mixture_search_flow(search_cfg, upstream=[data.key], return_state=True),
                        MixtureSearchResult)


def blend_budget(config: PipelineConfig) -> int:
    """The training tokens the blend (and a mixture search for it) is sized for: the blend's own, else the run's."""
    return config.blend.token_budget or training_tokens(config.train)


def prefixes_of(data: DatasetResult) -> dict[str, str]:
    """The build's non-empty datasets, name -> prefix."""
    return {name: o.prefix for name, o in data.result.outputs.items() if o.tokens > 0}


def blend_stage(config: PipelineConfig, data: DatasetResult, root: Path,
                search: MixtureSearchResult | None = None) -> BlendResult:
    """The blend of every non-empty dataset, for the training's token budget, sequence length and seed unless
    the stage sets them; with a mixture search, weighed by the mixture it chose (its blend.yaml's)."""
    train = config.train.train
    proposal = {"overrides": search.result.choice.weights} if search is not None else {}
    blend_cfg = derive(config.blend, token_budget=blend_budget(config),
                       seq_length=config.blend.seq_length or train.model.seq_length,
                       seed=config.blend.seed if config.blend.seed is not None else train.data.seed,
                       out_dir=str(root / "blend"), **proposal)
    upstream = [data.key, *([search.key] if search is not None else [])]
    return stage_result("blend", blend_flow(prefixes_of(data), blend_cfg, upstream=upstream, return_state=True),
                        BlendResult)


def train_stage(config: PipelineConfig, tok: TokenizerResult, blend: BlendResult, root: Path) -> tuple[
        TrainStageConfig, TrainResult]:
    """The training on the blend, with one validation set per language (its dataset's validation split):
    valid/<lang>/loss, ppl, bpb at each evaluation. Ends Failed or Cancelled with the job's last lines."""
    t0 = config.train.train
    sets, left_out = per_dataset_valid_sets(blend.result.blend_yaml, t0.model.seq_length, t0.data.compat) \
        if t0.logging.eval_interval else ({}, [])
    if left_out:
        get_run_logger().warning("bloom_pipeline: no per-language validation for %s: the validation split holds "
                                 "less than one sample of %d tokens", ", ".join(left_out), t0.model.seq_length + 1)
    train_cfg = wire_training(config.train, tok.result.report.vocab_size, blend.result.blend_yaml, root / "train",
                              tokenizer=tok.result.tokenizer_dir, valid_sets=sets)
    return train_cfg, stage_result("train", train_flow(train_cfg, upstream=[blend.key], return_state=True),
                                   TrainResult)


def card_records(clean: CleanResult | None, tok: TokenizerResult) -> dict[str, str]:
    """The export's card settings this pipeline knows: the clean stage's summary (when it ran), the tokenizer's
    fertility table, and the split the evaluation scores (each language's validation documents)."""
    records = {"fertility": tok.result.fertility_json, "evaluation_split": "validation"}
    if clean is not None:
        records["clean_summary"] = str(Path(clean.result.out_dir) / SUMMARY_FILE)
    return records


def model_stages(config: PipelineConfig, clean: CleanResult | None, tok: TokenizerResult, blend: BlendResult,
                 root: Path) -> tuple[
        TrainResult, ExportResult, EvaluateResult]:
    """Training, the HF export with its model card (scored on the training's own validation samples), the
    evaluation of the export on each language's validation documents (at the training's sequence length unless
    the stage sets a context) beside any reference models, and the card again with that evaluation."""
    train_cfg, train = train_stage(config, tok, blend, root)
    t = train_cfg.train
    export_cfg = derive(config.export, checkpoint=train.result.paths.checkpoints, tokenizer=tok.result.tokenizer_dir,
                        out_dir=str(root / "hf"), name=config.export.name or config.name, **card_records(clean, tok))
    check = ExportCheck(blend=blend.result.blend_yaml, samples=t.logging.eval_iters * t.schedule.global_batch_size,
                        compat=t.data.compat, seed=t.data.seed, seq_length=t.model.seq_length,
                        cache_dir=t.data.cache_dir) if t.logging.eval_interval else None
    export = stage_result("export", export_flow(export_cfg, check, upstream=[train.key], return_state=True),
                          ExportResult)
    eval_cfg = derive(config.evaluate, models=[ModelSpec(path=export.result.hf_dir, name="exported")],
                      blend=blend.result.blend_yaml, tokenizer=tok.result.tokenizer_dir, compat=t.data.compat,
                      context=config.evaluate.context or t.model.seq_length, out_dir=str(root / "eval"))
    evaluation = stage_result("evaluate", evaluate_flow(eval_cfg, upstream=[export.key], return_state=True),
                              EvaluateResult)
    # the export's card again, now with the evaluation's per-language results (its model-index)
    model_card_task(export.result.hf_dir,
                    CardConfig(evaluation=evaluation.result.eval_json, evaluated_model="exported"))
    return train, export, evaluation


@flow(name="bloom-pipeline")
@user_errors
def bloom_pipeline(config: PipelineConfig = PipelineConfig()) -> PipelineResult:
    """Run every stage, skipping the ones already done with the same config; returns where everything is."""
    root = Path(config.out_dir).resolve()
    # A stage that does not complete ends the pipeline in the same kind of state, its message naming the stage
    # (stage_result raises StageEnded; user_errors turns it into the state): a rerun resumes there.
    clean, tok, data = data_stages(config, root)
    search = search_stage(config, tok, data, root)
    blend = blend_stage(config, data, root, search)
    train, export, evaluation = model_stages(config, clean, tok, blend, root)
    result = PipelineResult(out_dir=str(root), clean=clean, tokenizer=tok, dataset=data, mixture_search=search,
                            blend=blend, train=train, export=export, evaluate=evaluation)
    create_markdown_artifact(summary_markdown(result), key="pipeline-summary", description="where everything is")
    return result
