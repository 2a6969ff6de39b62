"""Model cards: every export carries a BLOOM-style README.md built from the run's own records.

``records`` (``load_records``: everything a card reads, from a ``bloomtrain.provenance.Provenance``), the sections
(``details``, ``training_data``, ``evaluation``, ``usage``), ``compute`` (the compute estimate), ``images``
(languages.png, validation_curves.png), ``markdown`` (notes, tables, number formats) and ``card`` (the
``huggingface_hub.ModelCard``: metadata and body). ``bloomtrain export`` writes the card beside the weights;
``bloomtrain model-card`` rebuilds it from the records alone, e.g. after a later evaluation.
"""

from bloomtrain.card.card import CARD_FILE, CARD_FILES, build_card, rebuild_model_card, write_model_card
from bloomtrain.card.records import CardRecords, load_records

__all__ = ["CARD_FILE", "CARD_FILES", "CardRecords", "build_card", "load_records", "rebuild_model_card",
           "write_model_card"]
