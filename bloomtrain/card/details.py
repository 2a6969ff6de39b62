"""The model details section of a model card: architecture and objective, the training run (position, losses,
throughput, hardware, wall time), software versions, licence."""

from __future__ import annotations

from bloomtrain.card.compute import duration
from bloomtrain.card.markdown import fmt, note, table
from bloomtrain.card.records import CardRecords
from bloomtrain.environment import EXPORT_PACKAGES, TRAINING_PACKAGES, RunEnvironment


def architecture(r: CardRecords) -> str:
    p = r.provenance
    m, t = p.model, p.training
    rows = [
        ("architecture", "BLOOM decoder-only transformer: ALiBi position biases, LayerNorm after the embedding, "
                         "GeLU MLP of 4 x hidden size, input and output embeddings tied"),
        ("layers", m.num_layers), ("hidden size", m.hidden_size),
        ("attention heads", f"{m.num_heads} ({m.head_dim} dimensions each)"),
        ("vocabulary", f"{m.vocab_size:,} tokens ({m.padded_vocab_size(p.tp_size):,} embedding rows)"),
        ("sequence length", f"{m.seq_length:,} tokens"), ("parameters", f"{p.parameters:,}"),
        ("objective", f"next-token prediction: cross-entropy over sequences of {m.seq_length:,} tokens"),
    ]
    if t is not None:
        c = t.train_config
        rows.append(("training precision", "bf16 (DeepSpeed BF16 optimizer: fp32 master weights and gradient "
                     "accumulation, ZeRO stage 1)" if c.optim.precision == "bf16" else "fp32"))
        dp = t.world_size // (c.parallel.tp * c.parallel.pp)
        rows.append(("parallel layout", f"tensor {c.parallel.tp} x pipeline {c.parallel.pp} x data {dp} "
                                        f"({t.world_size} processes)"))
    if p.export is not None:
        rows.append(("weights", f"{p.export.dtype}, model.safetensors"))
    return "### Architecture and objective\n\n" + table(["", ""], rows, numeric_from=2)


def hardware(env: RunEnvironment) -> str:
    """'2 x GPU (NVIDIA H100 80GB HBM3), 1 node(s)' or '2 x CPU process (AMD EPYC), 1 thread(s) each, 1 node(s)'."""
    kind = "GPU" if env.device == "cuda" else f"{env.device.upper()} process"
    threads = f", {env.threads_per_process} thread(s) each" if env.device != "cuda" else ""
    return f"{env.processes} x {kind} ({env.device_name or 'model not recorded'}){threads}, {env.nodes} node(s)"


def training_run(r: CardRecords) -> str:
    t, s = r.provenance.training, r.summary
    if t is None:
        return note("the training run", r.notes["training"])
    rows: list[tuple[str, str]] = [
        ("checkpoint", f"`{r.provenance.checkpoint}`, tag `{r.provenance.tag}`"),
        ("iterations", f"{t.iteration:,}"),
        ("tokens seen", f"{t.consumed_tokens:,} ({t.consumed_samples:,} samples of {t.train_config.model.seq_length:,} "
                        "tokens)"),
    ]
    if s is not None:
        rows += [("final training loss", f"{s.final_loss:.4f} (perplexity {s.perplexity:.2f})")]
        if s.valid_loss is not None:
            rows.append(("validation loss, last evaluation",
                         f"{s.valid_loss:.4f} (perplexity {fmt(s.valid_ppl, '.2f')})"))
        if s.tokens_per_s is not None:
            rows.append(("throughput", f"{s.tokens_per_s:,.0f} tokens/s (median of the last logged iterations)"))
    distinct = {(e.device, e.device_name, e.processes, e.nodes, e.threads_per_process): e
                for e in (launch.environment for launch in r.launches)}
    rows += [("hardware", hardware(env)) for env in distinct.values()]
    if r.launches:
        seconds = sum(launch.seconds for launch in r.launches)
        rows.append(("wall time", f"{duration(seconds)} of training loop over {len(r.launches)} launch(es)"))
    notes = [note(what, r.notes[k]) for k, what in (("metrics", "training metrics"), ("launches", "hardware and wall "
             "time")) if k in r.notes]
    return "\n\n".join(["### Training run", table(["", ""], rows, numeric_from=2), *notes])


def software(r: CardRecords) -> str:
    trained = r.launches[-1].environment.software if r.launches else {}
    exported = r.provenance.export.software if r.provenance.export else {}
    names = list(dict.fromkeys(["python", *TRAINING_PACKAGES, "cuda", *EXPORT_PACKAGES]))
    rows = [(n, trained.get(n, "-"), exported.get(n, "-")) for n in names if n in trained or n in exported]
    if not rows:
        return note("software versions", "neither a launch record nor an export record holds them")
    return "### Software\n\nRead from the environment by the trainer at its last launch and by the export.\n\n" + \
        table(["package", "training", "export"], rows, numeric_from=3)


def license_line(r: CardRecords) -> str:
    lic = r.provenance.card.license
    if lic is None:
        return note("the licence", "none was given (no default is assumed): set `license` (`--license`) and rebuild "
                    "the card with `bloomtrain model-card`")
    return f"### License\n\n`{lic}`"


def model_details(r: CardRecords) -> str:
    return "\n\n".join(["## Model details", architecture(r), training_run(r), software(r), license_line(r)])
