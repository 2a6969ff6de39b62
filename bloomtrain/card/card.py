"""``build_card`` and ``write_model_card``: a ``huggingface_hub.ModelCard`` from ``CardRecords``, written with its
images into a folder.

The metadata is a ``ModelCardData`` (the Hub's own YAML writer): ``language`` (the blend's language codes),
``license`` (only when given), ``library_name: transformers``, ``pipeline_tag: text-generation``, tags, and the
``model-index`` results of the evaluation (bloomtrain.card.evaluation). The body follows BLOOM's card. Nothing
here reads a file: ``load_records`` did; the same records give the same card, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from bloomdata import durable
from bloomtrain.card.details import model_details
from bloomtrain.card.evaluation import eval_results, evaluation_section
from bloomtrain.card.records import CardRecords
from bloomtrain.card.training_data import languages, training_data
from bloomtrain.card.usage import compute_section, how_to_load, uses_and_limitations

BASE_TAGS = ("bloom", "bloomstack", "text-generation")


def card_data(r: CardRecords, name: str) -> ModelCardData:
    card = r.provenance.card
    langs = languages(r.blend)
    tags = list(dict.fromkeys([*BASE_TAGS, *(["multilingual"] if len(langs) > 1 else []), *card.tags]))
    results = eval_results(r.evaluation, card.evaluation_split)
    return ModelCardData(language=langs or None, license=card.license, library_name="transformers",
                         pipeline_tag="text-generation", tags=tags, model_name=name, eval_results=results or None)


def intro(r: CardRecords, name: str) -> str:
    p = r.provenance
    langs = languages(r.blend)
    on = f" on {len(langs)} language{'s' if len(langs) != 1 else ''}" if langs else ""
    return "\n\n".join([
        f"# {name}",
        f"{name} is a BLOOM-architecture causal language model with {p.parameters:,} parameters, trained with "
        f"bloomstack{on}. `bloomtrain model-card` wrote this card from the run's own records (the checkpoint's "
        "training record, metrics.jsonl, the blend, and the records named in provenance.json); what those records "
        "do not hold is left out, with a line saying so."])


def build_card(r: CardRecords, model_dir: Path, out_dir: Path) -> ModelCard:
    """The card of the model in ``model_dir``; its images are written into ``out_dir`` (the card's folder)."""
    name = r.provenance.card.model_name or model_dir.resolve().name
    body = "\n\n".join([intro(r, name), model_details(r), training_data(r, out_dir), evaluation_section(r, out_dir),
                        uses_and_limitations(r), compute_section(r), how_to_load(r, model_dir)])
    return ModelCard(f"---\n{card_data(r, name).to_yaml()}\n---\n\n{body}\n")


def write_model_card(r: CardRecords, model_dir: Path, out: Path) -> ModelCard:
    """Write the card of ``model_dir`` to ``out`` (its images beside it); atomic, like every file of an export."""
    out.parent.mkdir(parents=True, exist_ok=True)
    card = build_card(r, model_dir, out.parent)
    durable.write_text(out, str(card))
    return card
