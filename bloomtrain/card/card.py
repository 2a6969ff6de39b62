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
from bloomdata.errors import BloomstackError
from bloomtrain.card.details import model_details
from bloomtrain.card.evaluation import eval_results, evaluation_section
from bloomtrain.card.images import CURVES_PNG, LANGUAGES_PNG
from bloomtrain.card.published import published, run_name
from bloomtrain.card.records import CardRecords, load_records
from bloomtrain.card.training_data import languages, training_data
from bloomtrain.card.usage import compute_section, how_to_load, uses_and_limitations
from bloomtrain.config import CardConfig
from bloomtrain.provenance import PROVENANCE_FILE, load_provenance, write_provenance

BASE_TAGS = ("bloom", "bloomstack", "text-generation")
CARD_FILE = "README.md"  # the model card, where the Hub and transformers users look for it
# an export's files that are not the model
CARD_FILES = frozenset({CARD_FILE, PROVENANCE_FILE, LANGUAGES_PNG, CURVES_PNG})


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
    """The card of the model in ``model_dir``; its images are written into ``out_dir`` (the card's folder). The
    card names no path of this machine (bloomtrain.card.published)."""
    name = r.provenance.card.name or run_name(r.provenance)
    r = published(r, out_dir)
    body = "\n\n".join([intro(r, name), model_details(r), training_data(r, out_dir), evaluation_section(r, out_dir),
                        uses_and_limitations(r), compute_section(r), how_to_load(r, name)])
    return ModelCard(f"---\n{card_data(r, name).to_yaml()}\n---\n\n{body}\n")


def write_model_card(r: CardRecords, model_dir: Path, out: Path) -> ModelCard:
    """Write the card of ``model_dir`` to ``out`` (its images beside it); atomic, like every file of an export."""
    out.parent.mkdir(parents=True, exist_ok=True)
    card = build_card(r, model_dir, out.parent)
    durable.write_text(out, str(card))
    return card


def rebuild_model_card(path: Path, card: CardConfig | None = None, *, tag: str | None = None,
                       out: Path | None = None) -> Path:
    """(Re)build the card of an export or a checkpoint from its records; returns where it went.

    ``card``'s fields that were set replace the stored card settings; for an export they are kept in its
    provenance.json (the next rebuild keeps them) and the card goes to its README.md unless ``out`` is given.
    A checkpoint's card needs ``out`` (nothing is written into a checkpoint directory)."""
    provenance = load_provenance(path, tag, card)
    if out is None and provenance.export is None:
        raise BloomstackError(f"{path} is a checkpoint: set out (a file path) for its card (an export's card goes "
                              f"into the export, as {CARD_FILE})", keys=["out"])
    out = out or Path(path) / CARD_FILE
    records = load_records(provenance, Path(path))
    if provenance.export is not None:
        write_provenance(Path(path), provenance)
    write_model_card(records, Path(path), out)
    return out
